"""Side effects the sagas ask for: Kafka, ZooKeeper, Spark jobs and the ledger; idempotent."""
