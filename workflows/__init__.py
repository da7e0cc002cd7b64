"""The sagas: deterministic Temporal workflows that decide; activities do the work."""
