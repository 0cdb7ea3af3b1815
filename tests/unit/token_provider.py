"""An OAUTHBEARER token provider for the security tests (the hook a deployment writes)."""

from aiokafka.abc import AbstractTokenProvider


class StaticTokenProvider(AbstractTokenProvider):
    async def token(self) -> str:
        return "header.payload.signature"
