"""The vocabulary of a recorded history: operations, unknown outcomes, the recorder.

Shared by the checker (:mod:`akchat_fsm.testing.linearizability`, which re-exports every
name here), the Jepsen log reader and the history simulator.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput

__all__ = ["UNKNOWN", "History", "MalformedHistory", "Operation"]


class MalformedHistory(InvalidInput):
    """The history cannot be checked as given (a return before its call, a NaN time, an
    unhashable input or output, a log line that does not parse); the message names where."""


class _Unknown:
    """The output of an operation whose outcome is unknown (matches any effect)."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:  # stays a singleton across pickling (process workers)
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


@dataclass(frozen=True)
class Operation:
    """One completed (or abandoned) call.

    ``kind`` and ``input`` are interpreted by the model; ``output`` is what the call returned
    (``UNKNOWN`` if its outcome is unknown). ``call_ns``/``return_ns`` come from
    :func:`time.monotonic_ns` (comparable across processes on one Linux host); an unknown
    outcome has ``return_ns = math.inf``.
    """

    process: int | str
    kind: str
    input: Any
    output: Any
    call_ns: float
    return_ns: float
    key: Hashable = None

    @property
    def unknown(self) -> bool:
        return self.output is UNKNOWN


class History:
    """A thread-safe recorder of :class:`Operation` s.

    ``with history.record(process, kind, input, key=...) as call: call.output = ...``
    times the call; if the block raises an exception listed in ``unknown`` the operation is
    recorded with ``UNKNOWN`` output and ``return_ns = inf``; any other exception drops it.
    Exceptions always propagate.
    """

    def __init__(self) -> None:
        self._ops: list[Operation] = []
        self._lock = threading.Lock()

    def add(self, op: Operation) -> None:
        with self._lock:
            self._ops.append(op)

    def extend(self, ops: Iterable[Operation]) -> None:
        with self._lock:
            self._ops.extend(ops)

    @property
    def operations(self) -> list[Operation]:
        with self._lock:
            return list(self._ops)

    @contextmanager
    def record(
        self,
        process: int | str,
        kind: str,
        input: Any,
        *,
        key: Hashable = None,
        unknown: tuple[type[BaseException], ...] = (),
    ) -> Iterator[_Call]:
        """Time one call; any exception not in ``unknown`` propagates and records nothing
        (use it for failures that certainly applied nothing, such as ``StorageUnavailable``)."""
        call = _Call()
        call_ns = time.monotonic_ns()
        try:
            yield call
        except unknown:
            self.add(Operation(process, kind, input, UNKNOWN, call_ns, math.inf, key))
            raise
        self.add(Operation(process, kind, input, call.output, call_ns, time.monotonic_ns(), key))


@dataclass
class _Call:
    output: Any = None
