"""A decision bound to the arguments the person saw (ADR-0132): the digest and its refusals.

The digest is the same in JavaScript (vectors made by ``tests/data/digest/make_vectors.mjs``
with Node's own ``JSON.stringify``, ``sort`` and ``crypto``); a decision carrying another
call's digest is refused before any write or upstream call, sync and asyncio alike.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from akchat_fsm import ArgumentsMismatch, ConfigError, arguments_digest
from akchat_fsm.session import ChatDefinition, resume_chat_session, resume_chat_session_async
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.testing.doubles import AsyncRecordingUpstream, RecordingUpstream
from akchat_fsm.wire.digest import canonical_json
from akchat_fsm.wire.jsontext import parse_json_text

VECTORS = json.loads((Path(__file__).parents[1] / "data/digest/vectors.json").read_text())
DEFINITION = ChatDefinition("support")
ARGS = {"to": "a@example.com", "amount": 12.5, "currency": "EUR"}


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: v["input"][:40])
def test_the_digest_is_javascripts(vector: dict[str, str]) -> None:
    value = parse_json_text(vector["input"])
    assert canonical_json(value) == vector["canonical"]
    assert arguments_digest(value) == vector["digest"]


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: v["input"][:40])
def test_a_stored_bindings_digest_is_its_inputs(vector: dict[str, str]) -> None:
    # Through the real model (frozen input, JS numbers, lone surrogates kept) and back from
    # storage: what a later process recomputes is what the vector says.
    storage = MemoryStorage()
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    binding = session.confirmations_for(RecordingUpstream()).propose(
        "email.send", parse_json_text(vector["input"])
    )
    assert arguments_digest(binding.input) == vector["digest"]
    again = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    assert arguments_digest(again.confirmations[0].input) == vector["digest"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False,
    allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
    max_size=4),
    max_leaves=20,
)  # fmt: skip


@given(st.dictionaries(st.text(max_size=4), json_values, max_size=6), st.randoms())
def test_member_order_never_changes_the_digest(value: dict[str, Any], rnd: Any) -> None:
    items = list(value.items())
    rnd.shuffle(items)
    assert arguments_digest(dict(items)) == arguments_digest(value)
    # the canonical text is the same value as JSON.parse reads numbers
    assert parse_json_text(canonical_json(value)) == parse_json_text(json.dumps(value))


@given(st.dictionaries(st.text(max_size=4), json_values, min_size=1, max_size=6), st.data())
def test_any_changed_value_changes_the_digest(value: dict[str, Any], data: Any) -> None:
    key = data.draw(st.sampled_from(sorted(value)))
    other = data.draw(json_values.filter(lambda v: json.dumps(v) != json.dumps(value[key])))
    changed = {**value, key: other}
    if canonical_json(changed) != canonical_json(value):  # 0 and -0.0 print alike, as in JS
        assert arguments_digest(changed) != arguments_digest(value)


def test_a_digest_of_a_non_json_value_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        arguments_digest({"when": object()})
    with pytest.raises(ValueError):
        arguments_digest({"x": float("nan")})


def _proposed() -> tuple[MemoryStorage, RecordingUpstream, Any, Any]:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    coordinator = resume_chat_session(
        DEFINITION, session_id="s", storage=storage
    ).confirmations_for(upstream)
    return storage, upstream, coordinator, coordinator.propose("email.send", ARGS)


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_decision_for_other_arguments_writes_and_calls_nothing(decision: str) -> None:
    storage, upstream, coordinator, binding = _proposed()
    before = storage.load("s")
    shown = arguments_digest({**ARGS, "amount": 1250})
    with pytest.raises(ArgumentsMismatch) as raised:
        getattr(coordinator, decision)(binding.token, args_digest=shown)
    assert raised.value.given == shown
    assert raised.value.expected == arguments_digest(ARGS)
    assert raised.value.record == binding
    assert storage.load("s") == before
    assert upstream.calls == []


def test_a_decision_for_the_arguments_shown_runs_once() -> None:
    _, upstream, coordinator, binding = _proposed()
    done = coordinator.approve(binding.token, args_digest=arguments_digest(ARGS))
    assert done.status == "approved"
    assert upstream.calls == [("approve", binding.tool_call_id)]


def test_a_settled_decision_repeated_for_other_arguments_is_refused() -> None:
    _, upstream, coordinator, binding = _proposed()
    coordinator.approve(binding.token, args_digest=arguments_digest(ARGS))
    # the same decision, for the same arguments: answered from the stored record
    assert coordinator.approve(binding.token, args_digest=arguments_digest(ARGS)).status == (
        "approved"
    )
    with pytest.raises(ArgumentsMismatch):
        coordinator.approve(binding.token, args_digest=arguments_digest({}))
    assert upstream.calls == [("approve", binding.tool_call_id)]


@pytest.mark.parametrize("bad", [b"sha256:00", 7, ["sha256:"]])
def test_a_digest_that_is_not_a_str_is_a_config_error(bad: object) -> None:
    storage, upstream, coordinator, binding = _proposed()
    before = storage.load("s")
    with pytest.raises(ConfigError):
        coordinator.approve(binding.token, args_digest=bad)  # type: ignore[arg-type]
    assert storage.load("s") == before
    assert upstream.calls == []


def test_the_asyncio_twin_refuses_the_same() -> None:
    async def scenario() -> None:
        storage, upstream = AsyncMemoryStorage(), AsyncRecordingUpstream()
        session = await resume_chat_session_async(DEFINITION, session_id="s", storage=storage)
        coordinator = session.confirmations_for(upstream)
        binding = await coordinator.propose("email.send", ARGS)
        before = await storage.load("s")
        with pytest.raises(ArgumentsMismatch):
            await coordinator.reject(binding.token, reason="no", args_digest="sha256:0")
        assert await storage.load("s") == before
        done = await coordinator.approve(binding.token, args_digest=arguments_digest(ARGS))
        assert done.status == "approved"
        assert upstream.sync.calls == [("approve", binding.tool_call_id)]

    asyncio.run(scenario())
