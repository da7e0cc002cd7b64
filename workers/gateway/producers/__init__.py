"""Idempotent producers across a switch: whose ids, translated where, which batches may go, and what
was acknowledged."""
