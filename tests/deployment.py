"""A deployment for tests: settings, keys, topics and a sample paused turn."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from turnlog.clock import utc_now
from turnlog.contracts.axes import Axes
from turnlog.contracts.checkpoint import ReservedCall, TurnCheckpoint, captured_messages
from turnlog.contracts.interactions import InteractionRegistry, default_interactions
from turnlog.kafka.topics import TopicSet
from turnlog.settings import Settings
from turnlog.tokens import Keyring, TokenIssuer, TokenVerifier, generate_ed25519


@dataclass
class Deployment:
    settings: Settings
    keyring: Keyring
    issuer: TokenIssuer
    verifier: TokenVerifier
    interactions: InteractionRegistry
    topics: TopicSet


def make_deployment(
    bootstrap: str, prefix: str, app: str, state_dir: Path, *, partitions: int = 6
) -> Deployment:
    settings = Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=prefix,
        application_id=app,
        state_dir=state_dir,
        partitions=partitions,
        commit_interval_ms=50,
    )
    private_pem, _ = generate_ed25519("test-key")
    return with_keyring(settings, Keyring.ed25519("test-key", private_pem))


def with_keyring(settings: Settings, keyring: Keyring) -> Deployment:
    """The deployment of ``settings`` signing and verifying with ``keyring``."""
    return Deployment(
        settings=settings,
        keyring=keyring,
        issuer=TokenIssuer(keyring, issuer=settings.issuer, audience=settings.audience),
        verifier=TokenVerifier(
            keyring,
            issuer=settings.issuer,
            audience=settings.audience,
            leeway=timedelta(seconds=settings.token_leeway_seconds),
        ),
        interactions=default_interactions(),
        topics=TopicSet.from_settings(settings),
    )


REQUEST = json.dumps({"questions": [{"question": "Which region?", "options": ["eu", "us"]}]})


def sample_checkpoint(
    thread_id: str, *, checkpoint_id: str = "cp-1", sequence: int = 1, reserved: int = 3
) -> TurnCheckpoint:
    """A turn that paused on ``ask_user`` (call-1) with ``reserved - 1`` other calls reserved."""
    calls = [ReservedCall("call-1", "ask_user", json.loads(REQUEST))]
    calls += [ReservedCall(f"call-{i}", "search", {"q": i}) for i in range(2, reserved + 1)]
    messages = captured_messages(
        [
            {"role": "system", "content": "You deploy services."},
            {"role": "user", "content": "Deploy the billing service."},
        ],
        "I need to know the region first.",
        calls,
    )
    return TurnCheckpoint(
        run_id=f"run-{thread_id}",
        session_id=f"session-{thread_id}",
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
        scope_hash="tenant-a",
        tool_call_id="call-1",
        interrupt_id=f"int-{thread_id}",
        name="ask_user",
        prompt="Continue with the person's answer.",
        messages=messages,
        sequence=sequence,
        tenant_id="tenant-a",
        created_at=utc_now(),
        package_version="test",
    )


ANSWER = {"answers": [{"selections": ["eu"], "other": None}]}


def axes(cp: TurnCheckpoint) -> dict[str, str | None]:
    """The axes of the pause as plain keyword arguments (JSON-able, for child processes)."""
    return dict(Axes.of_pause(cp))
