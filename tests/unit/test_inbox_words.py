"""The person's words (issue 29, item 2), over HTTP without a broker: what happens next, errors
as pages and never JSON in a browser's window, the form kept with its mistake when sent without
the page's script, a skeleton for a custom interaction's response, JSON mistakes in plain words.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_inbox_app import Client, _csrf, client
from tests.unit.test_inbox_views import put
from turnlog.contracts.approvals import APPROVE_TOOL_CALL
from turnlog.contracts.refusals import RefusalReason
from turnlog.inbox.auth import Csrf
from turnlog.inbox.forms import NEXT_STEP, FormProblem, loads, plain_words, skeleton
from turnlog.projections.store import Store

__all__ = ["client"]  # the fixture, over this module's projection

PICK = {
    "type": "record",
    "name": "PickSlot",
    "fields": [
        {"name": "date", "type": "string"},
        {"name": "seats", "type": "int"},
        {"name": "room", "type": {"type": "enum", "name": "Room", "symbols": ["red", "blue"]}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
PAGE = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}  # what a browser's window asks


@pytest.fixture
def projection(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "projection"
    with Store.open(path) as store:
        put(store, "mine", "t-mine")
        put(store, "slot", "t-slot", interaction="pick_slot", request={"what": "a slot"})
        put(
            store, "call", "t-call", interaction=APPROVE_TOOL_CALL,
            request={"tool": "deploy", "arguments": {"replicas": 3}},
        )  # fmt: skip
        yield path


def _textarea(page: str, name: str) -> str:
    found = re.search(rf'<textarea id="{name}"[^>]*>(.*?)</textarea>', page, re.S)
    assert found, page
    return html.unescape(found.group(1))


def test_an_outcome_says_what_happens_next_and_a_lost_race_is_not_a_rejection() -> None:
    assert NEXT_STEP["reject"] == "sent: the agent continues with your rejection"
    assert NEXT_STEP["approve"] == "sent: the agent runs the call"
    assert NEXT_STEP["answer"] == "sent: the agent continues with your answer"
    assert plain_words(RefusalReason.ALREADY_CONSUMED) == "someone else answered first"
    assert not any("reject" in w for w in (plain_words(r) for r in RefusalReason))


def test_bad_json_is_told_by_line_and_column_in_plain_words() -> None:
    with pytest.raises(FormProblem) as caught:
        loads('{\n  "date": "x",\n  "seats": 2,\n}', "the response")
    said = str(caught.value)
    assert said == (
        "the response: not valid JSON at line 4, column 1: "
        "a name in double quotes was expected (or a comma is extra)"
    )
    with pytest.raises(FormProblem, match="line 1, column 10: a value was expected"):
        loads('{"date": tomorrow}', "the response")
    with pytest.raises(FormProblem, match="the response: empty"):
        loads("  ", "the response")


def test_a_schema_gives_a_skeleton_of_its_required_fields() -> None:
    assert skeleton(PICK) == '{\n  "date": "",\n  "seats": 0,\n  "room": "red"\n}'
    unknown = {"type": "record", "name": "X", "fields": [{"name": "a", "type": "Nope"}]}
    assert skeleton(unknown) == ""  # a schema it cannot follow: the box starts empty


async def test_a_custom_interaction_s_form_starts_from_its_schema(client: Client) -> None:
    client.service.tl.interactions.register("pick_slot", PICK)
    await client.login("tenant-a")
    page = (await client.http.get("/pause/t-slot")).text
    assert _textarea(page, "response") == '{\n  "date": "",\n  "seats": 0,\n  "room": "red"\n}'


async def test_without_the_script_a_mistake_returns_the_form_with_it_and_the_input(
    client: Client,
) -> None:
    client.service.tl.interactions.register("pick_slot", PICK)
    csrf = await client.login("tenant-a")
    typed = '{"date": "2026-12-24", "seats": 2,}'
    sent = await client.http.post("/pause/t-slot/answer", data={"csrf": csrf, "response": typed})
    assert sent.status_code == 422
    assert 'id="answer-form"' in sent.text and "Not answered" not in sent.text
    assert "line 1, column 35" in sent.text and "Expecting" not in sent.text
    assert _textarea(sent.text, "response") == typed
    # An approval: the decision, the edited arguments and the note come back as typed.
    edited = '{"replicas": "five"}'
    data = {"csrf": csrf, "decision": "edit", "arguments": edited, "message": "more"}
    sent = await client.http.post("/pause/t-call/answer", data=data)
    assert sent.status_code == 422 and "must stay a number" in sent.text
    assert _textarea(sent.text, "arguments") == edited
    assert _textarea(sent.text, "message") == "more"
    assert re.search(r'value="edit" checked', sent.text)
    # A question: the choice and the text.
    sent = await client.http.post("/pause/t-mine/answer", data={"csrf": csrf, "other0": "x" * 3})
    assert sent.status_code == 503 and "Kafka is not reachable" in sent.text  # no broker here
    assert _textarea(sent.text, "other0") == "xxx"
    assert 'id="answer-form"' in sent.text
    assert client.service.answered_here("t-mine") is None


async def test_a_stale_form_gets_the_page_back_fresh_with_one_line(client: Client) -> None:
    await client.login("tenant-a")
    session = client.http.cookies["turnlog_session"]
    stale = Csrf().token(session)  # the token the inbox gave before it restarted
    sent = await client.http.post(
        "/pause/t-call/answer", data={"csrf": stale, "decision": "approve"}, headers=PAGE
    )
    assert sent.status_code == 403 and sent.headers["content-type"].startswith("text/html")
    assert "CSRF" not in sent.text and "out of date" in sent.text
    assert 'id="answer-form"' in sent.text
    fresh = _csrf(sent.text)
    assert fresh != stale and fresh == _csrf((await client.http.get("/pause/t-call")).text)
    assert 'value="approve" checked' not in sent.text  # what a failed check carried is dropped


async def test_no_route_answers_a_browser_s_window_with_json(client: Client) -> None:
    for path in ("/events", "/rows", "/pause/t-mine/state"):
        out = await client.http.get(path, headers=PAGE)
        assert out.status_code == 303 and out.headers["location"] == "/login", path
    await client.login("tenant-a")
    moves = {"/events": "/", "/rows?thread=x": "/?thread=x", "/pause/t-mine/state": "/pause/t-mine"}
    for path, where in moves.items():
        out = await client.http.get(path, headers=PAGE)
        assert out.status_code == 303 and out.headers["location"] == where, path
    for method, path in (("GET", "/nowhere"), ("GET", "/logout"), ("PUT", "/")):
        out = await client.http.request(method, path, headers=PAGE)
        assert out.status_code in {404, 405}, path
        assert out.headers["content-type"].startswith("text/html"), path
        assert 'id="refused"' in out.text, path
    # The page's own script still gets JSON.
    state = await client.http.get("/pause/t-mine/state", headers={"Accept": "application/json"})
    assert state.json()["status"] == "pending"
