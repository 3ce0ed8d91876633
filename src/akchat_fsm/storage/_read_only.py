"""What every adapter opened with ``read_only=True`` shares: the refusal of a write.

A read-only adapter (the CLI's ``inspect``, ``show``, ``reconcile`` without ``--apply``) never
changes its store, whatever it finds: it creates and upgrades nothing, and a write is refused
before any I/O, so a bug in a read-only verb cannot reach the store either.
"""

from __future__ import annotations

from ..errors import ConfigError

__all__ = ["READ_ONLY_HINT", "read_only_refusal"]

READ_ONLY_HINT = "Open the store without read_only (open_storage(url)) to write to it."


def read_only_refusal(adapter: str, what: str) -> ConfigError:
    """The error a read-only ``adapter`` raises instead of performing ``what`` (a write)."""
    return ConfigError(f"{adapter} was opened read-only: {what} refused.", hint=READ_ONLY_HINT)
