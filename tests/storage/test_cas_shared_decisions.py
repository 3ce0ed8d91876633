"""The adapters' shared decisions on inputs the shipped snapshot type never produces.

``storage.cas`` decides for every adapter: what a stored body must be, and whether a save
holds processing work (the processing index). A host may hand storage a *subclass* of the
snapshot model, and a third-party driver may hand back a body of an unexpected type; both must
be judged exactly as the common case is, never guessed.
"""

from __future__ import annotations

from typing import Any

import pytest

from akchat_fsm.errors import ConfigError
from akchat_fsm.storage.cas import holds_processing, loaded_text
from akchat_fsm.wire.enums import ConfirmationStatus
from akchat_fsm.wire.session import SessionSnapshot


class HostSnapshot(SessionSnapshot):
    """A host's own subclass of the envelope model (takes the generic path)."""


def wire(*statuses: str) -> dict[str, Any]:
    return {
        "protocol": "agentskit.chat.session",
        "version": 1,
        "sessionId": "s-cas",
        "definitionId": "def",
        "definitionRevision": 1,
        "updatedAt": "2026-11-29T00:00:00.000Z",
        "cursor": 3,
        "confirmations": [
            {
                "token": f"tok-{i}",
                "action": "refund",
                "input": {"status": "approving"},  # a decoy: never read as the status
                "toolCallId": f"call-{i}",
                "expiresAt": 1_800_000_000_000,
                "status": status,
            }
            for i, status in enumerate(statuses)
        ],
    }


@pytest.mark.parametrize("status", [str(s) for s in ConfirmationStatus])
@pytest.mark.parametrize("others", [(), ("approved", "pending")])
def test_a_snapshot_subclass_is_judged_like_the_snapshot(status: str, others: tuple[str]) -> None:
    statuses = (*others, status)
    base = SessionSnapshot.from_wire(wire(*statuses))
    mine = HostSnapshot.model_validate(base.to_wire())
    assert type(mine) is HostSnapshot
    expected = ConfirmationStatus(status).is_processing or any(
        ConfirmationStatus(s).is_processing for s in others
    )
    assert holds_processing(base) is expected
    assert holds_processing(mine) is expected


def test_an_object_without_confirmations_holds_nothing() -> None:
    assert holds_processing(object()) is False


@pytest.mark.parametrize("body", [3, 2.5, ["{}"], {"cursor": 1}])
def test_a_stored_body_that_is_not_text_is_a_config_error_naming_its_type(body: object) -> None:
    with pytest.raises(ConfigError, match=f"is a {type(body).__name__}, not text"):
        loaded_text("s-cas", body, 1)
