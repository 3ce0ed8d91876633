"""The checker agrees with Jepsen's verdicts, passes model runs and catches mutated ones."""

from __future__ import annotations

import json
import math
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest

from akchat_fsm.errors import InvalidInput
from akchat_fsm.testing import _wgl
from akchat_fsm.testing.linearizability import (
    UNKNOWN,
    CasRegisterModel,
    EtcdRegisterModel,
    History,
    MalformedHistory,
    Operation,
    check_history,
    parse_jepsen_log,
    read_jepsen_log,
    simulated_cas_history,
    simulated_lockstep_history,
)

REPO = Path(__file__).resolve().parents[2]
# In the repository (tests/data/jepsen-etcd, with its licence and provenance), so a fresh
# clone runs these tests; AKCHAT_JEPSEN_DIR points them at another copy.
JEPSEN_DIR = Path(os.environ.get("AKCHAT_JEPSEN_DIR", REPO / "tests" / "data" / "jepsen-etcd"))


def _jepsen_cases() -> list[tuple[str, bool]]:
    # Never a skip: a missing corpus fails here, at collection, naming the directory.
    verdicts: dict[str, bool] = json.loads((JEPSEN_DIR / "expected.json").read_text())
    return sorted(verdicts.items())


JEPSEN = _jepsen_cases()


def test_the_corpus_is_in_the_repository_with_its_licence() -> None:
    corpus = REPO / "tests" / "data" / "jepsen-etcd"
    assert len(list(corpus.glob("etcd_*.log"))) == 103
    assert "MIT License" in (corpus / "LICENSE.md").read_text()
    assert "Provenance" in (corpus / "README.md").read_text()


def test_agrees_with_every_jepsen_verdict() -> None:
    disagreements = []
    for name, linearizable in JEPSEN:
        ops = parse_jepsen_log((JEPSEN_DIR / name).read_text())
        result = check_history(ops, EtcdRegisterModel(), max_steps=20_000_000, timeout_s=120)
        if result.verdict != ("ok" if linearizable else "illegal"):
            disagreements.append((name, linearizable, result.verdict))
    assert disagreements == []
    assert len(JEPSEN) == 102


def test_parser_reads_unknown_outcomes_as_unknown() -> None:
    ops = parse_jepsen_log((JEPSEN_DIR / "etcd_000.log").read_text())
    assert {op.kind for op in ops} == {"read", "write", "cas"}
    unknown = [op for op in ops if op.unknown]
    assert unknown and all(math.isinf(op.return_ns) for op in unknown)
    assert all(op.return_ns > op.call_ns for op in ops)


def test_exhausted_budget_is_unknown_never_ok() -> None:
    ops = parse_jepsen_log((JEPSEN_DIR / "etcd_080.log").read_text())  # a legal history
    assert check_history(ops, EtcdRegisterModel()).ok  # ~6,000 steps, ~0.13 MB of memo
    result = check_history(ops, EtcdRegisterModel(), max_steps=2_000)
    assert (result.verdict, result.budget) == ("unknown", "steps")
    assert not result.ok
    result = check_history(ops, EtcdRegisterModel(), max_memory_mb=0.05)
    assert (result.verdict, result.budget) == ("unknown", "memory")
    assert "unknown: budget (memory)" in str(result)


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


# --------------------------------------------------------------------------- brute force


def _brute_force(ops: list[Operation], model: Any) -> bool:
    """The definition itself: some order of *all* operations that respects real time (an
    operation that returned before another was called comes first) runs on the model with
    every known output (an unknown one may apply or not: the model's ``step`` says so)."""

    def extend(placed: int, states: frozenset[Any]) -> bool:
        if placed == (1 << len(ops)) - 1:
            return True
        for i, op in enumerate(ops):
            if placed >> i & 1:
                continue
            # i may go next only if no unplaced operation returned before i was called.
            if any(
                not placed >> j & 1 and j != i and other.return_ns < op.call_ns
                for j, other in enumerate(ops)
            ):
                continue
            after = frozenset(s for old in states for s in model.step(old, op))
            if after and extend(placed | 1 << i, after):
                return True
        return False

    return extend(0, frozenset((model.init(),)))


