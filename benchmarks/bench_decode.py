"""Decode speed against ``json.loads`` on the same text, measured in the same run.

A realistic envelope: 40 confirmations with small inputs, 120 route decisions, a turn lease
and 10 terminal turns. Prints the medians of alternating timed batches of
``decode_session_snapshot(text)`` and ``json.loads(text)`` and their ratio (target: <= 2.5x).
Then hostile sizes (5 MB strings): refusing them should cost a small multiple of parsing them.
Not a test: timing never gates CI.

    python benchmarks/bench_decode.py [--repeat N]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from akchat_fsm.errors import InvalidControlledSnapshot
from akchat_fsm.wire.controlled import parse_controlled_snapshot
from akchat_fsm.wire.decode import decode_session_snapshot


def realistic_envelope() -> dict[str, Any]:
    statuses = ["pending", "approving", "approved", "rejected", "expired"]
    return {
        "protocol": "agentskit.chat.session",
        "version": 1,
        "sessionId": "session-7f3a9c",
        "definitionId": "support-desk",
        "definitionRevision": 3,
        "updatedAt": "2026-07-11T09:15:42.117Z",
        "cursor": 412,
        "activeTurn": {"turnId": "turn-413", "expiresAt": 1783761342117},
        "terminalTurns": [
            {"turnId": f"turn-{400 + i}", "outcome": "completed" if i % 3 else "indeterminate"}
            for i in range(10)
        ],
        "conversation": {
            "state": "collecting-details",
            "decisions": [
                {
                    "messageId": f"msg-1783761{i:06d}-{i}",
                    "input": f"/route {i} please look at order #{1000 + i} — thanks",
                    "routeId": f"route.step-{i % 7}",
                    "kind": ["deterministic", "repaired", "fallback"][i % 3],
                    "content": f"Step {i}: we looked up order {1000 + i}; anything else?",
                    "fromState": f"state-{i}",
                    "toState": f"state-{i + 1}",
                }
                for i in range(120)
            ],
        },
        "confirmations": [
            {
                "token": f"confirm-{i:04d}",
                "action": "email.send" if i % 2 else "ticket.update",
                "input": {"to": f"user{i}@example.com", "priority": i % 4, "cc": ["ops"]},
                "toolCallId": f"app-{i:04d}",
                "expiresAt": 1783761300000 + i,
                "status": statuses[i % len(statuses)],
            }
            for i in range(40)
        ],
    }


def paired_medians(
    baseline: Callable[[], object], subject: Callable[[], object], repeat: int, number: int
) -> tuple[float, float, float]:
    """Median per-call seconds of each, and the median of per-pair ratios.

    Batches alternate (baseline, subject, baseline, ...) so load from other processes on a
    shared machine hits both sides alike; the ratio of each adjacent pair is what we report.
    """

    def batch(fn: Callable[[], object]) -> float:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - start) / number

    pairs = [(batch(baseline), batch(subject)) for _ in range(repeat)]
    return (
        statistics.median(p[0] for p in pairs),
        statistics.median(p[1] for p in pairs),
        statistics.median(p[1] / p[0] for p in pairs),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=25)
    parser.add_argument("--number", type=int, default=50)
    args = parser.parse_args()
    text = json.dumps(realistic_envelope(), ensure_ascii=False)
    result = decode_session_snapshot(text)
    assert result.ok, result.diagnostic
    baseline, decode, ratio = paired_medians(
        lambda: json.loads(text), lambda: decode_session_snapshot(text), args.repeat, args.number
    )
    print(f"envelope: {len(text.encode())} bytes")
    print(f"json.loads:              {baseline * 1e6:9.1f} us (median)")
    print(f"decode_session_snapshot: {decode * 1e6:9.1f} us (median)")
    print(f"ratio:                   {ratio:9.2f}x (median of paired batches; target <= 2.5x)")
    huge_inputs()


def huge_inputs() -> None:
    """Hostile sizes must fail about as fast as they parse (no per-character Python loops)."""
    usage = {"promptTokens": 0, "completionTokens": 0, "totalTokens": 0}
    shell: dict[str, Any] = {
        "sessionId": "s",
        "messages": [],
        "status": "idle",
        "error": None,
        "usage": usage,
    }
    envelope = {**realistic_envelope(), "sessionId": "s"}
    cases = {
        "controlled input, 5 MB astral": {**shell, "input": "\U0001f600" * 1_250_000},
        "controlled input, 5 MB ascii": {**shell, "input": "y" * 5_000_000},
        "session id, 5 MB": {**envelope, "sessionId": "a" * 5_000_000},
        "session unknown key, 5 MB": {**envelope, "x": "\u00e9" * 2_500_000},
    }
    for name, value in cases.items():
        text = json.dumps(value, ensure_ascii=False)
        subject = _refuse_controlled if "controlled" in name else decode_session_snapshot
        _, took, ratio = paired_medians(
            functools.partial(json.loads, text), functools.partial(subject, text), 5, 2
        )
        print(f"{name + ':':32} {took * 1e3:7.1f} ms = {ratio:5.2f}x json.loads")


def _refuse_controlled(text: str) -> None:
    try:
        parse_controlled_snapshot(text)
    except InvalidControlledSnapshot:
        return
    raise AssertionError("a 5 MB input must be refused")


if __name__ == "__main__":
    main()
