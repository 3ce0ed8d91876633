"""Sync and asyncio façades cannot drift: every public twin pair is discovered and compared.

Pairs are found by name, never listed by hand: a class ``AsyncX`` pairs with ``X``, a function
``f_async`` with ``f`` (or ``f_sync``) and ``open_async_x`` with ``open_x``, among the public
names of every module of the package (private modules too: their twins back public ones). An
``Async*`` class or ``*_async`` function without its sync twin fails, and so does a ``*_sync``
or ``Sync*`` name without its asyncio twin, or a class implementing a sync port that has an
asyncio twin (a storage, upstream or memory) without an asyncio twin of its own, unless
:data:`UNPAIRED` gives the reason.

For each pair, every public member (and ``__init__``, and ``close``/``aclose``) is compared:

* signature: parameter names, kinds, defaults and annotations, the asyncio side read modulo
  the flavour (``AsyncX`` as ``X``, ``f_async`` as ``f``, a returned ``Awaitable[T]`` as
  ``T``); the sync side is read as written, so an asyncio type in a sync signature is a drift;
* flavour: the sync member is never async; the asyncio member is ``async def`` (or returns an
  awaitable) unless it is listed in :data:`PLAIN_IN_BOTH` (a view or factory doing no I/O);
* docstring. One rule, applied to every member and function: the asyncio twin's docstring is
  the sync one, verbatim. The meaning is the same; the flavour is in the signature. (A class's
  own docstring is where the flavours are told apart, so only its presence is checked.)
* one source: where the twins share a base class (or are functions), each member is a single
  statement, a call into the shared plan (:data:`MORE_THAN_ONE_LINE` lists the exceptions);
  and code in a shared base never names one flavour of a pair.

Drifts in :mod:`akchat_fsm.integrations` (being rewritten elsewhere) are pinned in
:data:`KNOWN_DRIFT`: the test asserts the drift there is exactly the listed one, so fixing one
fails here until its entry is removed, and a new drift fails too. Run with ``-s`` to see the
report; a failure prints it: pair, member, what differs.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
import re
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import akchat_fsm

#: Deliberate asymmetries: a name that looks like one flavour of a pair but has no twin.
#: Keys here and below are ``module.name`` (or ``module.AsyncClass.member``) without the
#: leading ``akchat_fsm.``.
UNPAIRED: dict[str, str] = {
    # One effect, run synchronously: the stateful suites step plans with it. An asyncio
    # stepper would be `await` of one line; nothing needs it yet.
    "session.drivers.execute_sync": "a test seam, sync by nature",
    # The conformance kit's sync face over an asyncio adapter: a bridge *to* asyncio, not
    # the asyncio flavour of something.
    "testing._bridge.AsyncBridge": "a sync wrapper named for what it wraps",
    # A bridge's session calls are plans (ADR-0121): one class for both flavours, whose
    # methods build plans and do no I/O; the driver that runs them has the flavour.
    "integrations._bridge_ports.BridgeSession": "builds plans; the driver has the flavour",
    # The `demo` command's world runs one synchronous story; it ships no asyncio flavour.
    "cli._demo_world.DemoUpstream": "the sync demo's upstream and memory",
    "cli._demo_world.ClientUpstream": "the sync demo's crashing client",
}

#: Members (``AsyncClass.member``, or an asyncio function) that are a plain ``def`` on
#: purpose: they do no I/O, so there is nothing to await.
PLAIN_IN_BOTH: dict[str, str] = {
    "session.session.AsyncChatSession.confirmations_for": "builds a coordinator object",
    "storage.memory.AsyncMemoryStorage.open_connections": "a counter the conformance kit reads",
    "storage.sqlite.AsyncSQLiteStorage.open_connections": "a counter the conformance kit reads",
    "storage.postgres.AsyncPostgresStorage.open_connections": "a counter the conformance kit reads",
    "storage.redis.AsyncRedisStorage.open_connections": "a counter the conformance kit reads",
    "storage.mysql.AsyncMySQLStorage.open_connections": "a counter the conformance kit reads",
    "storage.url.open_async_storage": "builds the adapter; it connects on first use",
    "testing.doubles.AsyncRecordingChatMemory.load_only": "a test double's view object",
    "testing.doubles.AsyncRecordingUpstream.calls_for": "a test double's record, read in memory",
}

#: Façade members (twins sharing a base) that may have more than one statement.
MORE_THAN_ONE_LINE: dict[str, str] = {
    # The drivers are the one place the flavours differ (ADR-0060): ~10 lines each.
    "session.drivers.run_async": "the driver itself",
    # The sync ledger refuses an ``async def`` body before anything is claimed (a static
    # check, ADR-0091); the asyncio ledger takes either kind of body.
    "integrations.ledger.AsyncToolLedger.execute": "refuses an async body, then the plan",
}

#: Deliberate differences, ``where -> the exact drift line``; each must still occur.
DELIBERATE: dict[str, str] = {
    # The asyncio ledger's body may be sync or async; the sync ledger's only sync.
    "integrations.ledger.AsyncToolLedger.execute": (
        "parameter 'body': annotation 'Callable[[], T]' != 'Callable[[], Awaitable[T] | T]'"
    ),
    # One MemoryStorage may back a sync and an asyncio adapter at once (shared data in tests).
    "storage.memory.AsyncMemoryStorage.__init__": "parameters ['self'] != ['self', 'inner']",
    # The asyncio double may share its record with a sync one for the same reason.
    "testing.doubles.AsyncRecordingUpstream.__init__": (
        "parameters ['self', 'born'] != ['self', 'born', 'sync']"
    ),
}

#: pair -> member -> what differs, for the integrations façades (owned by another change).
KNOWN_DRIFT: dict[str, dict[str, str | list[str]]] = {
    # Empty: the integrations drifts were mended (issue 21). A pair that drifts again and
    # cannot be mended at once is listed here, with what differs, until it is.
}

#: asyncio member name -> its sync twin's name, where the names differ by flavour.
MEMBER_TWINS = {
    "aclose": "close",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
}
#: The private members compared too: the constructor and the protocol dunders.
COMPARED_DUNDERS = {
    "__init__",
    *(n for n in MEMBER_TWINS if n.startswith("_")),
    *(n for n in MEMBER_TWINS.values() if n.startswith("_")),
}


def _public_modules() -> Iterator[ModuleType]:
    yield akchat_fsm
    for info in pkgutil.walk_packages(akchat_fsm.__path__, "akchat_fsm."):
        if info.name.endswith("__main__"):
            continue
        yield importlib.import_module(info.name)


def _public_names(module: ModuleType) -> Iterator[tuple[str, Any]]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    for name in names:
        obj = getattr(module, name)
        home = getattr(obj, "__module__", None)
        if not (isinstance(home, str) and home.startswith("akchat_fsm")):
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            yield name, obj


def _sync_names(name: str) -> tuple[str, ...]:
    """The names the sync twin of ``name`` may have (none: ``name`` is not asyncio-flavoured)."""
    if name.startswith("Async") and name[5:6].isupper():
        return (name[5:],)
    if name.endswith("_async"):
        stem = name[: -len("_async")]
        return (stem, f"{stem}_sync")
    if "_async_" in name:
        return (name.replace("_async_", "_", 1),)
    return ()


def _async_names(name: str) -> tuple[str, ...]:
    """The names the asyncio twin of an explicitly sync-named ``name`` may have."""
    if name.endswith("_sync"):
        return (f"{name[: -len('_sync')]}_async",)
    if name.startswith("Sync") and name[4:5].isupper():
        return (f"Async{name[4:]}",)
    return ()


@dataclass(frozen=True)
class Pair:
    key: str  # "module.SyncName/AsyncName"
    sync: Any
    asyncio: Any


def discover() -> tuple[list[Pair], list[str]]:
    """Every twin pair by name, and every name that should have a twin but has none."""
    seen: dict[tuple[str, str], Pair] = {}
    orphans: list[str] = []
    for module in _public_modules():
        found = dict(_public_names(module))
        for name, obj in found.items():
            home = obj.__module__
            where = f"{home.removeprefix('akchat_fsm.')}.{name}"
            namespace = vars(importlib.import_module(home))
            wanted = _async_names(name)
            if wanted and not any(w in namespace for w in wanted) and where not in UNPAIRED:
                orphans.append(f"{where} has no asyncio twin {wanted[0]}")
            sync_name = next((n for n in _sync_names(name) if n in namespace), None)
            if sync_name is None:
                if _sync_names(name) and where not in UNPAIRED:
                    orphans.append(f"{where} has no sync twin {_sync_names(name)[0]}")
                continue
            seen[(home, name)] = Pair(f"{home}.{sync_name}/{name}", namespace[sync_name], obj)
    pairs = sorted(seen.values(), key=lambda p: p.key)
    return pairs, orphans + _sync_only_implementations(pairs)


def _port_methods(port: type) -> list[str]:
    return [n for n, m in _members(port).items() if m.function is not None and n != "__init__"]


def _sync_only_implementations(pairs: list[Pair]) -> list[str]:
    """Public classes implementing a sync port that has an asyncio twin, without one of their
    own: a shipped adapter or double comes in both flavours (or says why not in UNPAIRED)."""
    ports = [p.sync for p in pairs if getattr(p.sync, "_is_protocol", False)]
    paired = {id(p.sync) for p in pairs} | {id(p.asyncio) for p in pairs}
    out: set[str] = set()
    for module in _public_modules():
        for name, obj in _public_names(module):
            where = f"{obj.__module__.removeprefix('akchat_fsm.')}.{name}"
            if not inspect.isclass(obj) or id(obj) in paired or where in UNPAIRED:
                continue
            if getattr(obj, "_is_protocol", False):
                continue
            for port in ports:
                methods = _port_methods(port)
                bound = [getattr(obj, n, None) for n in methods]
                if methods and all(inspect.isfunction(b) and not _is_async(b) for b in bound):
                    out.add(f"{where} implements {port.__name__} but has no asyncio twin")
    return sorted(out)


# --------------------------------------------------------------------------- comparison

_ASYNC_NAMES = (
    (re.compile(r"(\b|_)Async(?=[A-Z])"), r"\1"),
    (re.compile(r"\bopen_async_"), "open_"),
    (re.compile(r"\b(\w+)_async\b"), r"\1"),
)
_AWAITABLE = re.compile(
    r"(?:typing\.|collections\.abc\.)?(?:Awaitable|Coroutine\[Any,Any,)\[(.*)\]"
)


def _text(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return ""
    text = value if isinstance(value, str) else inspect.formatannotation(value)
    return text.replace(" ", "")


def _as_sync(value: Any, *, returned: bool = False) -> str:
    """An asyncio annotation read as its sync twin's (the sync side is read as written)."""
    text = _text(value)
    for pattern, repl in _ASYNC_NAMES:
        text = pattern.sub(repl, text)
    match = _AWAITABLE.fullmatch(text) if returned else None
    return match.group(1) if match else text


