"""A LangGraph host process of the SIGKILL proofs: ``lg_worker.main(spec)``, forked by :mod:`hosts`.

``spec`` (JSON): ``store`` (the session's store, ``sqlite:<path>`` or ``postgres:<url>|<table>``),
``saver`` (LangGraph's own checkpointer, ``sqlite:<path>`` or ``postgres:<url>|<schema>``, see
:func:`lg_agents.open_saver`), ``bodies`` (the file every tool body appends a line to),
``command`` (``approve`` with ``token``, or ``reconcile``) and ``kill``:

* ``write:<n>:before|after``: SIGKILL this process around its n-th write to the session's store
  (envelope or record: the decision's two CAS, the run claim, each ledger claim and outcome,
  the run's persist), the shared :class:`process_helpers.KillingStorage`;
* ``saver:<n>:before|after``: around the n-th write of LangGraph's checkpointer (``put`` or
  ``put_writes``: the task writes and the checkpoints LangGraph saves as the graph goes on);
* ``body:before|after``: inside the gated tool body, around its side effect (its line);
* ``event:<n>``: with ``stream`` true, on the n-th streamed part the sink is handed;
* anything else never kills.

``stream`` (optional, true): the approve streams its continuation (``on_event=``) into the
events file beside the bodies file (one fsynced line per ``StreamPart``: its type).

The agent (:mod:`lg_agents`) asks for the gated ``send_email`` call ``c1``; the continuation's
model then asks for the ungated ``lookup`` call ``u1`` and answers with both results. Returns
what the call returned or the typed error, and how many writes of each kind it made.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lg_agents import GATED, Call, Counts, build_graph, open_saver
from process_helpers import KillingStorage, append_line, open_store

from akchat_fsm import ChatDefinition, resume_chat_session
from akchat_fsm.errors import AkchatError
from akchat_fsm.integrations.langgraph import LangGraphBridge

DEFINITION = ChatDefinition("lg-proof")
SID = "proof"
EMAIL = Call("send_email", {"to": "a@example.com"}, "c1")
NOTE = Call("lookup", {"order": "o-9"}, "u1")
USER = {"messages": [{"role": "user", "content": "email a"}]}
#: The run's output whatever was killed: both results, by call id.
OUTPUT = "c1=sent to a@example.com; u1=order o-9 shipped"
#: Each tool body's line in the bodies file.
LINES = {"c1": "send_email:a@example.com", "u1": "lookup:o-9"}


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class KillingCounts(Counts):
    """The bodies file, and a SIGKILL around a gated body's line (``body:before|after``)."""

    kill: str = "none"

    def body(self, text: str) -> None:
        gated = text.partition(":")[0] in GATED
        if gated and self.kill == "body:before":
            die()
        super().body(text)
        if gated and self.kill == "body:after":
            die()


class SaverWrites:
    """Counts the checkpointer's writes (``put``, ``put_writes``) and SIGKILLs around the n-th
    (``saver:<n>:before|after``); the saver object is LangGraph's own, only those two bound
    methods are wrapped."""

    def __init__(self, saver: Any, kill: str) -> None:
        parts = kill.split(":")
        self.target = int(parts[1]) if parts[0] == "saver" else 0
        self.when = parts[2] if parts[0] == "saver" else ""
        self.writes = 0
        self.lock = threading.Lock()
        for name in ("put", "put_writes"):
            setattr(saver, name, self._wrap(getattr(saver, name)))

    def _wrap(self, write: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            # LangGraph saves a task's writes on a thread of its own while it saves the
            # checkpoint: each write keeps its own ordinal, not the count when it returns.
            with self.lock:
                self.writes += 1
                n = self.writes
            if n == self.target and self.when == "before":
                die()
            result = write(*args, **kwargs)
            if n == self.target and self.when == "after":
                die()
            return result

        return counted


def graph_on(saver: Any, bodies: Path, kill: str = "none") -> Any:
    return build_graph([EMAIL], KillingCounts(file=bodies, kill=kill), saver, then=[[NOTE]])


def bridge_on(storage: Any, graph: Any) -> LangGraphBridge:
    session = resume_chat_session(DEFINITION, session_id=SID, storage=storage)
    return LangGraphBridge(graph, session, storage)


def events_file(case: dict[str, Any]) -> Path:
    return Path(case["bodies"]).with_name("events.txt")


def event_sink(spec: dict[str, Any], kill: str) -> Callable[[Any], None] | None:
    """The streamed approve's sink: a line per part, a SIGKILL on the ``event:<n>``-th."""
    if not spec.get("stream"):
        return None
    target = int(kill.split(":")[1]) if kill.startswith("event:") else 0
    seen = [0]

    def sink(part: Any) -> None:
        seen[0] += 1
        append_line(events_file(spec), str(part["type"]))
        if seen[0] == target:
            die()

    return sink


def main(spec: dict[str, Any]) -> dict[str, Any]:
    kill = spec.get("kill", "none")
    storage = KillingStorage(open_store(spec["store"]), kill)
    saver, close = open_saver(spec["saver"])
    saver_writes = SaverWrites(saver, kill)
    bridge = bridge_on(storage, graph_on(saver, Path(spec["bodies"]), kill))
    out: dict[str, Any]
    try:
        if spec["command"] == "approve":
            decided = bridge.approve(spec["token"], on_event=event_sink(spec, kill))
            run = decided.run
            out = {"status": run and run.status, "output": run and run.output}
        else:
            report = bridge.reconcile()
            out = {
                "runs": [[r.run_id, r.status] for r in report.runs],
                "unknown": [e.tool_call_id for e in report.execution_unknown],
            }
    except AkchatError as exc:
        out = {"error": type(exc).__name__, "message": str(exc)}
    finally:
        close()
        storage.close()
    return {**out, "writes": storage.writes, "saver_writes": saver_writes.writes}
