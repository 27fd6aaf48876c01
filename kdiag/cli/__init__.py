"""The kdiag command line."""
