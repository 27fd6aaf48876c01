"""Collectors of the host's /proc and /sys."""
