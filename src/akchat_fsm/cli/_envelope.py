"""Reading and rendering one session envelope (shared by ``inspect`` and ``reconcile``).

Decoding is :func:`akchat_fsm.wire.decode.decode_session_snapshot`, nothing else; this module
only notices whether the input was a v0 document (so the user is told it was migrated) and
lays the envelope out with rich.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..errors import StorageError
from ..storage.port import SessionStorage
from ..wire.bounded import thaw
from ..wire.decode import decode_session_snapshot
from ..wire.enums import ConfirmationStatus
from ..wire.jsontext import InvalidJsonText, parse_json_text
from ..wire.session import ConfirmationBinding, SessionSnapshot
from ._common import EXIT_INVALID, EXIT_USAGE, describe, fail, inert, inert_json, pinned_rows

__all__ = ["Decoded", "decode_or_fail", "load_or_fail", "render_snapshot"]

MAX_SHOWN_INPUT = 200  # characters of a confirmation's input shown per row


@dataclass(frozen=True)
class Decoded:
    """A decoded envelope and whether it arrived as v0 (migrated to v1 in memory only)."""

    snapshot: SessionSnapshot
    migrated_from_v0: bool


def _version_of(raw: object) -> object:
    value = raw
    if isinstance(raw, bytes | bytearray):
        try:
            value = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        try:
            value = parse_json_text(value)
        except InvalidJsonText:
            return None
    return value.get("version") if isinstance(value, dict) else None


def decode_or_fail(raw: object, source: str) -> Decoded:
    """Decode an untrusted envelope; an invalid one exits 1 with the reference diagnostic."""
    result = decode_session_snapshot(raw)
    if result.snapshot is None:
        diagnostic = result.diagnostic
        reason = f"{diagnostic.code}: {diagnostic.message}" if diagnostic else "invalid"
        fail(f"{source}: {reason}", EXIT_INVALID)
    version = _version_of(raw)
    migrated = version == 0 and not isinstance(version, bool)
    return Decoded(result.snapshot, migrated)


def load_or_fail(storage: SessionStorage, session_id: str, url: str) -> Decoded:
    """Load and decode ``session_id``; a missing session exits 1, a storage failure exits 2."""
    try:
        raw = storage.load(session_id)
    except StorageError as exc:
        fail(f"cannot load {session_id!r} from {url}: {describe(exc)}", EXIT_USAGE)
    if raw is None:
        fail(f"no session {session_id!r} in {url}", EXIT_INVALID)
    return decode_or_fail(raw, f"session {session_id!r}")


def _when(epoch_ms: int) -> str:
    """Epoch milliseconds as UTC ISO text (and the raw number, which is what is stored)."""
    try:
        moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return str(epoch_ms)
    return f"{moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} ({epoch_ms})"


def _input_text(binding: ConfirmationBinding) -> str:
    text = json.dumps(thaw(binding.input), ensure_ascii=False, sort_keys=True)
    if len(text) > MAX_SHOWN_INPUT:
        text = f"{text[:MAX_SHOWN_INPUT]}… (+{len(text) - MAX_SHOWN_INPUT} chars)"
    return inert(text)


def _confirmation_tables(snapshot: SessionSnapshot) -> list[RenderableType]:
    if not snapshot.confirmations:
        return [Text("Confirmations: none")]
    parts: list[RenderableType] = []
    for status in ConfirmationStatus:  # the lifecycle's order: pending, processing, terminal
        group = [b for b in snapshot.confirmations if b.status is status]
        if not group:
            continue
        kind = "processing" if status.is_processing else "terminal" if status.is_terminal else ""
        title = f"Confirmations {status.value} ({len(group)})" + (f" — {kind}" if kind else "")
        # Tokens and ids never wrap (a copied token must work): print_renderable widens the
        # output instead; the free text columns fold.
        table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
        table.add_column("token", no_wrap=True)
        table.add_column("action", overflow="fold")
        table.add_column("tool call", no_wrap=True)
        table.add_column("expires (UTC)", overflow="fold")
        table.add_column("input", min_width=12, overflow="fold")
        rows = [
            (
                inert(binding.token),
                inert(binding.action),
                inert(binding.tool_call_id),
                _when(binding.expires_at),
                _input_text(binding),
            )
            for binding in group
        ]
        parts.append(pinned_rows(table, rows))
    return parts


def _turns(snapshot: SessionSnapshot) -> list[RenderableType]:
    lease = snapshot.active_turn
    parts: list[RenderableType] = [
        Text(
            "Turn lease: none"
            if lease is None
            else f"Turn lease: {inert(lease.turn_id)} until {_when(lease.expires_at)}"
        )
    ]
    if snapshot.terminal_turns:
        table = Table(
            box=box.SIMPLE_HEAD,
            title=f"Terminal turns ({len(snapshot.terminal_turns)}, oldest first)",
            title_justify="left",
        )
        table.add_column("turn", no_wrap=True)
        table.add_column("outcome")
        rows = [(inert(turn.turn_id), turn.outcome.value) for turn in snapshot.terminal_turns]
        parts.append(pinned_rows(table, rows))
    else:
        parts.append(Text("Terminal turns: none"))
    return parts


def _conversation(snapshot: SessionSnapshot) -> Text:
    conversation = snapshot.conversation
    if conversation is None:
        return Text("Conversation: none (the definition declares no flow)")
    text = Text(
        f"Conversation state: {inert(conversation.state)}  decisions: {len(conversation.decisions)}"
    )
    if conversation.decisions:
        last = conversation.decisions[-1]
        text.append(
            f"\n  last: {inert(last.message_id)} via {inert(last.route_id)} "
            f"({last.kind.value}) {inert(last.from_state)} → {inert(last.to_state)}"
        )
    return text


def _counts(snapshot: SessionSnapshot) -> str:
    counts: dict[str, int] = {}
    for binding in snapshot.confirmations:
        counts[binding.status.value] = counts.get(binding.status.value, 0) + 1
    return ", ".join(f"{name} {count}" for name, count in counts.items()) or "none"


def render_snapshot(decoded: Decoded) -> RenderableType:
    """The whole envelope, readably: identity, cursor, confirmations by status, turns, flow."""
    snapshot = decoded.snapshot
    head = Text()
    head.append("Session ", style="bold")
    head.append(inert(snapshot.session_id), style="bold cyan")
    head.append(
        f"  definition {inert(snapshot.definition_id)} rev {snapshot.definition_revision}"
        f"\ncursor: {snapshot.cursor}  updatedAt: {inert(snapshot.updated_at)}"
        f"\nvalid: {snapshot.protocol} v{snapshot.version}"
    )
    if decoded.migrated_from_v0:
        head.append(
            "\nmigrated from v0: this document was version 0; shown as v1 (storage still holds "
            "v0 until the session's next save)",
            style="yellow",
        )
    head.append(f"\nconfirmations: {len(snapshot.confirmations)} ({_counts(snapshot)})")
    parts: list[RenderableType] = [head, *_confirmation_tables(snapshot), *_turns(snapshot)]
    parts.append(_conversation(snapshot))
    return Group(*parts)


def wire_json(snapshot: SessionSnapshot) -> str:
    """The canonical wire form: ``to_wire()`` as compact JSON, key order as the writer's,
    with every control character escaped (:func:`inert_json`)."""
    wire: Any = snapshot.to_wire()
    return inert_json(json.dumps(wire, ensure_ascii=False, separators=(",", ":")))
