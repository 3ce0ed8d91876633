"""The controlled driver draws confirmation ids from the core's factory (no drift by copy)."""

from __future__ import annotations

import asyncio
import re

from controlled_helpers import snapshot
from test_controlled_confirmations import Upstream

from akchat_fsm.controlled import ControlledConfirmations, create_controlled_chat
from akchat_fsm.core import confirmations as core_confirmations


def test_default_ids_are_the_cores_128_bits() -> None:
    confirmations = ControlledConfirmations(create_controlled_chat(snapshot(), Upstream()))
    record = asyncio.run(confirmations.propose("pay", {"amount": 3}))
    # 32 hex digits = 128 bits, as the session driver's default (it drew 64 before).
    assert re.fullmatch(r"confirm-[0-9a-f]{32}", record.token), record.token
    assert confirmations._create_id is core_confirmations.random_suffix
