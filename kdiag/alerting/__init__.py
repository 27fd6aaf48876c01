"""Prometheus alerting rules and the Alertmanager push."""
