"""``akchat-fsm settle``: record an operator's verdict on an execution whose outcome is unknown.

A tool-execution ledger entry still ``executing`` was claimed by a process that never recorded
what the tool body did (``inspect --ledger`` shows it as ``OUTCOME UNKNOWN``); the bridges never
re-run it. After checking the tool's side effect, the operator records it: ``--ran`` (with the
``--result`` later claimants replay) or ``--did-not-run`` (released for one more run). The
verdict is :func:`~akchat_fsm.integrations.ledger.decide_settle`'s, as for
``ToolLedger.settle``; the command calls ``ToolLedger.settle_unknown``, which adds one rule for
humans (ADR-0104): it writes only over the entry it read, which must still be unknown, with one
compare-and-set. Anything that changed it
in between (another settle, the claimant finishing late) makes the command lose, write nothing
and say what the entry is now, instead of silently re-deciding on it.

Before that compare-and-set the command writes the settle's create-only audit entry
(ADR-0136): ``--operator`` as the principal, ``cli`` as where from, ``--reason``, the verdict
and the call's arguments digest; ``akchat-fsm audit`` shows it, marked applied or not.
"""

from __future__ import annotations

import json
from typing import Any

import click

from ..errors import ConfigError, StorageError
from ..integrations.ledger import SettleRefused, ToolLedger, default_owner, result_from_json
from ..storage.capabilities import keeps_records
from ._common import EXIT_INVALID, EXIT_USAGE, describe, fail, inert, inert_json, opened_storage

__all__ = ["settle"]


def _result(text: str | None, ran: bool) -> Any:
    if text is None:
        return None
    if not ran:
        fail("--result goes with --ran (a call that did not run has no result)", EXIT_USAGE)
    try:
        # The bounds a stored record is read back with (ADR-0103), so the entry stays readable.
        return result_from_json(text, "--result value")
    except ConfigError as exc:
        fail(exc.message, EXIT_USAGE)


@click.command("settle")
@click.argument("url")
@click.argument("session_id")
@click.argument("tool_call_id")
@click.option(
    "--ran/--did-not-run",
    "ran",
    default=None,
    help="The verdict: the tool's side effect happened (--ran), or it did not (--did-not-run: "
    "released, so the next continuation may run the call once more).",
)
@click.option(
    "--result",
    "result_text",
    metavar="JSON",
    default=None,
    help="With --ran: the tool's result as JSON, replayed to later claimants (default null).",
)
@click.option(
    "--operator",
    metavar="NAME",
    default=None,
    help="Who settles: the audit entry's principal and the ledger entry's owner "
    "(default: not named, owner cli:HOST:PID).",
)
@click.option(
    "--reason",
    metavar="TEXT",
    default=None,
    help="Why: how the tool's side effect was checked (recorded in the audit entry).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the settled entry as JSON.")
def settle(
    url: str,
    session_id: str,
    tool_call_id: str,
    ran: bool | None,
    result_text: str | None,
    operator: str | None,
    reason: str | None,
    as_json: bool,
) -> None:
    """Settle an execution whose outcome is unknown: TOOL_CALL_ID of SESSION_ID in URL.

    Check the tool's side effect first, then record it: --ran [--result JSON] if it happened,
    --did-not-run if it did not. Only an entry still executing (OUTCOME UNKNOWN in
    'inspect --ledger') is settled, with one compare-and-set: if anything changed it
    meanwhile, nothing is written and the error says what it is now (exit 1). Never creates
    a store.

    \b
    Examples:
      akchat-fsm settle sqlite:///sessions.db support-42 call-9 --ran --result '{"id": "r-1"}'
      akchat-fsm settle sqlite:///sessions.db support-42 call-9 --did-not-run --operator alice \\
          --reason "no charge in the PSP dashboard"
    """
    if ran is None:
        fail("give the verdict: --ran [--result JSON] or --did-not-run", EXIT_USAGE)
    result = _result(result_text, ran)
    who = operator if operator is not None else f"cli:{default_owner()}"
    with opened_storage(url, create=False) as storage:
        if not keeps_records(storage):
            fail(
                f"{url} cannot hold tool-execution ledger entries (no RecordStorage capability)",
                EXIT_USAGE,
            )
        ledger = ToolLedger(storage, session_id, owner=who)
        try:
            entry = ledger.settle_unknown(
                tool_call_id, ran=ran, result=result, operator=operator, reason=reason, via="cli"
            )
        except ConfigError as exc:  # --operator or --reason refused, before any write
            fail(describe(exc), EXIT_USAGE)
        except SettleRefused as exc:
            fail(str(exc), EXIT_INVALID)
        except StorageError as exc:
            fail(f"cannot settle {tool_call_id!r} in {url}: {describe(exc)}", EXIT_USAGE)
    if as_json:
        document = {
            "sessionId": session_id,
            "toolCallId": tool_call_id,
            "settled": True,
            "entry": {**json.loads(entry.to_json()), "unknown": entry.unknown},
        }
        click.echo(inert_json(json.dumps(document, ensure_ascii=False, separators=(",", ":"))))
        return
    verdict = (
        "ran; its result is recorded and replayed to later claimants"
        if ran
        else "did not run; released, so the next continuation may run it once more"
    )
    click.echo(f"settled {inert(tool_call_id)} ({inert(entry.tool)}) by {inert(who)}: {verdict}")
