"""The daemon that wires collectors, pipeline, probe and web server together."""
