"""kdiag's configuration: the settings file and the probe's settings."""