def _random_cas_history(rng: random.Random) -> list[Operation]:
    """A small history on one key: simulated from a correct store, then perhaps mutated."""
    ops = simulated_cas_history(
        rng.randrange(10**9), rng.randint(2, 7), processes=3, unknown=0.3, deletes=0.2
    )
    known = [i for i, op in enumerate(ops) if not op.unknown]
    if known and rng.random() < 0.6:
        i = rng.choice(known)
        op = ops[i]
        if op.kind == "load":
            wrong: Any = rng.choice([None, (1, "p0-1"), (2, "x"), (1, "p1-2")])
        elif op.kind == "save":
            wrong = UNKNOWN if rng.random() < 0.3 else not op.output
        else:
            wrong = op.output
        ret = math.inf if wrong is UNKNOWN else op.return_ns
        ops[i] = Operation(op.process, op.kind, op.input, wrong, op.call_ns, ret, op.key)
    return ops


def _random_etcd_history(rng: random.Random) -> list[Operation]:
    ops = []
    for p in range(rng.randint(2, 7)):
        call = rng.randint(0, 10)
        kind = rng.choice(["read", "write", "cas"])
        op_input: Any = None if kind == "read" else rng.randint(0, 2)
        if kind == "cas":
            op_input = (rng.choice([None, 0, 1]), rng.randint(0, 2))
        if rng.random() < 0.25:
            output, ret = UNKNOWN, math.inf
        else:
            output = rng.choice([None, 0, 1, 2]) if kind == "read" else True
            output = rng.random() < 0.5 if kind == "cas" else output
            ret = call + rng.randint(0, 6)
        ops.append(Operation(p, kind, op_input, output, call, ret))
    return ops


@pytest.mark.parametrize(
    "seed", [*range(4), *(pytest.param(s, marks=pytest.mark.deep) for s in range(4, 40))]
)
def test_agrees_with_brute_force_on_small_random_histories(seed: int) -> None:
    """1,500 histories per model and seed, both verdicts well represented (4 seeds by
    default: 12,000 histories; the deep run adds 36 more seeds: 120,000 in all)."""
    rng = random.Random(seed)
    verdicts = {True: 0, False: 0}
    for make, model in (
        (_random_cas_history, CasRegisterModel()),
        (_random_etcd_history, EtcdRegisterModel()),
    ):
        for _ in range(1_500):
            ops = make(rng)
            expected = _brute_force(ops, model)
            got = check_history(ops, model)
            assert got.verdict == ("ok" if expected else "illegal"), ops
            verdicts[expected] += 1
    assert min(verdicts.values()) > 300, verdicts


