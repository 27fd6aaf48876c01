"""Collectors of the local broker: its admin API and its JMX."""
