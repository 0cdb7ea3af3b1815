"""Pure values and rules. Nothing in this package imports Kafka, RocksDB or reads a clock."""
