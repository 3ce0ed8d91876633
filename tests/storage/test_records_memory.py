"""The records capability and the processing index on the in-memory adapter.

The same checks run against every shipped adapter in the storage battery; this file pins the
memory adapter, which the bridges' unit tests use.
"""

from __future__ import annotations

import pytest

from akchat_fsm.errors import ConfigError
from akchat_fsm.storage import (
    AsyncMemoryStorage,
    MemoryStorage,
    ProcessingIndex,
    RecordStorage,
)


def test_memory_adapters_declare_both_capabilities() -> None:
    assert isinstance(MemoryStorage(), RecordStorage)
    assert isinstance(MemoryStorage(), ProcessingIndex)
    assert hasattr(AsyncMemoryStorage(), "list_processing")


def test_record_cas_follows_the_cursor_rule() -> None:
    store = MemoryStorage()
    assert store.load_record("s1", "call:a") is None
    assert store.save_record("s1", "call:a", '{"x":1}', None)
    assert not store.save_record("s1", "call:a", '{"x":2}', None)  # create-only
    assert store.load_record("s1", "call:a") == (1, '{"x":1}')
    assert not store.save_record("s1", "call:a", '{"x":2}', 7)  # stale version
    assert store.save_record("s1", "call:a", '{"x":2}', 1)
    assert store.load_record("s1", "call:a") == (2, '{"x":2}')
    assert store.load_record("s2", "call:a") is None  # records belong to their session
    assert store.list_records("s1") == ["call:a"]
    assert store.list_records("s1", "run:") == []


def test_bad_record_arguments_are_config_errors_before_any_write() -> None:
    store = MemoryStorage()
    for args in (
        ("s1", "", "{}", None),
        ("s1", "bad key", "{}", None),
        ("s1", "k", b"{}", None),
        ("s1", "k", "{}", -1),
        ("bad id", "k", "{}", None),
    ):
        with pytest.raises(ConfigError):
            store.save_record(*args)  # type: ignore[arg-type]
    assert store.list_records("s1") == []


def test_the_processing_index_follows_records_and_deletes() -> None:
    store = MemoryStorage()
    assert store.save_record("s1", "call:a", "{}", None, processing=True)
    assert store.save_record("s2", "call:b", "{}", None)
    assert [row.session_id for row in store.list_processing()] == ["s1"]
    assert store.list_processing(written_before_ms=0) == []
    assert store.save_record("s1", "call:a", "{}", 1, processing=False)
    assert store.list_processing() == []
    assert store.save_record("s1", "call:c", "{}", None, processing=True)
    store.delete("s1")
    assert store.list_processing() == []
    assert store.load_record("s1", "call:c") is None