def _signature_drift(sync: Callable[..., Any], asyncio: Callable[..., Any]) -> list[str]:
    s, a = inspect.signature(sync), inspect.signature(asyncio)
    sp, ap = list(s.parameters.values()), list(a.parameters.values())
    if [p.name for p in sp] != [p.name for p in ap]:
        return [f"parameters {[p.name for p in sp]} != {[p.name for p in ap]}"]
    out: list[str] = []
    for x, y in zip(sp, ap, strict=True):
        if x.kind != y.kind:
            out.append(f"parameter {x.name!r}: kind {x.kind.description} != {y.kind.description}")
        if x.default is not y.default and x.default != y.default:
            out.append(f"parameter {x.name!r}: default {x.default!r} != {y.default!r}")
        if _text(x.annotation) != _as_sync(y.annotation):
            out.append(f"parameter {x.name!r}: annotation {x.annotation!r} != {y.annotation!r}")
    if _text(s.return_annotation) != _as_sync(a.return_annotation, returned=True):
        out.append(f"returns {s.return_annotation!r} != {a.return_annotation!r}")
    return out


def _is_async(function: Callable[..., Any]) -> bool:
    """``async def``, or a plain ``def`` annotated to return an awaitable."""
    returned = _text(inspect.signature(function).return_annotation)
    return inspect.iscoroutinefunction(function) or bool(_AWAITABLE.fullmatch(returned))


