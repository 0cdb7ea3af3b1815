"""Seeing what turnlog does: Prometheus metrics, the health endpoints, log configuration.

Components take a metrics object bound to a registry (by default turnlog's own, not
prometheus_client's global one), so a library user can scrape them with their own registry and
two deployments in one process do not collide. Nothing here imports a component: the worker,
the projector and ``ResumedTurns`` import this room, never the other way round.
"""
