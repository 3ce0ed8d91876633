"""Each binding's canonical text is cached per instance, and never outlives its values (ADR-0116).

``to_json`` joins the cached text of every binding: the result must be byte-identical to the
JS-exact encoder's output of the same envelope, however the bindings were made (decoded,
constructed, ``model_copy`` with or without ``update``, ``copy``, ``deepcopy``, pickled).
"""

from __future__ import annotations

import copy
import gc
import pickle
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from akchat_fsm.testing.strategies import confirmation_bindings, session_snapshots
from akchat_fsm.wire import session as wire_session
from akchat_fsm.wire.enums import ConfirmationStatus
from akchat_fsm.wire.session import (
    ConfirmationBinding,
    SessionSnapshot,
    _binding_json,
    _encode,
    binding_text,
)

COPIES = st.sampled_from(["model_copy", "model_copy_deep", "copy", "deepcopy", "pickle"])


def _copied(binding: ConfirmationBinding, how: str, update: dict[str, Any]) -> Any:
    if how == "model_copy":
        return binding.model_copy(update=update)
    if how == "model_copy_deep":
        return binding.model_copy(update=update, deep=True)
    made = {"copy": copy.copy, "deepcopy": copy.deepcopy}.get(how)
    same = made(binding) if made is not None else pickle.loads(pickle.dumps(binding))
    return same.model_copy(update=update) if update else same


def _exact(snapshot: SessionSnapshot) -> str:
    return _encode(snapshot.to_wire())


@given(session_snapshots())
def test_to_json_with_warm_texts_is_the_exact_text(snapshot: SessionSnapshot) -> None:
    first = snapshot.to_json()  # fills the cache
    assert first == snapshot.to_json() == _exact(snapshot)
    # A new envelope carrying the same binding instances reuses their texts.
    moved = snapshot.model_copy(update={"cursor": snapshot.cursor // 2})
    assert moved.to_json() == _exact(moved)


@given(confirmation_bindings())
def test_binding_text_is_the_binding_encoder(binding: ConfirmationBinding) -> None:
    assert binding_text(binding) == _binding_json(binding)
    assert binding_text(binding) == _binding_json(binding)  # warm


@given(
    session_snapshots().filter(lambda s: bool(s.confirmations)),
    COPIES,
    st.sampled_from(ConfirmationStatus),
    st.integers(0, 2**53 - 1),
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
    st.booleans(),
)
def test_copies_never_inherit_a_stale_text(
    snapshot: SessionSnapshot,
    how: str,
    status: ConfirmationStatus,
    expires_at: int,
    new_input: dict[str, Any],
    change_input: bool,
) -> None:
    snapshot.to_json()  # every original binding's text is cached now
    update: dict[str, Any] = {"status": status, "expires_at": expires_at}
    if change_input:
        # model_copy does not validate: give the input its frozen form, as the core does.
        update["input"] = ConfirmationBinding(
            token="t", action="a", input=new_input, tool_call_id="c", expires_at=0,
            status=ConfirmationStatus.PENDING,
        ).input  # fmt: skip
    changed = tuple(_copied(b, how, update) for b in snapshot.confirmations)
    edited = snapshot.model_copy(update={"confirmations": changed})
    assert edited.to_json() == _exact(edited)
    assert snapshot.to_json() == _exact(snapshot)  # the originals keep their own texts


def test_a_warm_envelope_encodes_no_binding_again(monkeypatch: Any) -> None:
    bindings = tuple(
        ConfirmationBinding(
            token=f"t{i}", action="a", input={"n": i}, tool_call_id=f"c{i}", expires_at=i,
            status=ConfirmationStatus.PENDING,
        )
        for i in range(5)
    )  # fmt: skip
    snapshot = SessionSnapshot(
        session_id="s", definition_id="d", definition_revision=1,
        updated_at="2026-01-01T00:00:00.000Z", cursor=1, confirmations=bindings,
    )  # fmt: skip
    snapshot.to_json()
    calls: list[object] = []

    def counting(binding: ConfirmationBinding) -> str:
        calls.append(binding)
        return _binding_json(binding)

    monkeypatch.setattr(wire_session, "_binding_json", counting)
    claimed = bindings[2].model_copy(update={"status": ConfirmationStatus.APPROVING})
    next_one = snapshot.model_copy(
        update={"cursor": 2, "confirmations": (*bindings[:2], claimed, *bindings[3:])}
    )
    assert next_one.to_json() == _exact(next_one)
    assert calls == [claimed]  # only the one replaced binding was encoded


def test_the_cache_forgets_a_binding_that_is_gone() -> None:
    binding = ConfirmationBinding(
        token="gone", action="a", input={}, tool_call_id="c", expires_at=0,
        status=ConfirmationStatus.PENDING,
    )  # fmt: skip
    binding_text(binding)
    key = id(binding)
    assert key in wire_session._BINDING_TEXTS
    del binding
    gc.collect()
    entry = wire_session._BINDING_TEXTS.get(key)
    assert entry is None or entry[0]() is not None  # gone, or a new object reusing the id
