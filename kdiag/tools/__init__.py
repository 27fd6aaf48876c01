"""Tools built on the runtime: benchmarks, the Kafka lab and fault drills."""
