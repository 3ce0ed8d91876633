"""Every name of ``akchat_fsm.wire._pydantic_compat``, exercised against the installed pydantic.

The package relies on pydantic's private model metaclass for one behaviour (ADR-0007,
ADR-0118): a ``__call__`` override runs for ``Model(...)`` and never for the models pydantic
builds itself. If a pydantic upgrade moves the class or changes when ``__call__`` runs, this
file fails, naming the compat module, before any decoder test does.
"""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict

from akchat_fsm.wire import _pydantic_compat as compat
from akchat_fsm.wire.controlled import ControlledSnapshot
from akchat_fsm.wire.memory import MemoryRecord
from akchat_fsm.wire.session import SessionSnapshot

CALLS: list[str] = []


class _CountingMeta(compat.ModelMetaclass):
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        CALLS.append(cls.__name__)
        return super().__call__(*args, **kwargs)


class _Base(BaseModel, metaclass=_CountingMeta):
    model_config = ConfigDict(frozen=True)


class Inner(_Base):
    value: int


class Outer(_Base):
    inner: Inner
    items: tuple[Inner, ...] = ()


def test_compat_names_are_pinned() -> None:
    assert compat.__all__ == ["ModelMetaclass"]


def test_the_metaclass_is_basemodels_and_the_private_spelling_still_names_it() -> None:
    # The run-time value is read from BaseModel; the type checker imports the private path.
    from pydantic._internal._model_construction import ModelMetaclass

    assert compat.ModelMetaclass is type(BaseModel) is ModelMetaclass


def test_call_runs_for_direct_construction_only() -> None:
    CALLS.clear()
    outer = Outer(inner=Inner(value=1))
    assert CALLS == ["Inner", "Outer"]

    CALLS.clear()
    Outer.model_validate({"inner": {"value": 2}, "items": [{"value": 3}]})
    Outer.model_validate_json('{"inner": {"value": 4}}')
    Outer.model_construct(inner=outer.inner)
    outer.model_copy(update={"items": ()})
    assert CALLS == []  # nested models, validation and copies never pass through __call__


def test_an_exception_in_call_reaches_the_caller_unchanged() -> None:
    class Refusing(_CountingMeta):
        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().__call__(*args, **kwargs)
            except pydantic.ValidationError as exc:
                raise LookupError("typed") from exc

    class Checked(BaseModel, metaclass=Refusing):
        value: int

    try:
        Checked(value="not a number")
    except LookupError as exc:
        assert isinstance(exc.__cause__, pydantic.ValidationError)
    else:  # pragma: no cover - the assertion is the test
        raise AssertionError("the metaclass did not translate the error")


def test_every_wire_model_family_uses_the_compat_metaclass() -> None:
    for model in (SessionSnapshot, MemoryRecord, ControlledSnapshot):
        assert isinstance(model, compat.ModelMetaclass)
        assert type(model) is not compat.ModelMetaclass  # a subclass with its own __call__
