"""The scenarios, each a module with ``async def run(ctx) -> list[Row]``, and what they share."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import KID, Deployment, answer_for, pause_for
from turnlog.contracts.interactions import default_interactions
from turnlog.contracts.resume import PreparedResume, prepare_resume
from turnlog.settings import Settings
from turnlog.tokens import PauseClaims
from turnlog.wire.codec import encode

#: The raw loop that also verifies one Ed25519 signature of a pause token per record: the work
#: no correct resume can skip, so the fair floor for turnlog's ratio.
VERIFY_MODE = "raw+verify"


@dataclass
class Context:
    bootstrap: str
    run_id: str
    quick: bool
    repeats: int
    options: Any  # the parsed command line
    profile_dir: Path | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # what one scenario tells a later one

    def log(self, message: str) -> None:
        print(f"  {message}", file=sys.stderr, flush=True)

    def profile_path(self, name: str) -> str | None:
        if self.profile_dir is None:
            return None
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        return str(self.profile_dir / name)


def client_settings(dep: Deployment, root: Path) -> Settings:
    """The deployment's settings for a ``Turnlog`` of the harness: its signing key written to a
    keys directory under ``root`` (a client checks tokens as a user's would), its own state."""
    keys = root / "keys"
    keys.mkdir()
    (keys / f"{KID}.private.pem").write_text(dep.private_pem)
    return dataclasses.replace(dep.settings, keys_dir=keys, state_dir=root / "client")


def sample_token(dep: Deployment, messages: int = 20) -> str:
    """A pause token of the deployment's key, like every answer's: what the "copy + verify"
    loop checks the signature of once per record."""
    pause = pause_for("thread-sample", messages=messages)
    return dep.issuer.issue(PauseClaims.for_pause(pause))


def sample_outputs(dep: Deployment, messages: int) -> tuple[bytes, bytes]:
    """The encoded ``TokenConsumed`` and ``TurnResumed`` the worker writes for one sample answer:
    the bytes the raw loop writes per answer, so both move the same volume."""
    pause = pause_for("thread-sample", messages=messages)
    answer = answer_for(pause, dep.issuer.issue(PauseClaims.for_pause(pause)))
    prepared = prepare_resume(
        answer,
        verifier=dep.verifier,
        interactions=default_interactions(),
        pause=pause,
        ledger=None,
        now=answer.occurred_at,
    )
    if not isinstance(prepared, PreparedResume):
        raise RuntimeError(f"the sample answer was refused: {prepared}")
    stamp = {"event_id": "0" * 32, "occurred_at": answer.occurred_at, "package_version": "bench"}
    return encode(prepared.token_consumed(**stamp)), encode(prepared.turn_resumed(**stamp))


def worker_config(
    ctx: Context,
    dep: Deployment,
    mode: str,
    *,
    app_id: str,
    state_dir: Path | None = None,
    expect: int = 0,
    report_at: tuple[int, ...] = (),
    restore: bool = False,
    raw_topics: tuple[str, str] | None = None,
    profile: str | None = None,
) -> dict[str, Any]:
    """The child's configuration (see :mod:`bench.workerproc`)."""
    settings = dep.settings
    config: dict[str, Any] = {
        "mode": mode,
        "bootstrap": settings.bootstrap_servers,
        "prefix": settings.topic_prefix,
        "app_id": app_id,
        "partitions": settings.partitions,
        "commit_interval_ms": settings.commit_interval_ms,
        "max_batch": ctx.options.max_batch,
        "expect": expect,
        "report_at": list(report_at),
        "profile": profile,
    }
    if mode == "turnlog":
        if state_dir is None:
            raise ValueError("turnlog's worker needs a state directory")
        config.update(state_dir=str(state_dir), kid=KID, private_pem=dep.private_pem)
    else:
        consumed, resumed = sample_outputs(dep, ctx.options.messages)
        config.update(consumed_hex=consumed.hex(), resumed_hex=resumed.hex(), restore=restore)
        if mode == VERIFY_MODE:
            config.update(kid=KID, private_pem=dep.private_pem, token=sample_token(dep))
        if raw_topics is not None:
            config.update(consumptions_topic=raw_topics[0], resumed_topic=raw_topics[1])
    return config
