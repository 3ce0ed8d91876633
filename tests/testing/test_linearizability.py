"""The checker agrees with Jepsen's verdicts, passes model runs and catches mutated ones."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
from typing import Any

import pytest

from akchat_fsm.testing.linearizability import (
    UNKNOWN,
    CasRegisterModel,
    EtcdRegisterModel,
    History,
    Operation,
    check_history,
    parse_jepsen_log,
)

REPO = Path(__file__).resolve().parents[2]
JEPSEN_DIR = Path(
    os.environ.get("AKCHAT_JEPSEN_DIR", REPO.parent / "shared" / "data" / "jepsen-etcd")
)


def _jepsen_cases() -> list[tuple[str, bool]]:
    expected = JEPSEN_DIR / "expected.json"
    if not expected.is_file():
        return []
    verdicts: dict[str, bool] = json.loads(expected.read_text())
    return sorted(verdicts.items())


JEPSEN = _jepsen_cases()


@pytest.mark.skipif(not JEPSEN, reason=f"Jepsen etcd histories not found in {JEPSEN_DIR}")
def test_agrees_with_every_jepsen_verdict() -> None:
    disagreements = []
    for name, linearizable in JEPSEN:
        ops = parse_jepsen_log((JEPSEN_DIR / name).read_text())
        result = check_history(ops, EtcdRegisterModel(), max_steps=20_000_000, timeout_s=120)
        if result.verdict != ("ok" if linearizable else "illegal"):
            disagreements.append((name, linearizable, result.verdict))
    assert disagreements == []
    assert len(JEPSEN) == 102


@pytest.mark.skipif(not JEPSEN, reason=f"Jepsen etcd histories not found in {JEPSEN_DIR}")
def test_parser_reads_unknown_outcomes_as_unknown() -> None:
    ops = parse_jepsen_log((JEPSEN_DIR / "etcd_000.log").read_text())
    assert {op.kind for op in ops} == {"read", "write", "cas"}
    unknown = [op for op in ops if op.unknown]
    assert unknown and all(math.isinf(op.return_ns) for op in unknown)
    assert all(op.return_ns > op.call_ns for op in ops)


@pytest.mark.skipif(not JEPSEN, reason=f"Jepsen etcd histories not found in {JEPSEN_DIR}")
def test_exhausted_budget_is_unknown_never_ok() -> None:
    ops = parse_jepsen_log((JEPSEN_DIR / "etcd_002.log").read_text())  # a legal history
    result = check_history(ops, EtcdRegisterModel(), max_steps=5_000)
    assert result.verdict == "unknown"
    assert not result.ok


# --------------------------------------------------------------------------- generated


def _sequential_etcd(rng: random.Random, n: int) -> list[Operation]:
    """Run the register sequentially: non-overlapping operations with true outputs."""
    value: Any = None
    ops: list[Operation] = []
    op_input: Any
    for t in range(n):
        kind = rng.choice(["read", "write", "cas"])
        if kind == "read":
            op_input, output = None, value
        elif kind == "write":
            op_input, output, value = rng.randint(0, 4), True, None
            value = op_input
        else:
            op_input = (rng.choice([None, 0, 1, 2, value]), rng.randint(0, 4))
            output = op_input[0] == value
            if output:
                value = op_input[1]
        ops.append(Operation(rng.randint(0, 4), kind, op_input, output, 2 * t, 2 * t + 1))
    return ops


def _mutate(rng: random.Random, ops: list[Operation]) -> list[Operation]:
    """Change one determined output (a read's value or a cas's verdict)."""
    candidates = [i for i, op in enumerate(ops) if op.kind in ("read", "cas")]
    i = rng.choice(candidates)
    op = ops[i]
    if op.kind == "read":
        wrong = rng.choice([v for v in [None, 0, 1, 2, 3, 4] if v != op.output])
    else:
        wrong = not op.output
    return [
        *ops[:i],
        Operation(op.process, op.kind, op.input, wrong, op.call_ns, op.return_ns),
        *ops[i + 1 :],
    ]


@pytest.mark.parametrize("seed", range(40))
def test_model_runs_pass_and_one_mutation_fails(seed: int) -> None:
    rng = random.Random(seed)
    ops = _sequential_etcd(rng, 60)
    assert check_history(ops, EtcdRegisterModel()).verdict == "ok"
    assert check_history(_mutate(rng, ops), EtcdRegisterModel()).verdict == "illegal"


def _sequential_cas(rng: random.Random, n: int, keys: int = 3) -> list[Operation]:
    state: dict[str, Any] = {}
    ops = []
    for t in range(n):
        key = f"k{rng.randrange(keys)}"
        current = state.get(key)
        kind = rng.choice(["load", "save", "save", "delete"])
        if kind == "load":
            op_input, output = None, current
        elif kind == "save":
            good = None if current is None else current[0]
            expected = good if rng.random() < 0.6 else rng.choice([None, 1, 2, 3])
            value = ((expected or 0) + 1, f"w{t}")
            output = expected == good
            if output:
                state[key] = value
            op_input = (expected, value)
        else:
            op_input, output = None, None
            state.pop(key, None)
        ops.append(Operation(0, kind, op_input, output, 2 * t, 2 * t + 1, key))
    return ops


@pytest.mark.parametrize("seed", range(40))
def test_cas_model_runs_pass_and_one_mutation_fails(seed: int) -> None:
    rng = random.Random(seed)
    ops = _sequential_cas(rng, 80)
    assert check_history(ops, CasRegisterModel()).verdict == "ok"
    i = rng.choice([j for j, op in enumerate(ops) if op.kind in ("load", "save")])
    op = ops[i]
    wrong: Any = not op.output if op.kind == "save" else (99, "never-written")
    ops[i] = Operation(op.process, op.kind, op.input, wrong, op.call_ns, op.return_ns, op.key)
    result = check_history(ops, CasRegisterModel())
    assert result.verdict == "illegal"
    assert result.failed_key == op.key


# --------------------------------------------------------------------------- semantics


def _op(kind: str, op_input: Any, output: Any, call: float, ret: float, p: int = 0) -> Operation:
    return Operation(p, kind, op_input, output, call, ret, "k")


def test_concurrent_ops_may_take_effect_in_either_order() -> None:
    # Two overlapping creates: one wins, and a read after both sees the winner.
    ops = [
        _op("save", (None, (1, "b")), False, 0, 10, 1),
        _op("save", (None, (1, "a")), True, 1, 9, 2),
        _op("load", None, (1, "a"), 11, 12),
    ]
    assert check_history(ops, CasRegisterModel()).ok
    lost = [*ops[:2], _op("save", (None, (1, "c")), True, 13, 14)]  # a second create "wins"
    assert check_history(lost, CasRegisterModel()).verdict == "illegal"


def test_unknown_outcome_may_apply_later_or_never() -> None:
    unknown_create = _op("save", (None, (1, "a")), UNKNOWN, 0, math.inf, 1)
    applied_later = [
        unknown_create,
        _op("load", None, None, 1, 2),
        _op("load", None, (1, "a"), 3, 4),
    ]
    never = [unknown_create, _op("load", None, None, 1, 2), _op("load", None, None, 5, 6)]
    assert check_history(applied_later, CasRegisterModel()).ok
    assert check_history(never, CasRegisterModel()).ok
    flapping = [*applied_later, _op("load", None, None, 7, 8)]  # applied, then gone again
    assert check_history(flapping, CasRegisterModel()).verdict == "illegal"


def test_without_contention_a_history_is_invalid() -> None:
    ops = [
        _op("save", (None, (1, "a")), True, 0, 1),
        _op("save", (1, (2, "b")), True, 2, 3),
        _op("load", None, (2, "b"), 4, 5),
    ]
    assert check_history(ops, CasRegisterModel()).ok
    result = check_history(ops, CasRegisterModel(), require_contention=True)
    assert result.verdict == "invalid"
    assert "no contention" in str(result)


def test_recorder_marks_unknown_outcomes() -> None:
    history = History()
    with history.record(1, "load", None, key="k") as call:
        call.output = None
    with (
        pytest.raises(TimeoutError),
        history.record(2, "save", (None, (1, "a")), key="k", unknown=(TimeoutError,)),
    ):
        raise TimeoutError
    with pytest.raises(KeyError), history.record(3, "load", None, key="k"):
        raise KeyError
    first, second = history.operations
    assert first.output is None and first.return_ns >= first.call_ns
    assert second.unknown and math.isinf(second.return_ns)
