"""The synthetic probe: produce, consume and time a sequence of messages."""