@pytest.mark.parametrize("order", sorted(_wgl.ORDERS))
def test_each_search_order_alone_agrees_with_brute_force(
    order: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first order to decide gives the verdict, so each must be right on its own."""
    monkeypatch.setattr(_wgl, "ORDERS", {order: 1})
    rng = random.Random(f"orders:{order}")
    verdicts = {True: 0, False: 0}
    for make, model in (
        (_random_cas_history, CasRegisterModel()),
        (_random_etcd_history, EtcdRegisterModel()),
    ):
        for _ in range(1_000):
            ops = make(rng)
            expected = _brute_force(ops, model)
            assert check_history(ops, model).verdict == ("ok" if expected else "illegal"), ops
            verdicts[expected] += 1
    assert min(verdicts.values()) > 200, verdicts


# --------------------------------------------------------------------------- scale


def test_a_lockstep_history_decides_within_a_budget_the_lazy_order_alone_exceeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kit's shape (8 clients in lockstep, 20% unknown outcomes): the eager order
    decides it in a third of the lazy one's steps (issue 27: the lazy order alone, 0.2.0's
    search, ran a 10,000-operation one out of memory)."""
    ops = simulated_lockstep_history(1, 4_000)
    assert sum(op.unknown for op in ops) >= 700
    result = check_history(ops, CasRegisterModel(), max_steps=250_000)
    assert (result.verdict, result.budget) == ("ok", None), str(result)[:2000]
    assert result.steps <= 200_000  # 190,844 measured
    monkeypatch.setattr(_wgl, "ORDERS", {"lazy": 1})
    lazy = check_history(ops, CasRegisterModel(), max_steps=250_000)
    assert (lazy.verdict, lazy.budget) == ("unknown", "steps")


def test_unknown_writes_that_land_late_decide_within_a_budget_the_eager_order_alone_exceeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Free-running clients whose applied unknown writes land up to 300 events later: the
    eager order (0.1.0's search) backtracks through their subsets; the lazy one does not."""
    ops = simulated_cas_history(1, 2_000, late=300)
    result = check_history(ops, CasRegisterModel(), max_steps=250_000)
    assert (result.verdict, result.budget) == ("ok", None), str(result)[:2000]
    assert result.steps <= 200_000  # 168,486 measured
    monkeypatch.setattr(_wgl, "ORDERS", {"eager": 1})
    eager = check_history(ops, CasRegisterModel(), max_steps=250_000)
    assert (eager.verdict, eager.budget) == ("unknown", "steps")


def test_the_issue_27_shapes_decide_within_the_default_budget() -> None:
    """10,000 lockstep operations (0.2.0: unknown, memory, after 1.9 million steps) and
    5,000 free-running ones, 20% unknown outcomes each, with ``check_history``'s defaults."""
    lockstep = check_history(simulated_lockstep_history(1, 10_000), CasRegisterModel())
    assert (lockstep.verdict, lockstep.budget) == ("ok", None)
    assert lockstep.steps <= 800_000 and lockstep.memo_bytes <= 100 * 1024 * 1024  # 670,733
    free = check_history(simulated_cas_history(1, 5_000), CasRegisterModel())
    assert (free.verdict, free.budget) == ("ok", None)
    assert free.steps <= 100_000  # 67,811 measured


@pytest.mark.deep
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_20000_operation_lockstep_history_decides_within_the_default_budget(seed: int) -> None:
    result = check_history(simulated_lockstep_history(seed, 20_000), CasRegisterModel())
    assert (result.verdict, result.budget) == ("ok", None), str(result)[:2000]


def test_a_long_history_with_unknown_outcomes_and_deletes_is_decided() -> None:
    """5,000 operations on one key, 20% unknown outcomes, deletes: decided within a step
    and memory budget the old search blew through (it ran out at 4.4 GB). The time is
    measured by benchmarks/bench_linearizability.py, not here."""
    ops = simulated_cas_history(1, 5_000, unknown=0.2, deletes=0.1)
    assert sum(op.unknown for op in ops) >= 900
    assert sum(op.kind == "delete" for op in ops) >= 200
    result = check_history(ops, CasRegisterModel(), max_steps=1_000_000, max_memory_mb=200)
    assert result.verdict == "ok", str(result)[:2000]
    # One changed read makes it illegal, and the report shows that read. (Proving a history
    # illegal searches everything before the failure: a late one costs far more steps.)
    i = next(i for i, op in enumerate(ops) if op.kind == "load" and i > 300 and not op.unknown)
    op = ops[i]
    ops[i] = Operation(
        op.process, "load", None, (99, "never-written"), op.call_ns, op.return_ns, "k"
    )
    result = check_history(ops, CasRegisterModel(), max_steps=1_000_000, max_memory_mb=200)
    assert result.verdict == "illegal"
    assert f"#{i} " in result.detail and "never-written" in result.detail


def test_the_report_shows_the_operations_around_the_failure_not_the_first_ones() -> None:
    """93 of 116 linearize: the report shows operations 90-ish, not 1-40."""
    ops = _sequential_cas(random.Random(3), 116, keys=1)
    i = next(i for i, op in enumerate(ops) if op.kind == "load" and i >= 93)
    op = ops[i]
    ops[i] = Operation(op.process, "load", None, (77, "ghost"), op.call_ns, op.return_ns, op.key)
    result = check_history(ops, CasRegisterModel())
    assert result.verdict == "illegal"
    assert f"places {i} of 116 operations" in result.detail
    assert f"#{i} " in result.detail and "cannot take effect" in result.detail
    assert f"#{i - 1} " in result.detail  # the last one placed, for context
    assert "#0 " not in result.detail and "#1 " not in result.detail
    assert "state after them" in result.detail


# --------------------------------------------------------------------------- malformed


def _good(**changes: Any) -> Operation:
    fields: dict[str, Any] = {
        "process": 0,
        "kind": "load",
        "input": None,
        "output": None,
        "call_ns": 0,
        "return_ns": 1,
        "key": "k",
    }
    fields.update(changes)
    return Operation(**fields)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (_good(call_ns=5, return_ns=2), "returns before its call"),
        (_good(call_ns=math.nan), "call_ns is NaN"),
        (_good(return_ns=math.nan), "return_ns is NaN"),
        (_good(call_ns=math.inf), "not a time"),
        (_good(call_ns="0"), "not a number"),
        (_good(output=[1, "a"]), "hashable"),
        (_good(kind="save", input=(None, [1, "a"]), output=True), "hashable"),
        (_good(return_ns=math.inf), "never returned"),
        (_good(kind="frobnicate"), "unknown kind 'frobnicate'"),
        (_good(kind="save", input=(None, 1), output=True), "not (expected, (cursor, marker))"),
        (_good(kind="save", input=(None, (1, "a")), output="yes"), "not a bool"),
        (_good(output=17), "not None or (cursor, marker)"),
    ],
)
def test_a_malformed_history_raises_a_typed_error(bad: Operation, message: str) -> None:
    with pytest.raises(MalformedHistory, match=re.escape(message)) as raised:
        check_history([_good(), bad], CasRegisterModel())
    assert isinstance(raised.value, InvalidInput)
    assert "operation 1" in str(raised.value)


