"""Kafka framing and what a client may send: frames read within limits, checked before decoding, SASL."""
