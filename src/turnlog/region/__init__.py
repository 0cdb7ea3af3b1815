"""A second region: turnlog's topics mirrored from cluster A to cluster B (MirrorMaker 2,
active/passive), the operator's promotion of B, and the mirror's lag.

- :mod:`turnlog.region.control`: B's control topic (``<prefix>region``, never mirrored) and
  its one kind of record, :class:`~turnlog.region.control.Promotion` -- who moved turnlog to
  this region, and when. Passive workers (``turnlog worker --passive``) keep warm copies of the
  mirrored partitions and join the answers group only once they read one.
- :mod:`turnlog.region.lag`: how far B stands behind A, per partition (records and seconds):
  what a loss of A now would leave unmirrored.

The cross-region audit (what the window held: answers lost, pauses missing, tokens resumed in
both) is :mod:`turnlog.audit.regions`; the procedures are ``docs/operations/regions.md``.
"""