def test_a_malformed_item_raises_a_typed_error() -> None:
    with pytest.raises(MalformedHistory, match="item 0 is a tuple"):
        check_history([(0, "load", None, None, 0, 1)], CasRegisterModel())  # type: ignore[list-item]


def test_the_strict_parser_refuses_what_it_cannot_read_and_the_lenient_one_lists_it() -> None:
    text = "\n".join(
        [
            "INFO  jepsen.util - 0\t:invoke\t:write\t1",
            "INFO  jepsen.util - 0\t:ok\t:write\t1",
            "",
            "INFO  jepsen.core - Run complete",
            "INFO  jepsen.util - 1\t:ok\t:read\t1",  # no invocation
            "INFO  jepsen.util - 2\t:invoke\t:read\t{:x 1}",  # not a value
            "INFO  jepsen.util - 3\t:invoke\t:append\t1",  # not a register function
            "INFO  jepsen.util - 0\t:invoke\t:read\tnil",
            "INFO  jepsen.util - 0\t:invoke\t:read\tnil",  # a busy process invoked again
            "INFO  jepsen.util - 0\t:ok\t:read\t1",
        ]
    )
    log = read_jepsen_log(text)
    assert [n for n, _, _ in log.skipped] == [4, 5, 6, 7, 9]
    reasons = " | ".join(why for _, _, why in log.skipped)
    for part in (
        "not a jepsen.util event",
        "no :invoke :read by process 1",
        "not nil",
        "unknown function :append",
        "invoked twice",
    ):
        assert part in reasons
    assert [(op.kind, op.output) for op in log.operations] == [("write", True), ("read", 1)]
    with pytest.raises(MalformedHistory, match="5 line\\(s\\) not understood: line 4"):
        parse_jepsen_log(text)
