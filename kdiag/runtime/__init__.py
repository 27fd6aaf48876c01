"""The collection cycle and the discovery of the local broker."""
