"""A resolution's work does not grow with the envelope (counted, never timed; ADR-0111).

The speed itself is measured by ``benchmarks/bench_resolution.py`` as a ratio against a raw
CAS; these tests pin the counts that make it flat: the kernel decides on the one record at
stake, and a token is looked up without scanning the envelope again after each move.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from akchat_fsm.core import (
    ConfirmationEvent,
    SessionState,
    claim_resolution,
    complete_resolution,
    find_binding,
)
from akchat_fsm.core import confirmations as adapters
from akchat_fsm.core.records import Record, claim_at, complete_at, release_at
from akchat_fsm.errors import AlreadyResolved, IllegalTransition, ResolutionInProgress
from akchat_fsm.wire.enums import ConfirmationStatus

from .conftest import T0, fresh, proposed, saved

S = ConfirmationStatus


def _session(records: int) -> tuple[SessionState, str]:
    state = fresh()
    token = ""
    for n in range(records):
        state, token = proposed(state, suffix=f"s{n}", ttl_ms=10_000)
    return state, token


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Counts the kernel records the adapters build and the token maps they build."""
    counts = {"records": 0, "maps": 0}

    class CountedRecord(Record):
        def __init__(self, *args: object, **kwargs: object) -> None:
            counts["records"] += 1
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    build = adapters._build_positions

    def counted_build(bindings: tuple[object, ...]) -> dict[str, int]:
        counts["maps"] += 1
        return build(bindings)  # type: ignore[arg-type]

    monkeypatch.setattr(adapters, "Record", CountedRecord)
    monkeypatch.setattr(adapters, "_build_positions", counted_build)
    yield counts


@pytest.mark.parametrize("size", [3, 300])
def test_a_resolution_builds_four_records_and_one_token_map_at_any_size(
    size: int, counted: dict[str, int]
) -> None:
    state, token = _session(size)
    counted.update(records=0, maps=0)  # count the resolution only
    claimed = saved(claim_resolution(state, token, ConfirmationEvent.APPROVE, T0))
    for _ in range(3):  # the shell looks the token up after the claim, as often as it likes
        assert find_binding(claimed, token) is claimed.snapshot.confirmations[-1]
    done = saved(complete_resolution(claimed, token, T0))
    binding = find_binding(done, token)
    assert binding is not None and binding.status is S.APPROVED
    # Without the one-record decision this grows with `size` (one Record per binding per
    # command); without the carried-over map every lookup after a move rescans the envelope.
    # Two per command: the record at stake, and the kernel's moved copy of it.
    assert counted == {"records": 4, "maps": 1}
    assert [b.status for b in done.snapshot.confirmations[:-1]] == [S.PENDING] * (size - 1)


def test_a_stale_token_map_is_never_trusted(counted: dict[str, int]) -> None:
    state, token = _session(2)
    state.token_index.put((), {token: 0})  # a map built for another tuple
    counted.update(records=0, maps=0)
    binding = find_binding(state, token)
    assert binding is not None and binding.token == token
    assert binding is state.snapshot.confirmations[1]
    assert counted["maps"] == 1


def test_a_state_copied_onto_other_bindings_never_reads_the_old_map(
    counted: dict[str, int],
) -> None:
    # `replace` shares the index object with the copy; the copy's own bindings still decide.
    state, token = _session(3)
    assert find_binding(state, token) is state.snapshot.confirmations[2]
    reordered = state.snapshot.model_copy(
        update={"confirmations": tuple(reversed(state.snapshot.confirmations))}
    )
    other = replace(state, snapshot=reordered)
    assert other.token_index is state.token_index
    assert find_binding(other, token) is reordered.confirmations[0]
    assert find_binding(state, token) is state.snapshot.confirmations[2]


def test_kernel_decides_at_an_index_and_leaves_the_others() -> None:
    records = (
        Record("a", "x", "ca", 10, S.PENDING),
        Record("b", "x", "cb", 10, S.PENDING),
        Record("c", "x", "cc", 10, S.APPROVED),
    )
    won = claim_at(records, 1, ConfirmationEvent.REJECT, 10)  # at expiry: expiring, not rejecting
    assert won.index == 1 and won.record.status is S.EXPIRING
    assert won.records[0] is records[0] and won.records[2] is records[2]
    assert complete_at(won.records, 1)[1].status is S.EXPIRED
    assert release_at(won.records, 1)[1].status is S.PENDING
    with pytest.raises(AlreadyResolved):
        claim_at(records, 2, ConfirmationEvent.APPROVE, 0)
    with pytest.raises(ResolutionInProgress):
        claim_at(won.records, 1, ConfirmationEvent.APPROVE, 0)
    with pytest.raises(IllegalTransition):
        complete_at(records, 0)
