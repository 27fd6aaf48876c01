"""kdiag: Kafka host and broker diagnostics."""

__version__ = "0.1.0"
