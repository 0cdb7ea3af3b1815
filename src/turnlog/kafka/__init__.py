"""Everything that knows it is talking to Kafka: topics, partitioning, the log reader.

The one room that may touch aiokafka's internals; each such use is commented where it is made
and covered by a test that fails when a client upgrade breaks it
(``tests/unit/test_kafka_internals.py``).
"""
