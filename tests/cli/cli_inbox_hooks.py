"""The host hooks ``akchat-fsm inbox --authorize`` names in the CLI tests."""

from __future__ import annotations

from typing import Any


def by_header(request: Any) -> str | None:
    """The test host's authentication: a user name in a header (stands in for a session)."""
    user: str | None = request.headers.get("x-user")
    return user
