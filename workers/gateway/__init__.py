"""The gateway: a Kafka-protocol proxy that routes each client identity to the cluster it is bound to."""