def _doc(function: Any) -> str:
    return inspect.cleandoc(function.__doc__ or "")


def _docstring_drift(sync: Any, asyncio: Any) -> list[str]:
    if _doc(sync) == _doc(asyncio):
        return []
    if not _doc(asyncio):
        return ["docstring missing in the asyncio twin"]
    if not _doc(sync):
        return ["docstring missing in the sync twin"]
    return ["docstrings differ"]


def _body_statements(function: Callable[..., Any]) -> int:
    """How many statements ``function``'s body has, not counting its docstring."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return 1
    node = ast.parse(source).body[0]
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return len(body)


def _flavoured_names(function: Callable[..., Any], pairs: set[str]) -> list[str]:
    """The names of one flavour of some pair that ``function``'s body uses."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError):
        return []
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return sorted(used & pairs)


@dataclass(frozen=True)
class Member:
    kind: str  # method, property, staticmethod, classmethod, attribute
    function: Any  # the function behind it (None for a plain attribute)
    owner: type


#: Whose classes are read as shared code (this module's own, for the checker's self-tests).
OURS = ("akchat_fsm", __name__)
_FOREIGN_MODULES = {"builtins", "typing", "typing_extensions", "abc", "collections.abc"}


def _members(cls: type) -> dict[str, Member]:
    """The public members of ``cls`` (and ``__init__`` and the twin dunders), package-defined."""
    found: dict[str, Member] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__ in _FOREIGN_MODULES:  # object, Protocol, Generic: not ours
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") and name not in COMPARED_DUNDERS:
                continue
            if isinstance(value, property):
                found[name] = Member("property", value.fget, klass)
            elif isinstance(value, (staticmethod, classmethod)):
                found[name] = Member(type(value).__name__, value.__func__, klass)
            elif inspect.isfunction(value):
                found[name] = Member("method", value, klass)
            else:
                found[name] = Member("attribute", None, klass)
    return found


