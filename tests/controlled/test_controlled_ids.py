"""The controlled driver draws confirmation ids from the core (no drift by copy, ADR-0114)."""

from __future__ import annotations

import asyncio
import re
from typing import cast

import pytest
from controlled_helpers import snapshot
from test_controlled_confirmations import Upstream

from akchat_fsm.controlled import ControlledConfirmations, create_controlled_chat
from akchat_fsm.core import confirmations as core_confirmations
from akchat_fsm.core import new_session, plan_proposal
from akchat_fsm.errors import ConfigError


def test_default_ids_are_the_cores_128_bits() -> None:
    confirmations = ControlledConfirmations(create_controlled_chat(snapshot(), Upstream()))
    record = asyncio.run(confirmations.propose("pay", {"amount": 3}))
    # 32 hex digits = 128 bits, as the session driver's default (it drew 64 before).
    assert re.fullmatch(r"confirm-[0-9a-f]{32}", record.token), record.token
    assert confirmations._create_id is core_confirmations.random_suffix


SUFFIXES = ["abc", "x" * 120, "x" * 121, "-lead", "a b", "é", "", 7, None]


def _session_driver_ids(suffix: object) -> tuple[str, str] | str:
    state = new_session("ids-session", "ids-definition", now_ms=1_000)
    try:
        plan = plan_proposal(state, "pay", {}, 1_000, new_suffix=lambda: cast(str, suffix))
    except ConfigError as error:
        return str(error)
    return plan.token, plan.effect.tool_call_id


def _controlled_driver_ids(suffix: object) -> tuple[str, str] | str:
    upstream = Upstream()
    chat = create_controlled_chat(snapshot(), upstream)
    confirmations = ControlledConfirmations(chat, create_id=lambda: cast(str, suffix))
    try:
        record = asyncio.run(confirmations.propose("pay", {}))
    except ConfigError as error:
        return str(error)
    return record.token, upstream.proposed[0]["id"]


@pytest.mark.parametrize("suffix", SUFFIXES, ids=repr)
def test_both_drivers_take_ids_from_one_function(suffix: object) -> None:
    """Same suffix, same (token, tool-call id) or the same refusal, in both drivers."""
    assert _controlled_driver_ids(suffix) == _session_driver_ids(suffix)
    try:
        expected: tuple[str, str] | str = core_confirmations.confirmation_ids(suffix)
    except ConfigError as error:
        expected = str(error)
    assert _session_driver_ids(suffix) == expected
