"""Model -> code: SPIN's random runs of the correct model, replayed against the real plans.

Each run is ``spin -DTRACE -u<steps> -n<seed>`` of ``models/resolution.pml`` (three clients
on one confirmation, with or without a crash, an unknown save outcome, an upstream fault and
the release-only reconciler; see ``_conformance.CONFIGS``), replayed step by step on a real
storage; after every step the stored status, the relative cursor, what upstream did and each
client's upstream calls must equal the model's. The seeds are fixed (the same for every
Hypothesis seed); more under ``deep``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from akchat_fsm.errors import OutcomeUnknown
from akchat_fsm.session import _confirm
from akchat_fsm.session.effects import CallApprove, CallDeny, SaveSnapshot
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.wire.enums import ConfirmationStatus

from ._conformance import CONFIGS, Code, Mismatch, replay, simulate

pytestmark = pytest.mark.skipif(shutil.which("spin") is None, reason="spin is not installed")

SEEDS = range(1, 31)
STEPS = 400


def _storage(kind: str, tmp_path: Path) -> Any:
    return MemoryStorage() if kind == "memory" else SQLiteStorage(tmp_path / "conf.db")


def _replayed(
    kind: str, tmp_path: Path, seeds: range, steps: int, config: str, resolve: Any = None
) -> int:
    total = 0
    for seed in seeds:
        trace = simulate(tmp_path, seed, steps, config)
        assert trace, f"seed {seed}: the model printed no steps (built without -DTRACE?)"
        storage = _storage(kind, tmp_path / f"s{seed}")
        code = Code(storage, session_id=f"conf-{seed}", **({"resolve": resolve} if resolve else {}))
        total += sum(1 for _ in replay(trace, code))  # raises Mismatch at the first divergence
        close = getattr(storage, "close", None)
        if close:
            close()
    return total


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    for seed in SEEDS:
        (tmp_path / f"s{seed}").mkdir()
    return tmp_path


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_the_code_follows_the_models_random_runs(kind: str, config: str, workdir: Path) -> None:
    replayed = _replayed(kind, workdir, SEEDS, STEPS, config)
    assert replayed >= 10 * len(SEEDS), replayed  # every run did something
    print(f"{kind}/{config}: {replayed} model steps replayed over {len(SEEDS)} runs")


@pytest.mark.deep
def test_the_code_follows_many_more_random_runs(tmp_path: Path) -> None:
    seeds = range(1, 201)
    for seed in seeds:
        (tmp_path / f"s{seed}").mkdir()
    for config in sorted(CONFIGS):
        assert _replayed("memory", tmp_path, seeds, 2_000, config) > 0


def _upstream_first(holder: Any, token: str, intent: Any) -> Any:
    """A code-only mutant: the coordinator calls upstream before its claim save (the model's
    ``BUG_UPSTREAM_FIRST``, done in the code while the model stays correct)."""
    plan = _confirm.plan_resolve(holder, token, intent, reason="no")
    value: Any = None
    early = False
    while True:
        try:
            effect = plan.send(value)
        except StopIteration as stop:
            return stop.value
        if isinstance(effect, SaveSnapshot) and not early:
            early = True
            record = effect.snapshot.confirmations[0]
            if record.status is ConfirmationStatus.APPROVING:
                yield CallApprove(record.tool_call_id)
            else:
                yield CallDeny(record.tool_call_id, "no")
        if isinstance(effect, CallApprove | CallDeny):
            value = None  # already called, before the claim
            continue
        value = yield effect


def _unknown_is_applied(holder: Any, token: str, intent: Any) -> Any:
    """A code-only mutant: a claim save whose outcome is unknown is taken as applied (no
    re-read of the nonce; the model's ``BUG_NO_NONCE`` is the nearest seeded bug)."""
    plan = _confirm.plan_resolve(holder, token, intent, reason="no")
    claimed = False
    try:
        effect = plan.send(None)
        while True:
            try:
                value = yield effect
            except OutcomeUnknown as exc:
                if claimed or not isinstance(effect, SaveSnapshot):
                    effect = plan.throw(exc)
                else:
                    claimed = True
                    effect = plan.send(True)  # the bug: "it must have applied"
            except Exception as exc:
                effect = plan.throw(exc)
            else:
                claimed = claimed or isinstance(effect, SaveSnapshot)
                effect = plan.send(value)
    except StopIteration as stop:
        return stop.value


def test_conformance_bites_a_coordinator_that_takes_an_unknown_claim_as_won(
    workdir: Path,
) -> None:
    with pytest.raises(Mismatch, match=r"stopped in the model; the code does Call(Approve|Deny)"):
        _replayed("memory", workdir, SEEDS, STEPS, "faults", resolve=_unknown_is_applied)


def test_conformance_bites_a_coordinator_that_calls_upstream_before_its_claim(
    workdir: Path,
) -> None:
    with pytest.raises(
        Mismatch, match=r"claims in the model; the code's next is .*Call(Approve|Deny)"
    ):
        _replayed("memory", workdir, SEEDS, STEPS, "races", resolve=_upstream_first)
