"""Long-running processes: the Temporal worker, the gateway, the mirror, the webhook receiver."""
