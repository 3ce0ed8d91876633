"""What ``reconcile`` (one session or ``--all``) decides and shows, without an upstream.

The decision per record is the core's (:func:`akchat_fsm.core.records.reconcile_decision` and
the confirmation table), never re-derived here. The command has no upstream chat controller,
so it never calls upstream (ADR-0071): a record whose decision is *resume* is taken out of the
memory the session is reconciled with, so it is left as it is (``unknown``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click
from rich import box
from rich.table import Table

from ..core import ConfirmationEvent, Reconciliation, UpstreamToolStatus
from ..core.records import confirmation_step, reconcile_decision
from ..errors import ConfigError, InvalidInput
from ..session import ChatDefinition, ReconcileOutcome
from ..session.sweep import SweepPorts
from ..wire.jsontext import parse_json_text
from ..wire.memory import MemoryRecord, validate_memory_record
from ..wire.session import ConfirmationBinding, SessionSnapshot
from ._common import inert, pinned_rows, read_source

__all__ = [
    "CONVERSATION_REFUSED",
    "LEFT",
    "Plan",
    "applied_table",
    "load_memory",
    "memory_from_bytes",
    "outcome_row",
    "plan_for",
    "plan_row",
    "plan_table",
    "session_ports",
    "tool_statuses",
]

LEFT = "left as is"
CONVERSATION_REFUSED = (
    "this session has a conversation flow; reconcile it from the host with its "
    "ChatDefinition (akchat_fsm.session.reconcile)"
)


@dataclass(frozen=True)
class Plan:
    """What reconciliation would do for one processing record."""

    binding: ConfirmationBinding
    upstream: str  # the tool call's status in memory, or "missing"
    action: str  # complete / release / left as is
    after: str  # the record's status afterwards


def load_memory(source: str) -> MemoryRecord:
    """A chat-memory record file (``-``: stdin), bounded like every input, validated as
    upstream validates it. Raises typed errors (``InvalidInput`` and subclasses), so one
    session's unreadable file is that session's failure in a sweep; a verb reading one file
    calls :func:`read_source` itself, which exits as docs/cli.md says (2: unreadable)."""
    try:
        data = read_source(source)
    except click.ClickException as exc:  # too large or unreadable: typed for the sweep
        raise InvalidInput(exc.message) from exc
    return memory_from_bytes(data)


def memory_from_bytes(data: bytes) -> MemoryRecord:
    """The chat-memory record in ``data``, validated as upstream validates it."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput("not UTF-8 text") from exc
    return validate_memory_record(parse_json_text(text))


def tool_statuses(memory: MemoryRecord) -> dict[str, UpstreamToolStatus]:
    return {
        call.id: UpstreamToolStatus(call.status.value)
        for message in memory.messages
        for call in message.tool_calls or ()
    }


def plan_for(
    snapshot: SessionSnapshot, statuses: dict[str, UpstreamToolStatus], release_untouched: bool
) -> list[Plan]:
    """One :class:`Plan` per processing record, from the core's decision."""
    plans: list[Plan] = []
    for binding in snapshot.confirmations:
        if not binding.status.is_processing:
            continue
        upstream = statuses.get(binding.tool_call_id)
        if upstream is None:
            plans.append(Plan(binding, "missing", LEFT, binding.status.value))
            continue
        decision = reconcile_decision(binding.status, upstream, release_untouched)
        if decision is Reconciliation.COMPLETE:
            after = confirmation_step(binding.status, ConfirmationEvent.COMPLETE, False)
            plans.append(Plan(binding, upstream.value, "complete", after.value))
        elif decision is Reconciliation.RELEASE:
            after = confirmation_step(binding.status, ConfirmationEvent.RELEASE, False)
            plans.append(Plan(binding, upstream.value, "release", after.value))
        else:  # RESUME: needs the host's upstream, which this command does not have
            plans.append(Plan(binding, upstream.value, f"{LEFT}: needs upstream", "unchanged"))
    return plans


def _without_untouched(memory: MemoryRecord, plans: list[Plan]) -> dict[str, Any]:
    """The memory record minus the tool calls this command must not resume (no upstream)."""
    skip = {p.binding.tool_call_id for p in plans if p.action.startswith(LEFT)}
    wire = memory.to_wire()
    for message in wire["messages"]:
        if "toolCalls" in message:
            message["toolCalls"] = [c for c in message["toolCalls"] if c["id"] not in skip]
    return wire


class _FileMemory:
    """``ChatMemory`` over an already validated record."""

    def __init__(self, record: dict[str, Any]) -> None:
        self._record = record

    def load(self) -> dict[str, Any]:
        return self._record


def session_ports(
    snapshot: SessionSnapshot, memory: MemoryRecord, release_untouched: bool
) -> SweepPorts:
    """What the command reconciles ``snapshot``'s session with: its own definition id and
    revision, the memory minus the calls it must not resume, and no upstream."""
    if snapshot.conversation is not None:
        raise ConfigError(CONVERSATION_REFUSED)
    plans = plan_for(snapshot, tool_statuses(memory), release_untouched)
    definition = ChatDefinition(snapshot.definition_id, snapshot.definition_revision)
    return SweepPorts(definition, _FileMemory(_without_untouched(memory, plans)))


# --------------------------------------------------------------------------- output


def plan_row(plan: Plan) -> dict[str, str]:
    """One dry-run record for ``--json``."""
    return {
        "token": plan.binding.token,
        "toolCallId": plan.binding.tool_call_id,
        "status": plan.binding.status.value,
        "inMemory": plan.upstream,
        "action": plan.action,
        "after": plan.after,
    }


def outcome_row(outcome: ReconcileOutcome) -> dict[str, str]:
    """One applied record for ``--json`` (``unknown`` is shown as left as is)."""
    return {
        "token": outcome.token,
        "toolCallId": outcome.tool_call_id,
        "status": outcome.before.value,
        "action": LEFT if outcome.action == "unknown" else outcome.action,
        "after": outcome.record.status.value,
    }


def _table(title: str, columns: tuple[str, ...]) -> Table:
    # Tokens and ids never wrap (a copied token must work); print_renderable widens instead.
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    for column in columns:
        table.add_column(column, no_wrap=True)
    return table


def plan_table(plans: list[Plan], title: str) -> Table:
    table = _table(title, ("token", "tool call", "status", "in memory", "reconcile", "after"))
    return pinned_rows(table, ([inert(v) for v in plan_row(p).values()] for p in plans))


def applied_table(outcomes: tuple[ReconcileOutcome, ...], title: str = "Applied") -> Table:
    table = _table(title, ("token", "tool call", "before", "action", "now"))
    return pinned_rows(table, ([inert(v) for v in outcome_row(o).values()] for o in outcomes))
