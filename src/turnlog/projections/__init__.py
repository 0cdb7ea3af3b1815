"""Projections of the log into local state: the RocksDB store and the projector that fills it."""
