"""The curated public API: every name in ``turnlog.__all__`` resolves and is documented, and
importing the package stays cheap (no Kafka client, no store until a name needs one)."""

from __future__ import annotations

import subprocess
import sys

import turnlog


def test_every_public_name_resolves_and_the_package_docstring_names_it() -> None:
    doc = turnlog.__doc__ or ""
    missing = [n for n in turnlog.__all__ if n != "__version__" and f"``{n}``" not in doc]
    assert missing == []
    for name in turnlog.__all__:
        assert getattr(turnlog, name) is not None
    assert sorted(dir(turnlog)) == sorted(turnlog.__all__)


def test_a_private_name_is_not_an_attribute_of_the_package() -> None:
    try:
        turnlog.AnswerPublisher  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "AnswerPublisher" in str(exc)
    else:
        raise AssertionError("AnswerPublisher is private")


def test_importing_the_package_loads_no_kafka_client_or_store() -> None:
    code = "import sys, turnlog; print([m for m in ('aiokafka', 'rocksdict') if m in sys.modules])"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"
