"""kdiag bench: a producer and consumer benchmark."""