def _common_bases(pair: Pair) -> list[type]:
    """The package's classes both twins inherit: code there runs for both flavours."""
    common = set(pair.sync.__mro__) & set(pair.asyncio.__mro__)
    return sorted(
        (k for k in common if k.__module__.startswith(OURS)), key=lambda k: k.__qualname__
    )


def _shared_base(pair: Pair) -> bool:
    return bool(_common_bases(pair))


def _function_of(value: Any) -> Any:
    if isinstance(value, property):
        return value.fget
    if isinstance(value, (staticmethod, classmethod)):
        return value.__func__
    return value if inspect.isfunction(value) else None


def _callable_drift(where: str, sync: Callable[..., Any], asyncio: Callable[..., Any]) -> list[str]:
    out = _signature_drift(sync, asyncio)
    if _is_async(sync):
        out.append("the sync twin is async (async def, or returns an awaitable)")
    constructor = where.endswith(".__init__")
    if not constructor and not _is_async(asyncio) and where not in PLAIN_IN_BOTH:
        out.append("the asyncio twin is a plain def (and not in PLAIN_IN_BOTH)")
    return out + _docstring_drift(sync, asyncio)


def _one_line_drift(where: str, sync: Callable[..., Any], asyncio: Callable[..., Any]) -> list[str]:
    if where in MORE_THAN_ONE_LINE:
        return []
    return [
        f"the {side} twin is not a one-line call into the shared plan"
        for side, function in (("sync", sync), ("asyncio", asyncio))
        if _body_statements(function) > 1
    ]


