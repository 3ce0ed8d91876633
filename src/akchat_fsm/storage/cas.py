"""The compare-and-set decisions every shipped adapter makes, public for adapter authors.

An adapter only moves bytes. Before any I/O, ``save`` asks :func:`prepare_save` what to write
and under which condition (a :class:`PreparedSave`: the canonical text, the cursor written,
the cursor expected, whether the envelope holds processing work, its pending rows); it then
runs one atomic statement of its backend that writes iff :func:`cas_allows` would, and
reports ``True``/``False``. ``save_record`` does the same with :func:`prepare_record_save`.
``load`` hands what its driver returned to :func:`loaded_text`, which refuses bytes that are
not UTF-8 text and a cursor column that disagrees with the body (:func:`check_stored_cursor`).

Reusing these, a third-party adapter refuses bad arguments with the same
:class:`~akchat_fsm.errors.ConfigError` as ours, writes the same text, and keeps the
processing index true; the conformance kit (docs/conformance.md) checks the rest. The
argument validators alone are in :mod:`akchat_fsm.storage.checks`.
"""

from __future__ import annotations

from ._cas import (
    PendingRow,
    PreparedRecordSave,
    PreparedSave,
    cas_allows,
    check_stored_cursor,
    holds_processing,
    loaded_text,
    prepare_record_save,
    prepare_save,
)

__all__ = [
    "PendingRow",
    "PreparedRecordSave",
    "PreparedSave",
    "cas_allows",
    "check_stored_cursor",
    "holds_processing",
    "loaded_text",
    "prepare_record_save",
    "prepare_save",
]
