"""The gateway process: listeners, worker processes, health, metrics, and what it publishes for sagas."""
