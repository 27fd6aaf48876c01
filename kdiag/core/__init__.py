"""The core: samples, roots, history, safe I/O, redaction, quoting, units and YAML; imports nothing else of kdiag."""
