"""The person's side of an approval: approve the call, edit its arguments, or reject it with a
message. Each decision names the call's tool and the hash of its arguments, so it can only ever
decide on the call the pause asked about.

    python docs/snippets/approval_decide.py approve|edit|reject
"""

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from turnlog import Settings, Turnlog, approve, edit, reject


def decision(kind: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if kind == "approve":
        return approve(tool, arguments)
    if kind == "edit":  # the person's arguments replace the model's
        return edit(tool, arguments, {**arguments, "region": "us"})
    return reject(tool, arguments, "not on a Friday")


async def decide(pause: dict[str, Any], kind: str) -> None:
    response = decision(kind, pause["call"]["tool"], pause["call"]["arguments"])
    async with Turnlog(Settings.from_env()) as tl:
        sent = await tl.answer(pause["token"], response, **pause["axes"])
        outcome = await tl.outcome(sent.answer_id, timeout=60)
        print(f"{kind}: " + ("resumed" if outcome.accepted else f"refused: {outcome.reason}"))


asyncio.run(decide(json.loads(Path("pause.json").read_text()), sys.argv[1]))
