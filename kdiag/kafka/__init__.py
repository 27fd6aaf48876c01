"""Talking to Kafka: client settings, JMX, the JVM, the admin worker and fleet coordination."""
