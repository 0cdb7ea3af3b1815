"""A rejection never quotes what an answer said, nor the conversation: rejections are not
compacted and stay for the topic's retention (a week by default), past any ``turnlog forget``.

Answers carrying one unique marker in every place a refusal can point at -- a selection not
offered, free text where none is taken, a value of the wrong type, an unknown field, a map's key,
an enum's value, an approval's tool, hash and edited arguments, a stated axis -- and questions
carrying it too (a refusal used to quote the question it found unanswered) are published past
every publisher check, refused by the real worker each by its intended rule, and then every
byte of the rejections topic is read: none holds the marker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Names
from tests.deployment import sample_checkpoint
from tests.integration.test_api import api_settings
from tests.integration.test_approvals import deploy_turn
from tests.kafka_helpers import read_to_end
from turnlog import Turnlog
from turnlog.contracts.approvals import APPROVE_TOOL_CALL, approval_request, approve
from turnlog.producers.answers import AnswerPublisher

pytestmark = pytest.mark.timeout(120)

#: A schema with a map: its keys are the answer's own text.
TAGGED = {
    "type": "record",
    "name": "Tagged",
    "fields": [{"name": "tags", "type": {"type": "map", "values": "string"}}],
}


async def test_no_rejection_quotes_what_the_answer_said(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    marker = f"QUOTED{uuid.uuid4().hex}"
    number = 98765432123  # a number is quoted as digits
    settings = api_settings(bootstrap, names, tmp_path)
    async with Turnlog(settings) as tl:
        tl.interactions.register("tagged", TAGGED)
        worker = asyncio.create_task(tl.run_worker())
        asked = {
            "questions": [
                {"question": f"Which region, {marker}?", "options": ["eu", "us"],
                 "allow_other": False, "multiSelect": False},
                {"question": f"Which size, {marker}?", "options": ["S", "L"]},
            ]
        }  # fmt: skip
        question = await tl.pause(
            dataclasses.replace(sample_checkpoint(f"q-{names.app}"), prompt=f"Ask {marker}"),
            request=asked,
        )
        shown = {"service": "billing", "region": "eu"}
        approval = await tl.pause(
            deploy_turn(f"a-{names.app}", shown),
            request=approval_request("deploy", shown),
            interaction=APPROVE_TOOL_CALL,
        )
        tagged = await tl.pause(
            dataclasses.replace(sample_checkpoint(f"t-{names.app}"), name="tagged"),
            request={"asks": "tags"},
            interaction="tagged",
        )
        fine = {"selections": ["eu"], "other": None}
        size = {"selections": ["S"], "other": None}
        wrongs: list[tuple[Any, Any, dict[str, Any], str]] = [
            (question, {"answers": [{"selections": [marker], "other": None}, size]}, {},
             "response_mismatch"),  # a selection not offered
            (question, {"answers": [{"selections": [], "other": marker}, size]}, {},
             "response_mismatch"),  # free text where allow_other is false
            (question, {"answers": [fine]}, {}, "response_mismatch"),  # question 2 unanswered
            (question, {"answers": [fine, {"selections": [], "other": None}]}, {},
             "response_mismatch"),  # an empty answer to question 2
            (question, {"answers": [{"selections": ["eu"], "other": number}, size]}, {},
             "response_invalid"),  # a number where text goes
            (question, {"answers": [fine, size], marker: True}, {},
             "response_invalid"),  # a field the schema does not know
            (question, {"answers": [fine, size]}, {"session_id": marker},
             "session_mismatch"),  # a stated axis
            (question, {"answers": [fine, size]}, {"run_id": marker}, "run_mismatch"),
            (question, {"answers": [fine, size]}, {"call_id": marker}, "call_mismatch"),
            (question, {"answers": [fine, size]}, {"scope_hash": marker}, "scope_mismatch"),
            (approval, {**approve("deploy", shown), "decision": marker}, {},
             "response_invalid"),  # an enum's value
            (approval, approve(marker, shown), {}, "approval_mismatch"),  # another tool
            (approval, {**approve("deploy", shown), "arguments_hash": marker}, {},
             "approval_mismatch"),  # other arguments
            (approval, {**approve("deploy", shown), "decision": "edit",
                        "arguments_json": "{" + marker}, {},
             "response_invalid"),  # edited arguments that are no JSON
            (approval, {**approve("deploy", shown), "arguments_json": json.dumps(marker)}, {},
             "response_invalid"),  # edited arguments without an edit
            (tagged, {"tags": {marker: 5}}, {}, "response_invalid"),  # a map's key
            (tagged, {"tags": {"k": marker}, "x": 1}, {}, "response_invalid"),
        ]  # fmt: skip
        async with AnswerPublisher(settings, tl.verifier, topics=tl.topics) as publisher:
            sent = []
            for paused, response, axes, reason in wrongs:
                answer = publisher.build(paused.token, response, **{**paused.axes, **axes})
                await publisher.publish_unchecked(answer)
                sent.append((answer.answer_id, reason))
            refused = []
            for answer_id, reason in sent:
                outcome = await tl.outcome(answer_id, timeout=60)
                assert outcome.rejected is not None, outcome
                refused.append((outcome.rejected.reason, outcome.rejected.detail))
                assert outcome.rejected.reason == reason, refused[-1]
        rejections = [
            r.value
            for r in await read_to_end(
                bootstrap, tl.topics.rejections, isolation_level="read_uncommitted"
            )
            if r.value
        ]
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    assert len(rejections) >= len(wrongs)
    quoting = [value for value in rejections if marker.encode() in value]
    quoting += [value for value in rejections if str(number).encode() in value]
    assert not quoting, [detail for _, detail in refused]
    print(*(f"{reason}: {detail}" for reason, detail in refused), sep="\n")
