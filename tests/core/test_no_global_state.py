"""The core keeps no state between calls: no module-level cache, nothing kept alive.

The token index of ADR-0111 is a memo on the :class:`SessionState` values that share one
bindings tuple (``SessionState.token_index``); it goes with them. These tests fail against a
process-global cache keyed by ``id()`` (what the core had before).
"""

from __future__ import annotations

import gc
import importlib
import pkgutil
import weakref
from types import MappingProxyType

import akchat_fsm.core
from akchat_fsm.core import ConfirmationEvent, claim_resolution, find_binding

from .conftest import T0, fresh, proposed, saved

#: Module-level containers that are constants (never written after import).
CONSTANTS: set[str] = {"__all__"}
MUTABLE = (dict, list, set, bytearray, weakref.WeakKeyDictionary, weakref.WeakValueDictionary)


def _core_modules() -> list[str]:
    names = [akchat_fsm.core.__name__]
    for info in pkgutil.walk_packages(akchat_fsm.core.__path__, "akchat_fsm.core."):
        names.append(info.name)
    return names


def test_no_core_module_holds_a_mutable_container() -> None:
    found = [
        f"{name}.{attr} ({type(value).__name__})"
        for name in _core_modules()
        for attr, value in vars(importlib.import_module(name)).items()
        if isinstance(value, MUTABLE)
        and not isinstance(value, MappingProxyType)
        and attr not in CONSTANTS
        and not (attr.startswith("__") and attr.endswith("__"))  # the module's own machinery
    ]
    assert not found, "module-level mutable state in the pure core: " + ", ".join(found)


def test_a_dropped_session_leaves_nothing_alive_in_the_core() -> None:
    state, token = proposed(fresh(), suffix="gone")
    claimed = saved(claim_resolution(state, token, ConfirmationEvent.APPROVE, T0))
    assert find_binding(claimed, token) is not None  # builds and carries the token index
    binding = weakref.ref(claimed.snapshot.confirmations[0])
    first = weakref.ref(state.snapshot.confirmations[0])
    del state, claimed
    gc.collect()
    assert binding() is None and first() is None, "the core kept a binding alive"


def test_states_built_after_others_died_never_share_an_entry() -> None:
    # Ids are reused once objects die; each state still answers for its own bindings only.
    for n in range(10):
        state, token = proposed(fresh(), suffix=f"s{n}")
        binding = find_binding(state, token)
        assert binding is not None and binding.token == token == f"confirm-s{n}"
        assert find_binding(state, f"confirm-s{n - 1}") is None
        del state, binding
        gc.collect()
