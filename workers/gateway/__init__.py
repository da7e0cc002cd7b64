"""The gateway: a Kafka-protocol proxy that routes each client identity to the cluster it is bound to.

A request's walk: ``framing`` reads it within the limits (and logs the client in), ``session`` (one per
client connection) has ``routing`` decide it and carries the decision out, handing group requests to
``groups``, a moved producer's batches to ``producers`` and requests naming migrated partitions to
``migrated``; ``brokers`` sends it on and presents the answer as clients must see it. ``shared`` is the
one seam between a session and the gateway's state, which ``process`` holds (listeners, worker
processes, health, metrics); ``main`` is the ``switchyard gateway`` command.
"""
