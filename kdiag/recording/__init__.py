"""Recordings of /proc and /sys for replay."""
