"""Kafka's wire format: frames, headers and bodies, with every length checked before kio decodes it.

Shared by the gateway, which parses what clients send, and by the requests Switchyard sends brokers
itself (:mod:`switchyard.wire`)."""
