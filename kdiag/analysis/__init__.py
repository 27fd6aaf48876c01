"""From samples to diagnoses: signals, the rule catalog, the engine, scope and the state file."""
