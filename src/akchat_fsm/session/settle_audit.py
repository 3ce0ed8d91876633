"""Who settled: the entries an operator's settle of an unknown execution writes (ADR-0136).

The settle itself is the ledger's (:mod:`akchat_fsm.integrations.ledger`: ``ToolLedger.settle``,
``settle_unknown``, ``settle_trail``); what an entry holds, its key, and the rule that says which
entries applied live beside the decisions' entries (:mod:`.audit`, ADR-0132) and are named here.
"""

from __future__ import annotations

from ._audit import (
    MAX_SETTLE_REASON,
    SETTLE_AUDIT_PREFIX,
    SETTLE_ENTRY_NOT_WRITTEN,
    SETTLE_VIAS,
    Decider,
    SettleAuditEntry,
    check_settler,
    plan_create_settle_entry,
    read_settle_entries,
    settle_audit_key,
    settle_decided,
    settle_entry_text,
)

__all__ = [
    "MAX_SETTLE_REASON",
    "SETTLE_AUDIT_PREFIX",
    "SETTLE_ENTRY_NOT_WRITTEN",
    "SETTLE_VIAS",
    "Decider",
    "SettleAuditEntry",
    "check_settler",
    "plan_create_settle_entry",
    "read_settle_entries",
    "settle_audit_key",
    "settle_decided",
    "settle_entry_text",
]
