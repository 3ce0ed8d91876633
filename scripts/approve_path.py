"""Trace one approve through akchat_fsm and print the path it takes (not a test).

Two approves are traced: a pydantic-ai bridge approve (resolution, continuation, tool body,
run persist) and a plain confirmation approve (``ConfirmationCoordinator.approve``). For
each, ``sys.setprofile`` records every call into an ``akchat_fsm`` function (frames of other
packages are skipped, their callees into ``akchat_fsm`` still count), and the script prints
the files and functions reached and the *hops*: calls from a function in one akchat_fsm file
into a function in another. Re-run it after a refactor to re-measure ADR-0121's figures.

    .venv/bin/python scripts/approve_path.py [--verbose]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import akchat_fsm
from akchat_fsm import ChatDefinition, resume_chat_session
from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.testing.doubles import RecordingUpstream

ROOT = str(Path(akchat_fsm.__file__).resolve().parent)
DEFINITION = ChatDefinition("approve-path")


class Path_:
    """What one traced call reached: functions, files, and cross-file hops."""

    def __init__(self) -> None:
        self.functions: Counter[str] = Counter()
        self.files: Counter[str] = Counter()
        self.hops: Counter[tuple[str, str]] = Counter()

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        here = _file(frame)
        if here is None:
            return
        self.functions[f"{here}:{frame.f_code.co_qualname}"] += 1
        self.files[here] += 1
        caller = frame.f_back
        while caller is not None and _file(caller) is None:
            caller = caller.f_back  # through pydantic-ai, asyncio: the akchat_fsm caller
        there = None if caller is None else _file(caller)
        if there is not None and there != here:
            self.hops[(there, here)] += 1


def _file(frame: FrameType) -> str | None:
    name = frame.f_code.co_filename
    if not name.startswith(ROOT):
        return None
    return name[len(ROOT) + 1 :]


def trace(call: Callable[[], Any]) -> Path_:
    path = Path_()
    sys.setprofile(path.profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return path


def build_agent() -> Agent[None, Any]:
    def model(history: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(history) == 1:
            return ModelResponse(parts=[ToolCallPart("send", {"to": "a"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, Any] = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def send(to: str) -> str:
        return f"sent to {to}"

    return agent


def bridge_approve(storage: SQLiteStorage, session_id: str) -> Callable[[], Any]:
    session = resume_chat_session(DEFINITION, session_id=session_id, storage=storage)
    bridge = PydanticAIBridge(build_agent(), session, storage)
    token = bridge.run("go", run_id="r1").pending[0].token
    return lambda: bridge.approve(token)


def plain_approve(storage: SQLiteStorage, session_id: str) -> Callable[[], Any]:
    session = resume_chat_session(DEFINITION, session_id=session_id, storage=storage)
    coordinator = session.confirmations_for(RecordingUpstream())
    token = coordinator.propose("send", {"to": "a"}).token
    return lambda: coordinator.approve(token)


def report(name: str, path: Path_, verbose: bool) -> None:
    print(f"{name}:")
    print(f"  files      {len(path.files)}")
    print(f"  functions  {len(path.functions)} distinct, {sum(path.functions.values())} calls")
    print(f"  hops       {len(path.hops)} distinct, {sum(path.hops.values())} calls")
    if verbose:
        for file, n in sorted(path.files.items()):
            print(f"    {n:6}  {file}")
        for (src, dst), n in sorted(path.hops.items()):
            print(f"    {n:6}  {src} -> {dst}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="list files and hops")
    verbose = parser.parse_args().verbose
    with tempfile.TemporaryDirectory() as tmp:
        storage = SQLiteStorage(Path(tmp) / "approve.db")
        try:
            # Warm once (imports, pydantic-ai's first-run caches), then trace a fresh approve.
            bridge_approve(storage, "bridge-warm")()
            traced = trace(bridge_approve(storage, "bridge"))
            report("bridge approve (pydantic-ai)", traced, verbose)
            plain_approve(storage, "plain-warm")()
            report("plain approve", trace(plain_approve(storage, "plain")), verbose)
        finally:
            storage.close()


if __name__ == "__main__":
    main()
