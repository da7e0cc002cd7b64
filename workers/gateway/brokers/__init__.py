"""The real brokers behind the gateway: connections to them, where they are, and their answers
rewritten to name virtual brokers."""
