"""``turnlog audit``: the exactly-once invariant checked from the log alone.

:mod:`~turnlog.audit.invariant` holds the rules (pure: facts in, a verdict out) and
:mod:`~turnlog.audit.scan` reads the five topics and the worker group's offsets to feed them.
"""

from turnlog.audit.invariant import Kind, Report, Violation, judge
from turnlog.audit.scan import Auditor

__all__ = ["Auditor", "Kind", "Report", "Violation", "judge"]
