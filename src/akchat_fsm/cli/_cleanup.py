"""``check-storage`` removes what it wrote: every session id the kit's adapters saved.

The conformance kit writes a few dozen sessions under fresh random ids, from this process and
from the racing child processes it spawns. To remove them afterwards without knowing the
kit's internals, the command hands the kit a picklable factory, :class:`NotingFactory`, whose
adapters forward every call unchanged and note the session id of every ``save`` /
``save_record``; each adapter appends its ids to a journal file when it is closed (children
too, as they close theirs). After the run the command deletes each id once (docs/cli.md,
`check-storage`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import TracebackType
from typing import Any

__all__ = ["NotingFactory", "clean_up", "noted_ids", "remove_noted"]


class _Noting:
    """An adapter, unchanged, that remembers which session ids it wrote."""

    def __init__(self, inner: Any, journal: str) -> None:
        self._inner = inner
        self._journal = journal
        self._written: set[str] = set()

    def __getattr__(self, name: str) -> Any:  # everything else is the adapter's own
        found = getattr(self._inner, name)  # absent stays absent (optional capabilities)
        if name != "save_record":
            return found

        def save_record(session_id: str, *args: Any, **kwargs: Any) -> Any:
            self._written.add(str(session_id))
            return found(session_id, *args, **kwargs)

        return save_record

    def save(self, snapshot: Any, expected_cursor: int | None) -> Any:
        self._written.add(str(getattr(snapshot, "session_id", "")))
        return self._inner.save(snapshot, expected_cursor)

    def _flush(self) -> None:
        if self._written:
            with open(self._journal, "a", encoding="utf-8") as journal:
                journal.write("".join(f"{sid}\n" for sid in sorted(self._written)))
            self._written.clear()

    def close(self) -> None:
        try:
            self._flush()
        finally:
            close = getattr(self._inner, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> _Noting:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@dataclass(frozen=True)
class NotingFactory:
    """Zero-argument adapter factory for the kit: ``make()`` (a storage URL's ``open_storage``
    or the user's ``module:factory``) wrapped to note written ids in ``journal``.

    Only strings inside, so the kit can pickle it into its racing processes."""

    target: str
    journal: str

    def __call__(self) -> _Noting:
        from ..storage import open_storage
        from .check_storage import resolve_target

        made = resolve_target(self.target)
        return _Noting(open_storage(made) if isinstance(made, str) else made(), self.journal)


def noted_ids(journal: str) -> list[str]:
    """Every session id any adapter of the run wrote, once each, sorted."""
    if not os.path.exists(journal):
        return []
    with open(journal, encoding="utf-8") as lines:
        return sorted({line.strip() for line in lines if line.strip()})


def remove_noted(storage: Any, ids: list[str]) -> int:
    """Delete each id; the number deleted. An id the adapter refuses (the kit also saves
    under invalid ids, to check they are refused) was never stored: it is passed over."""
    from ..errors import ConfigError

    removed = 0
    for session_id in ids:
        try:
            storage.delete(session_id)
        except ConfigError:
            continue
        removed += 1
    return removed


def clean_up(target: str, journal: str) -> str:
    """Delete what the run wrote from ``target``; one sentence saying so (or why not)."""
    from ..errors import StorageError
    from ._common import describe

    ids = noted_ids(journal)
    if not ids:
        return "cleanup: the checks wrote no session"
    storage = NotingFactory(target, journal)()._inner
    try:
        if not callable(getattr(storage, "delete", None)):
            return f"cleanup: NOT done: the adapter has no delete(); {len(ids)} session(s) remain"
        removed = remove_noted(storage, ids)
    except StorageError as exc:
        return f"cleanup: NOT done ({describe(exc)}); {len(ids)} session(s) may remain"
    finally:
        close = getattr(storage, "close", None)
        if callable(close):
            close()
    return f"cleanup: removed the {removed} session(s) the checks wrote"
