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


def test_the_packages_opening_example_pauses_with_a_request_ask_user_accepts() -> None:
    """Issue 37: ``help(turnlog)`` opened on ``request={"q": "region?"}``, which the pause
    check refuses; the example's request and answer are ones the built-in checks take."""
    import ast
    import re

    import turnlog
    from turnlog.contracts.interactions import check_ask_user_request, check_ask_user_response

    doc = turnlog.__doc__ or ""
    asked = ast.literal_eval(re.search(r"asked = (\{.*\})\n", doc).group(1))  # type: ignore[union-attr]
    answer = re.search(r"answer = (\{.*\})\n", doc).group(1)  # type: ignore[union-attr]
    assert "request=asked" in doc
    assert check_ask_user_request(asked) is None
    answered = ast.literal_eval(answer)
    assert check_ask_user_response(asked, answered) is None
