"""turnlog's benchmarks: each scenario beside a raw baseline measured in the same run.

``python -m bench`` runs every scenario (``--quick`` for a smoke run, ``--scenario`` to pick),
prints the medians over repeated runs next to their baselines and targets, and writes
``bench/results/latest.json``. Nothing here is imported by the package or its tests.
"""
