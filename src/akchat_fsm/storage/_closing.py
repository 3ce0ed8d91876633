"""Context-manager plumbing every shipped adapter shares: exiting the block closes it.

Written once here so that each adapter only says *how* it closes (``close`` / ``aclose``).
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["AsyncClosing", "Closing"]


class Closing:
    """``with adapter:`` calls ``adapter.close()`` on exit, error or not."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClosing:
    """``async with adapter:`` awaits ``adapter.aclose()`` on exit, error or not."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
