"""The agent's side again, in a third process that never saw the pause: the resumed turn's
history already holds the person's answer as the result of the ask_user call."""

import asyncio

from turnlog import Settings, Turnlog, TurnResumed, history_dicts


async def continue_turn() -> None:
    async with Turnlog(Settings.from_env()) as tl, tl.resumed() as turns:
        async for turn in turns:  # waits for the next resumed turn
            if not isinstance(turn, TurnResumed):
                continue  # a PauseExpired, when asked for with include_expired=True
            print(f"thread {turn.thread_id}, resumed from {turn.checkpoint_id}:")
            for message in history_dicts(turn):
                text = message["content"].replace("\n", "\n" + " " * 13)
                print(f"  {message['role']:>9}: {text}")
            # hand history_dicts(turn) to your model: its next reply continues the turn
            await turns.commit()  # leaving the loop: mark this turn handled now
            return


asyncio.run(continue_turn())
