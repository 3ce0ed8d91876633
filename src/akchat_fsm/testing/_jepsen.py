"""Reading Jepsen etcd register logs (porcupine's corpus) into operations."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ._history import UNKNOWN, MalformedHistory, Operation

__all__ = ["JepsenLog", "parse_jepsen_log", "read_jepsen_log"]

_JEPSEN_LINE = re.compile(r"^INFO\s+jepsen\.util\s+-\s+(\d+)\s+:(\w+)\s+:(\w+)\s+(.*?)\s*$")
_JEPSEN_VALUE = re.compile(r"nil|-?\d+|:[\w-]+|\[\s*(nil|-?\d+)\s+(nil|-?\d+)\s*\]")


def _jepsen_value(text: str) -> Any:
    if _JEPSEN_VALUE.fullmatch(text) is None:
        raise ValueError(f"value {text!r} is not nil, an integer, a keyword or [a b]")
    if text == "nil":
        return None
    if text.startswith("["):
        a, b = text.strip("[] ").split()
        return (_jepsen_value(a), _jepsen_value(b))
    if text.startswith(":"):
        return text  # e.g. ":timed-out"
    return int(text)


@dataclass(frozen=True)
class JepsenLog:
    """What :func:`read_jepsen_log` understood, and every line it did not, with why."""

    operations: list[Operation]
    #: ``(line number from 1, the line, why it was skipped)``.
    skipped: list[tuple[int, str, str]]


def read_jepsen_log(text: str) -> JepsenLog:
    """Operations of a Jepsen etcd register log (porcupine's corpus), for EtcdRegisterModel.

    Times are line numbers. ``:ok`` and ``:fail`` end an operation (a failed ``cas`` did not
    swap); ``:info``, a ``:fail :read :timed-out`` and an invocation that never returns have
    an unknown outcome. Blank lines are ignored; any other line that is not an event, a
    completion without an invocation, or a second invocation by a busy process is skipped
    and listed in ``skipped``.
    """
    pending: dict[int, tuple[str, Any, int]] = {}
    ops: list[Operation] = []
    skipped: list[tuple[int, str, str]] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _JEPSEN_LINE.match(line)
        if match is None:
            skipped.append((line_no, line, "not a jepsen.util event line"))
            continue
        process, kind, f = int(match[1]), match[2], match[3]
        try:
            value = _jepsen_value(match[4])
        except ValueError as exc:
            skipped.append((line_no, line, str(exc)))
            continue
        if f not in ("read", "write", "cas"):
            skipped.append((line_no, line, f"unknown function :{f}"))
            continue
        if kind == "invoke":
            if process in pending:
                skipped.append((line_no, line, f"process {process} invoked twice"))
                continue
            pending[process] = (f, None if f == "read" else value, line_no)
            continue
        if kind not in ("ok", "fail", "info"):
            skipped.append((line_no, line, f"unknown event type :{kind}"))
            continue
        if process not in pending or pending[process][0] != f:
            skipped.append((line_no, line, f"no :invoke :{f} by process {process} to complete"))
            continue
        f_invoked, op_input, call = pending.pop(process)
        if kind == "ok":
            output = value if f == "read" else True
            ops.append(Operation(process, f, op_input, output, call, line_no))
        elif kind == "fail" and f == "cas":
            ops.append(Operation(process, f, op_input, False, call, line_no))
        else:  # :info, or a read that timed out
            ops.append(Operation(process, f_invoked, op_input, UNKNOWN, call, math.inf))
    for process, (f, op_input, call) in pending.items():
        ops.append(Operation(process, f, op_input, UNKNOWN, call, math.inf))
    return JepsenLog(ops, skipped)


def parse_jepsen_log(text: str) -> list[Operation]:
    """Strict :func:`read_jepsen_log`: raises :class:`MalformedHistory` listing the lines it
    could not use instead of checking a history with holes in it."""
    log = read_jepsen_log(text)
    if log.skipped:
        shown = "; ".join(f"line {n}: {why}: {line!r}" for n, line, why in log.skipped[:5])
        more = f" (and {len(log.skipped) - 5} more)" if len(log.skipped) > 5 else ""
        raise MalformedHistory(f"{len(log.skipped)} line(s) not understood: {shown}{more}")
    return log.operations
