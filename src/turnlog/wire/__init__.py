"""The wire format, private to the package: single-object Avro values and their record mapping.

- :mod:`~turnlog.wire.codec`: encode/decode by fingerprint, schema loading and resolution;
- :mod:`~turnlog.wire.records`: turnlog's value classes <-> Avro records;
- :mod:`~turnlog.wire.compiled`: schemas compiled once into fast encoders/decoders, byte-equal to
  fastavro's;
- :mod:`~turnlog.wire.skim`: a pause's index fields read without decoding its messages.

Pure: bytes in, values out. Nothing here talks to Kafka or the disk (the schemas ship inside the
package and are read through :mod:`importlib.resources`).
"""
