"""kdiag lab: a local Kafka cluster for tests and drills."""
