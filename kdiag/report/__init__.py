"""Diagnoses as text and as HTML."""
