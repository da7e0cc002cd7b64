"""Verification and reconciliation on Spark: a link's copy against its source; the lost window."""
