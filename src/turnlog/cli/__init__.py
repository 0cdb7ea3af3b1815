"""The ``turnlog`` command: :mod:`~turnlog.cli.app` holds the app and how a verb runs; each verb
group has its module, imported here -- in the order ``--help`` lists them -- so that its verbs
are registered."""

# isort: skip_file
from __future__ import annotations

from turnlog.cli.app import app, main
from turnlog.cli import turns
from turnlog.cli import services
from turnlog.cli import admin
from turnlog.cli import status
from turnlog.cli import audit
from turnlog.cli import trail
from turnlog.cli import inbox
from turnlog.cli import notify as notify  # registers `turnlog notify`
from turnlog.cli import region as region  # registers `turnlog region`

__all__ = ["admin", "app", "audit", "inbox", "main", "services", "status", "trail", "turns"]
