"""``akchat-fsm reconcile``: settle processing confirmations from a chat-memory record file.

A dry run (the default) lists every ``approving`` / ``rejecting`` / ``expiring`` record, the
status of its tool call in the memory file, and what reconciliation would do: the decision is
the core's (:func:`akchat_fsm.core.records.reconcile_decision` and the confirmation table),
never re-derived here. ``--apply`` runs :func:`akchat_fsm.session.reconcile`, which writes with
compare-and-set.

The command has no upstream chat controller, so it never calls upstream (docs/adr/0071):

* the tool call left ``requires_confirmation`` (upstream acted) → the matching final status
  is recorded (``approved`` / ``rejected`` / ``expired``);
* the tool call is still ``requires_confirmation`` (upstream never acted) → left as is, or
  released back to ``pending`` with ``--release-untouched`` (assert that no client is still
  resolving it); re-issuing the call needs the host's upstream: reconcile from the host;
* the tool call is not in the file → left as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..core import ConfirmationEvent, Reconciliation, UpstreamToolStatus
from ..core.records import confirmation_step, reconcile_decision
from ..errors import InvalidInput, InvalidMemoryRecord, SessionConflict
from ..session import ChatDefinition, resume_chat_session
from ..session import reconcile as reconcile_session
from ..wire.jsontext import parse_json_text
from ..wire.memory import MemoryRecord, validate_memory_record
from ..wire.session import ConfirmationBinding, SessionSnapshot
from ._common import (
    EXIT_INVALID,
    describe,
    fail,
    inert,
    opened_storage,
    print_renderable,
    read_source,
)
from ._envelope import load_or_fail

__all__ = ["Plan", "plan_for", "reconcile"]

LEFT = "left as is"


@dataclass(frozen=True)
class Plan:
    """What reconciliation would do for one processing record."""

    binding: ConfirmationBinding
    upstream: str  # the tool call's status in memory, or "missing"
    action: str  # complete / release / left as is
    after: str  # the record's status afterwards


def _memory(source: str) -> MemoryRecord:
    try:
        text = read_source(source).decode("utf-8")
        return validate_memory_record(parse_json_text(text))
    except UnicodeDecodeError:
        fail(f"{source}: not UTF-8 text", EXIT_INVALID)
    except (InvalidMemoryRecord, InvalidInput) as exc:
        fail(f"{source}: {describe(exc)}", EXIT_INVALID)


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


def _plan_table(plans: list[Plan], title: str) -> RenderableType:
    if not plans:
        return Text("No processing records: nothing to reconcile.")
    table = Table(box=box.SIMPLE_HEAD, expand=True, title=title, title_justify="left")
    for column in ("token", "tool call"):
        table.add_column(column, ratio=1, overflow="fold")
    for column in ("status", "in memory", "reconcile", "after"):
        table.add_column(column, no_wrap=True)
    for plan in plans:
        table.add_row(
            inert(plan.binding.token),
            inert(plan.binding.tool_call_id),
            plan.binding.status.value,
            plan.upstream,
            plan.action,
            plan.after,
        )
    return table


@click.command("reconcile")
@click.argument("url")
@click.argument("session_id")
@click.option(
    "--memory",
    "memory_file",
    required=True,
    metavar="FILE",
    help="The host's chat-memory record ({version: 1, messages}) as JSON; - for stdin.",
)
@click.option("--apply", "apply_", is_flag=True, help="Write the result (CAS); default: dry run.")
@click.option(
    "--release-untouched",
    is_flag=True,
    help="Send records whose tool call is still requires_confirmation back to pending. "
    "Only when no client is still resolving them.",
)
def reconcile(
    url: str, session_id: str, memory_file: str, apply_: bool, release_untouched: bool
) -> None:
    """Settle processing confirmations of SESSION_ID in URL from a chat-memory FILE.

    Dry run by default: lists the processing records and what would happen. Never calls
    upstream. Run it only when no client is inside a resolution (after a crash).

    \b
    Example:
      akchat-fsm reconcile sqlite:///sessions.db support-42 --memory memory.json
      akchat-fsm reconcile sqlite:///sessions.db support-42 --memory memory.json --apply
    """
    memory = _memory(memory_file)
    with opened_storage(url) as storage:
        snapshot = load_or_fail(storage, session_id, url).snapshot
        plans = plan_for(snapshot, tool_statuses(memory), release_untouched)
        if not apply_ or not plans:
            table = _plan_table(plans, f"Dry run at cursor {snapshot.cursor} (nothing written)")
            if apply_ or not plans:
                print_renderable(table)
            else:
                print_renderable(Group(table, Text("Run again with --apply to write it.")))
            return
        if snapshot.conversation is not None:
            fail(
                "this session has a conversation flow; reconcile it from the host with its "
                "ChatDefinition (akchat_fsm.session.reconcile)",
                EXIT_INVALID,
            )
        definition = ChatDefinition(snapshot.definition_id, snapshot.definition_revision)
        session = resume_chat_session(definition, session_id=session_id, storage=storage)
        try:
            outcomes = reconcile_session(
                session,
                _FileMemory(_without_untouched(memory, plans)),
                release_untouched=release_untouched,
            )
        except SessionConflict as exc:
            fail(f"another client kept writing; nothing more was applied ({describe(exc)})")
        table = Table(box=box.SIMPLE_HEAD, expand=True, title="Applied", title_justify="left")
        for column in ("token", "tool call", "before", "action", "now"):
            table.add_column(column, overflow="fold")
        for outcome in outcomes:
            table.add_row(
                inert(outcome.token),
                inert(outcome.tool_call_id),
                outcome.before.value,
                LEFT if outcome.action == "unknown" else outcome.action,
                outcome.record.status.value,
            )
        print_renderable(Group(table, Text(f"cursor now {session.cursor}")))
