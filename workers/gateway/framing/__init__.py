"""What a client may send the gateway: frames read within limits, record batches, SASL (the codec they
are decoded with: :mod:`switchyard.frames`)."""
