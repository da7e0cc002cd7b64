"""The Temporal worker: runs the sagas and their activities."""
