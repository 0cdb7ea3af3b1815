"""The one lifecycle every client-owning class has: ``start()``, ``stop()``, ``async with``.

Written once so that it is right once: ``async with`` calls ``stop()`` even when ``start()``
fails or is cancelled half-way -- Python skips ``__aexit__`` when ``__aenter__`` raises, and a
start that opened a consumer and then failed on metadata would otherwise leak it.
``stop()`` must therefore accept a half-started object, and be idempotent.
"""

from __future__ import annotations

from typing import Self


class Lifecycle:
    """Base of the classes that own Kafka clients: subclasses define ``start`` and ``stop``."""

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
