"""The agent's side again, in a third process that never saw the pause: the resumed turn's
history already holds the person's answer as the result of the ask_user call. It asks for its
own thread's turn: whatever other threads have waiting is left to whoever continues them."""

import asyncio

from turnlog import Settings, Turnlog, history_dicts


async def continue_turn() -> None:
    async with Turnlog(Settings.from_env()) as tl:
        # thread-1's resumed turn: read from its partition with no consumer group, so nothing
        # of any other thread is taken or committed; then claimed, so it is continued once
        # (a second run raises AlreadyContinued, naming who holds it)
        turn = await tl.resumed_turn("thread-1", timeout=60)
        print(f"thread {turn.thread_id}, resumed from {turn.checkpoint_id}:")
        for message in history_dicts(turn):
            text = message["content"].replace("\n", "\n" + " " * 13)
            print(f"  {message['role']:>9}: {text}")
        # hand history_dicts(turn) to your model: its next reply continues the turn


asyncio.run(continue_turn())
