"""Malformed storage URLs: ``open_storage`` / ``open_async_storage`` return an adapter or raise
``ConfigError``, nothing else (issue 14). Construction does no I/O, so no server is needed."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from akchat_fsm.errors import ConfigError
from akchat_fsm.storage import open_async_storage, open_storage

MALFORMED = [
    "postgresql://[::1/x",
    "postgres://[::1",
    "redis://[::1/0",
    "sqlite://[/x.db",
    "postgresql://h/db?statement_timeout=1e400",
    "postgresql://h/db?statement_timeout=nan",
    "sqlite:///x.db?busy_timeout=-1",
    "redis://h:99999999/0",
    "redis://h:port/0",
    "postgresql://h/db?a=1&&b",
    "memory://?x=1",
    "ftp://h/x",
    "",
]


def _open_both(url: str) -> None:
    for opener in (open_storage, open_async_storage):
        adapter = opener(url)
        if hasattr(adapter, "close"):
            adapter.close()
        else:
            asyncio.run(adapter.aclose())


@pytest.mark.parametrize("url", MALFORMED)
def test_malformed_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        _open_both(url)


SCHEMES = st.sampled_from(["postgresql://", "postgres://", "redis://", "sqlite://", "memory://"])
PIECES = st.lists(
    st.sampled_from(
        [
            "[",
            "]",
            "::1",
            "@",
            ":",
            "/",
            "?",
            "&",
            "=",
            "%",
            "%zz",
            "#",
            "h",
            "5432",
            "table=",
            "prefix=",
            "statement_timeout=",
            "busy_timeout=",
            "isolation=",
            "1e400",
            "-1",
            "nan",
            "\x00",
            "é",
            " ",
        ]
    ),
    max_size=8,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(url=st.one_of(st.builds(str.__add__, SCHEMES, PIECES), st.text(max_size=40)))
def test_any_url_opens_or_raises_config_error(url: str) -> None:
    with contextlib.suppress(ConfigError):
        _open_both(url)