def pair_drift(pair: Pair, flavoured: set[str]) -> dict[str, list[str]]:
    """member -> what differs; a function pair's own drift is under ``"()"``."""
    if inspect.isfunction(pair.sync):
        where = _where(pair.key, "()")
        found = _callable_drift(where, pair.sync, pair.asyncio)
        found += _one_line_drift(where, pair.sync, pair.asyncio)
        return {"()": found} if found else {}
    drift: dict[str, list[str]] = {}
    if not _doc(pair.sync) or not _doc(pair.asyncio):
        drift["(class)"] = ["class docstring missing"]
    façade = _shared_base(pair)
    for base in _common_bases(pair):
        for name, value in vars(base).items():
            function = _function_of(value)
            for used in _flavoured_names(function, flavoured) if function else ():
                drift[f"{base.__name__}.{name}"] = [f"shared by both twins but uses {used}"]
    sync_members = _members(pair.sync)
    async_members = {MEMBER_TWINS.get(n, n): m for n, m in _members(pair.asyncio).items()}
    for name in sorted(set(sync_members) | set(async_members)):
        if name not in async_members or name not in sync_members:
            side = "asyncio" if name not in async_members else "sync"
            drift[name] = [f"missing in the {side} twin"]
            continue
        s, a = sync_members[name], async_members[name]
        if s.kind != a.kind:
            drift[name] = [f"a {s.kind} in the sync twin, a {a.kind} in the asyncio twin"]
            continue
        if s.function is None:
            continue
        where = _where(pair.key, name)
        if s.function is a.function:
            continue  # defined in a base both share: checked with the common bases above
        else:
            found = _callable_drift(where, s.function, a.function)
            if s.kind == "property":  # a property is read, never awaited
                found = [f for f in found if "plain def" not in f]
            if façade and name != "__init__":
                found += _one_line_drift(where, s.function, a.function)
        if found:
            drift[name] = found
    return drift


def _flavoured(pairs: list[Pair]) -> set[str]:
    """Every name that is one flavour of a pair (the sync names too: a shared body using
    ``ToolLedger`` is as wrong for the asyncio twin as ``AsyncToolLedger`` is for the sync)."""
    names: set[str] = set()
    for pair in pairs:
        names |= {pair.sync.__name__, pair.asyncio.__name__}
    return names


@functools.cache
def _raw_drift() -> dict[str, dict[str, tuple[str, ...]]]:
    pairs, _ = discover()
    flavoured = _flavoured(pairs)
    drift = {p.key: pair_drift(p, flavoured) for p in pairs}
    return {k: {m: tuple(w) for m, w in d.items()} for k, d in drift.items() if d}


def _where(pair: str, member: str) -> str:
    """The allow-list key of ``member`` of ``pair`` (``"()"``: a function pair itself)."""
    module_and_sync, asyncio_name = pair.rsplit("/", 1)
    module = module_and_sync.rsplit(".", 1)[0].removeprefix("akchat_fsm.")
    return f"{module}.{asyncio_name}" + ("" if member == "()" else f".{member}")


def all_drift(deliberate: dict[str, str] = DELIBERATE) -> dict[str, dict[str, list[str]]]:
    """Every drift found, less the ``deliberate`` ones."""
    out: dict[str, dict[str, list[str]]] = {}
    for pair, members in _raw_drift().items():
        for member, whats in members.items():
            kept = [w for w in whats if deliberate.get(_where(pair, member)) != w]
            if kept:
                out.setdefault(pair, {})[member] = kept
    return out


def _report(drift: dict[str, dict[str, list[str]]]) -> str:
    return "\n".join(
        f"{pair}  {member}: {what}"
        for pair, members in sorted(drift.items())
        for member, whats in sorted(members.items())
        for what in whats
    )


# --------------------------------------------------------------------------- tests


def test_every_flavoured_name_has_its_twin() -> None:
    _, orphans = discover()
    assert not orphans, "\n".join(orphans)


def test_discovery_finds_the_pairs_it_should() -> None:
    # A floor, so a discovery bug that finds nothing cannot pass everything.
    keys = {pair.key for pair in discover()[0]}
    assert "akchat_fsm.session.session.ChatSession/AsyncChatSession" in keys
    assert "akchat_fsm.session.session.resume_chat_session/resume_chat_session_async" in keys
    assert "akchat_fsm.storage.sqlite.SQLiteStorage/AsyncSQLiteStorage" in keys
    assert "akchat_fsm.session.drivers.run_sync/run_async" in keys
    assert len(keys) >= 33


