"""Consumer groups through the gateway: where members joined, their commits carried across a switch,
the members a switch moved removed from the cluster they left."""
