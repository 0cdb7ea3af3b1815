"""The person's side, in another process: the answer is checked against the token and the
interaction's schema, published, and then decided by a worker -- resumed, or refused by name."""

import asyncio
import json
from pathlib import Path
from typing import Any

from turnlog import Settings, Turnlog


async def answer(pause: dict[str, Any]) -> None:
    reply = {"answers": [{"selections": ["eu"], "other": None}]}
    async with Turnlog(Settings.from_env()) as tl:
        sent = await tl.answer(pause["token"], reply, **pause["axes"])
        print(f"published answer {sent.answer_id}")
        outcome = await tl.outcome(sent.answer_id, timeout=60)
        print("resumed" if outcome.accepted else f"refused: {outcome.reason}")


asyncio.run(answer(json.loads(Path("pause.json").read_text())))