def test_no_pair_drifts() -> None:
    print(f"{len(discover()[0])} pairs; every drift found:\n{_report(all_drift())}")
    drift = {k: v for k, v in all_drift().items() if k not in KNOWN_DRIFT}
    assert not drift, "sync/async twins drifted:\n" + _report(drift)


def test_every_allowance_is_still_needed() -> None:
    # An allow-list entry that no longer matches anything would hide the next drift there.
    pairs, _ = discover()
    known = {_where(p.key, "()") for p in pairs} | {
        _where(p.key, member)
        for p in pairs
        if inspect.isclass(p.asyncio)
        for member in (MEMBER_TWINS.get(n, n) for n in _members(p.asyncio))
    }
    for where in (*PLAIN_IN_BOTH, *MORE_THAN_ONE_LINE, *DELIBERATE):
        assert where in known, f"{where}: no such asyncio twin or member"
    lines = {
        (_where(pair, member), what)
        for pair, members in all_drift({}).items()
        for member, whats in members.items()
        for what in whats
    }
    for where, line in DELIBERATE.items():
        assert (where, line) in lines, f"DELIBERATE[{where!r}] no longer occurs: remove it"
    saved = dict(UNPAIRED)
    try:
        UNPAIRED.clear()
        orphans = discover()[1]
    finally:
        UNPAIRED.update(saved)
    for where in saved:
        assert any(o.startswith(f"{where} ") for o in orphans), f"UNPAIRED[{where!r}]: not needed"


def test_known_drift_is_exactly_the_listed_one() -> None:
    # Fixing an integrations drift fails here until its KNOWN_DRIFT entry is removed.
    assert all(pair.startswith("akchat_fsm.integrations.") for pair in KNOWN_DRIFT)
    actual = {k: v for k, v in all_drift().items() if k in KNOWN_DRIFT}
    listed = {
        pair: {
            member: [what] if isinstance(what, str) else list(what) for member, what in m.items()
        }
        for pair, m in KNOWN_DRIFT.items()
    }
    assert actual == listed, "KNOWN_DRIFT is stale:\n" + _report(actual)


def test_the_checker_reports_each_kind_of_drift() -> None:
    # The comparison itself can fail: a hand-made drifted pair is reported member by member.
    class Port:
        """A sync port."""

        def load(self, session_id: str, *, limit: int = 1) -> str:
            """Load it."""
            return session_id

        def save(self, text: str) -> None:
            """Save it."""

        def close(self) -> None:
            """Close it."""

        def views(self) -> int:
            return 0

    class AsyncPort:
        """An asyncio port."""

        async def load(self, session_id: str, *, limit: int = 2) -> str:
            return session_id

        def save(self, text: bytes) -> None:
            """Save it."""

        async def aclose(self) -> None:
            """Close it."""

    drift = pair_drift(Pair("Port/AsyncPort", Port, AsyncPort), set())
    print(_report({"Port/AsyncPort": drift}))
    assert drift == {
        "load": [
            "parameter 'limit': default 1 != 2",
            "docstring missing in the asyncio twin",
        ],
        "save": [
            "parameter 'text': annotation 'str' != 'bytes'",
            "the asyncio twin is a plain def (and not in PLAIN_IN_BOTH)",
        ],
        "views": ["missing in the asyncio twin"],
    }


def test_the_checker_reports_shared_code_and_copied_logic() -> None:
    class Ledger:
        """A sync ledger."""

    class AsyncLedger:
        """An asyncio ledger."""

    class Base:
        def __init__(self) -> None:
            self.ledger = AsyncLedger()  # the same flavour for both twins: wrong for one

    class Facade(Base):
        """A sync façade."""

        def run(self) -> int:
            """Run it."""
            done = 1
            return done

    class AsyncFacade(Base):
        """An asyncio façade."""

        async def run(self) -> int:
            """Run it."""
            return 1

    pair = Pair("Facade/AsyncFacade", Facade, AsyncFacade)
    drift = pair_drift(pair, {"Ledger", "AsyncLedger"})
    assert drift == {
        "Base.__init__": ["shared by both twins but uses AsyncLedger"],
        "run": ["the sync twin is not a one-line call into the shared plan"],
    }
