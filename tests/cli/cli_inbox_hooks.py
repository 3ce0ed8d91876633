"""The host hooks ``akchat-fsm inbox --authorize`` names in the CLI tests."""

from __future__ import annotations

from typing import Any


def by_header(request: Any) -> str | None:
    """The test host's authentication: a user name in a header (stands in for a session)."""
    user: str | None = request.headers.get("x-user")
    return user


def everyone(principal: Any, pending: Any) -> bool:
    """``--can-decide``: anybody authorized may decide (so a page gives them a form)."""
    return True


def definition(session_id: str) -> Any:
    """``--definition``: the sessions the CLI tests store with ``ChatDefinition("support")``."""
    from akchat_fsm.session import ChatDefinition

    return ChatDefinition("support")


def upstream(session_id: str) -> Any:
    """``--upstream``: an upstream that records what it is sent."""
    from akchat_fsm.testing.doubles import RecordingUpstream

    return RecordingUpstream()
