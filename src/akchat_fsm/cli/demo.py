"""``akchat-fsm demo``: a cross-client approval story, played through the public API.

Several clients, each with its own session object (and its own adapter connection when the
store is shared), work on one session:

1. alice resumes a new session and proposes tool calls; bob resumes it too;
2. alice approves; while her upstream call runs, bob approves the same call and loses
   (:class:`ResolutionInProgress`); afterwards his reject, from that stale read, is refused
   with what storage holds (:class:`AlreadyResolved`, the approved record);
3. carol claims a call and dies before calling upstream; dave claims another and dies after
   upstream acted but before recording it (simulated by :class:`ClientCrashed`, see
   :mod:`._demo_world`);
4. an operator runs :func:`akchat_fsm.session.reconcile` from the chat memory: one record is
   resumed (upstream still ``requires_confirmation``), the other completed (upstream acted);
5. erin resumes and sees a consistent session; the invariants are checked on what storage
   holds and what upstream received.

Each decision names its client (``decided_by``), so the audit trail tells the story too. With
``--inbox`` the story's store is then served in the local-only inbox on loopback (ADR-0073):
alice proposes one more call, left pending for you to approve or reject in the browser, and
the URL of the session's audit page is printed; it serves until interrupted.

Exit status 0 when every invariant holds, 1 otherwise.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from ..errors import AlreadyResolved, ResolutionInProgress
from ..session import ChatDefinition, ChatSession, reconcile, resume_chat_session
from ..storage.port import ManagedSessionStorage
from ..wire.enums import ConfirmationStatus
from ..wire.session import ConfirmationBinding
from ._common import EXIT_INVALID, EXIT_USAGE, fail, opened_storage, stdout_console
from ._common import flush as flush_console
from ._demo_world import ClientCrashed, ClientUpstream, DemoClock, DemoUpstream, id_maker
from ._envelope import decode_or_fail

__all__ = ["demo", "run_demo"]

DEFINITION = ChatDefinition("demo-assistant")


@dataclass
class Story:
    """What the demo needs while it runs: the clients' shared world and the narrative."""

    connect: Callable[[], ManagedSessionStorage]
    clock: DemoClock
    upstream: DemoUpstream
    new_id: Callable[[], str]
    say: Callable[[str, str], None]
    session_id: str = ""
    cursors: list[int] = field(default_factory=list)

    def client(self, name: str) -> ChatSession:
        session = resume_chat_session(
            DEFINITION, session_id=self.session_id, storage=self.connect(), clock=self.clock
        )
        self.seen(session)
        state = "new session" if not session.exists else "resumed"
        pending = sum(b.status is ConfirmationStatus.PENDING for b in session.confirmations)
        self.say(name, f"{state}: cursor {session.cursor}, {pending} pending confirmation(s)")
        return session

    def seen(self, session: ChatSession) -> None:
        self.cursors.append(session.cursor)

    def coordinator(self, session: ChatSession, upstream: ClientUpstream | None = None) -> Any:
        return session.confirmations_for(
            upstream or ClientUpstream(self.upstream), create_id=self.new_id
        )


def _status(binding: ConfirmationBinding) -> str:
    return f"{binding.token} is {binding.status.value}"


def _crash(story: Story, name: str, token: str, crash: str, act: str) -> None:
    """A fresh client claims ``token`` and dies at ``crash``; its object is then abandoned."""
    session = story.client(name)
    coordinator = story.coordinator(session, ClientUpstream(story.upstream, crash))  # type: ignore[arg-type]
    try:
        getattr(coordinator, act)(token, decided_by=name)
    except ClientCrashed as death:
        stored = decode_or_fail(story.connect().load(story.session_id), "stored session")
        binding = next(b for b in stored.snapshot.confirmations if b.token == token)
        story.say(
            name,
            f"CRASHED ({death}); storage holds {_status(binding)} at cursor "
            f"{stored.snapshot.cursor}",
        )
        story.cursors.append(stored.snapshot.cursor)
        return
    fail(f"demo: {name} was meant to crash during {act}")


def play(story: Story) -> ChatSession:
    """The story itself; returns the last client's session (erin's)."""
    alice = story.client("alice")
    alice_confirm = story.coordinator(alice)
    first = alice_confirm.propose("email.send", {"to": "ops@example.com", "subject": "report"})
    story.seen(alice)
    story.say("alice", f"proposed email.send: {_status(first)} (cursor {alice.cursor})")
    bob = story.client("bob")
    bob_confirm = story.coordinator(bob)

    def bob_approves_meanwhile(tool_call_id: str) -> None:
        story.say("bob", f"taps approve on {first.token} while alice's upstream call runs")
        try:
            bob_confirm.approve(first.token, decided_by="bob")
        except ResolutionInProgress as lost:
            story.say("bob", f"LOSER: ResolutionInProgress, {_status(lost.record)}; no call")
        else:
            story.say("bob", "unexpectedly won the claim")
        story.seen(bob)

    story.upstream.during_approve = bob_approves_meanwhile
    won = alice_confirm.approve(first.token, decided_by="alice")
    story.seen(alice)
    story.say("alice", f"WINNER: upstream approve ran once; {_status(won)} (cursor {alice.cursor})")
    # Bob's last read still shows alice's claim in progress; the library re-reads storage
    # before answering a loser, so he is told what storage holds, not what he last saw.
    story.say("bob", f"still holds cursor {bob.cursor} (alice's claim), now taps reject")
    try:
        bob_confirm.reject(first.token, reason="changed my mind", decided_by="bob")
        story.say("bob", "unexpectedly rejected a settled call")
    except AlreadyResolved as settled:
        story.say("bob", f"reject refused: AlreadyResolved, {_status(settled.record)}; no call")
    story.seen(bob)

    second = alice_confirm.propose("calendar.create", {"title": "sync", "minutes": 30})
    third = alice_confirm.propose("refund.issue", {"order": "A-17", "amount": 40})
    story.seen(alice)
    story.say(
        "alice",
        f"proposed calendar.create ({second.token}) and refund.issue ({third.token}) "
        f"(cursor {alice.cursor})",
    )
    _crash(story, "carol", second.token, "before_upstream", "approve")
    _crash(story, "dave", third.token, "after_upstream", "reject")
    try:
        bob_confirm.approve(second.token, decided_by="bob")
    except ResolutionInProgress as stuck:
        story.say("bob", f"approve {second.token}: ResolutionInProgress ({stuck.record.status})")
    else:
        story.say("bob", f"unexpectedly resolved the stuck claim {second.token}")
    story.seen(bob)

    for binding in (second, third):
        status = story.upstream.tool_status(binding.tool_call_id)
        story.say("memory", f"tool call {binding.tool_call_id} is {status}")
    operator = story.client("operator")
    outcomes = reconcile(operator, story.upstream, upstream=story.upstream)
    story.seen(operator)
    for outcome in outcomes:
        story.say(
            "operator",
            f"reconcile {outcome.token}: {outcome.before.value} -> {outcome.record.status.value}"
            f" ({outcome.action})",
        )
    story.say("operator", f"reconciled; cursor {operator.cursor}")
    erin = story.client("erin")
    statuses = ", ".join(f"{b.action} {b.status.value}" for b in erin.confirmations)
    story.say("erin", f"sees {statuses}; alice, after reload, agrees at cursor {_reloaded(alice)}")
    return erin


def _reloaded(session: ChatSession) -> int:
    """A long-lived client catches up: ``reload`` re-reads and validates what storage holds."""
    session.reload()
    return session.cursor


def check_invariants(story: Story, last: ChatSession) -> list[str]:
    """Every broken invariant, as a sentence (empty when all hold)."""
    broken: list[str] = []
    upstream = story.upstream
    for tool_call in sorted(set(upstream.approve_calls) | set(upstream.deny_calls)):
        calls = upstream.approve_calls[tool_call] + upstream.deny_calls[tool_call]
        if calls > 1:
            broken.append(f"replay: upstream got {calls} approve/deny calls for {tool_call}")
    stored = decode_or_fail(story.connect().load(story.session_id), "stored session").snapshot
    for binding in stored.confirmations:
        if binding.status is ConfirmationStatus.APPROVED:
            called = upstream.approve_calls[binding.tool_call_id]
        elif binding.status.is_terminal:
            called = upstream.deny_calls[binding.tool_call_id]
        else:
            called = 1
        if called != 1:
            broken.append(f"false completion: {_status(binding)} but upstream was not called")
        if not binding.status.is_terminal:
            broken.append(f"unsettled: {_status(binding)}")
    if any(b < a for a, b in zip(story.cursors, story.cursors[1:], strict=False)):
        broken.append(f"cursor went down: {story.cursors}")
    if stored.cursor != last.cursor or stored.confirmations != last.confirmations:
        broken.append("the resumed session differs from what storage holds")
    return broken


def _summary(session: ChatSession, upstream: DemoUpstream) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title="Final state", title_justify="left")
    for column in ("token", "action", "status", "upstream calls", "tool call in memory"):
        table.add_column(column)
    for binding in session.confirmations:
        calls = (
            upstream.approve_calls[binding.tool_call_id] + upstream.deny_calls[binding.tool_call_id]
        )
        table.add_row(
            binding.token,
            binding.action,
            binding.status.value,
            str(calls),
            upstream.tool_status(binding.tool_call_id),
        )
    return table


@contextmanager
def _connections(store: str | None) -> Iterator[tuple[Callable[[], ManagedSessionStorage], str]]:
    """A connect() giving each client its own adapter (one shared adapter if the store is
    private to this process), and how to describe the store."""
    with ExitStack() as stack:
        if store is None:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="akchat-demo-"))
            url = f"sqlite:///{Path(folder, 'demo.db')}"
            where = "a fresh SQLite file in a temporary directory"
        else:
            url, where = store, f"{store.split(':', 1)[0]} store given by --store"
        private = url.startswith("memory:") or url in ("sqlite://", "sqlite:///:memory:")
        shared = stack.enter_context(opened_storage(url))

        def connect() -> ManagedSessionStorage:
            return shared if private else stack.enter_context(opened_storage(url))

        yield connect, where


def _free_session_id(storage: ManagedSessionStorage, seed: int) -> str:
    """``demo-<seed>``, or the first ``demo-<seed>-<n>`` not yet in a reused store."""
    candidate, n = f"demo-{seed}", 1
    while storage.load(candidate) is not None:
        n += 1
        candidate = f"demo-{seed}-{n}"
    return candidate


#: How long the call the demo leaves pending for the inbox may wait: a person decides it.
INBOX_TTL_MS = 30 * 60_000


@dataclass
class ContinuingClock:
    """The inbox's clock: the demo's time where its story ended, running on at real speed
    (so the pending call's countdown runs as a person watches it)."""

    start_ms: int
    _began: float = field(default_factory=time.monotonic)

    def __call__(self) -> int:
        return self.start_ms + int((time.monotonic() - self._began) * 1000)


def leave_pending(story: Story) -> ConfirmationBinding:
    """alice proposes one more call and leaves it for the inbox."""
    alice = story.client("alice")
    coordinator = alice.confirmations_for(
        ClientUpstream(story.upstream), create_id=story.new_id, ttl_ms=INBOX_TTL_MS
    )
    binding = coordinator.propose("payout.send", {"account": "acct-9", "amount": 120})
    story.say("alice", f"proposed payout.send: {_status(binding)}, left for you in the inbox")
    return binding


def bind_loopback(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1 (``port`` 0: one the system picks), or exit 2."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        # Listening before the URL is printed: a client that connects at once waits in the
        # backlog until the server accepts, instead of being refused.
        sock.listen(128)
    except OSError as exc:
        sock.close()
        fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}", EXIT_USAGE)
    return sock


def serve_inbox(
    story: Story, connect: Callable[[], ManagedSessionStorage], sock: socket.socket
) -> None:
    """Serve the story's store in the local-only inbox on ``sock`` until interrupted: a
    decision there is the session's own, over the demo's upstream (and its memory shows the
    conversation)."""
    import uvicorn

    from ..inbox import create_inbox

    app = create_inbox(
        connect(),  # type: ignore[arg-type]  # every shipped adapter has the pending index
        definition=DEFINITION,
        local_only=True,
        upstream_for=lambda _sid: ClientUpstream(story.upstream),
        memory_for=lambda _sid: story.upstream,
        clock=ContinuingClock(story.clock.now_ms),
    )
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", server_header=False, lifespan="off")
    )
    # uvicorn shuts down gracefully on Ctrl-C, then re-raises it: here that is the way out.
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[sock])


def run_demo(store: str | None, seed: int, inbox: socket.socket | None = None) -> bool:
    """Play the story, print the narrative; ``True`` when every invariant holds. With
    ``inbox`` (a listening socket), then serve the store in the inbox until interrupted."""
    console, buffer, tty = stdout_console()

    def say(actor: str, message: str) -> None:
        line = Text(f"{actor:>8} ", style="bold cyan")
        line.append(message)
        console.print(line, soft_wrap=True)

    try:
        with _connections(store) as (connect, where):
            clock = DemoClock()
            story = Story(connect, clock, DemoUpstream(clock), id_maker(seed), say)
            story.session_id = _free_session_id(connect(), seed)
            console.print(
                Text(f"akchat-fsm demo: session {story.session_id} on {where}", style="bold")
            )
            last = play(story)
            broken = check_invariants(story, last)
            console.print(_summary(last, story.upstream))
            if broken:
                for sentence in broken:
                    console.print(
                        Text(f"INVARIANT FAILED: {sentence}", style="bold red"), soft_wrap=True
                    )
            else:
                console.print(
                    Text(
                        "invariants hold: no replay (<= 1 upstream call per tool call), "
                        "no false completion, nothing left processing, cursor monotonic",
                        style="bold green",
                    ),
                    soft_wrap=True,
                )
            if inbox is not None:
                pending = leave_pending(story)
                base = "http://{}:{}".format(*inbox.getsockname()[:2])
                console.print(
                    Text(
                        f"inbox: the story's audit trail is at {base}/session/"
                        f"{story.session_id}/audit and {pending.token} waits for you at "
                        f"{base}/ (local-only; Ctrl-C to stop)",
                        style="bold",
                    ),
                    soft_wrap=True,
                )
                flush_console(buffer, tty)
                sys.stdout.flush()  # the URL is read before the server's first answer
                buffer.seek(0)
                buffer.truncate()
                serve_inbox(story, connect, inbox)
            return not broken
    finally:
        flush_console(buffer, tty)


@click.command("demo")
@click.option(
    "--store",
    metavar="URL",
    default=None,
    help="Storage URL (memory://, sqlite:///file.db, postgresql://…, redis://…); "
    "default: a fresh SQLite file in a temporary directory.",
)
@click.option(
    "--seed",
    type=click.IntRange(0, 2**53 - 1),
    default=0,
    show_default=True,
    help="Seeds the token ids (and names the session demo-<seed>).",
)
@click.option(
    "--inbox",
    is_flag=True,
    help="Then serve the story's store in the local-only inbox on 127.0.0.1, until interrupted.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="With --inbox: the port (default: a free one; the URL is printed).",
)
def demo(store: str | None, seed: int, inbox: bool, port: int | None) -> None:
    """Play a cross-client approval story and check the no-replay invariants.

    Two clients race to approve one tool call (one wins, the other is told so), two more
    crash mid-resolution, reconcile settles them from the chat memory, and a last client
    resumes a consistent session. Exits 1 if an invariant failed.

    With --inbox, the story's store is then served in the local-only inbox on 127.0.0.1
    (--port, default: a free one) with one more call pending for you; the URL is printed.

    \b
    Example:
      akchat-fsm demo --seed 7
      akchat-fsm demo --store postgresql://localhost/test
      akchat-fsm demo --inbox --port 8000
    """
    if port is not None and not inbox:
        fail("--port goes with --inbox", EXIT_USAGE)
    sock = None
    if inbox:
        try:
            import uvicorn  # noqa: F401  # checked before the story is played

            from ..inbox import create_inbox  # noqa: F401
        except ImportError as exc:
            fail(f'the inbox needs its extra: pip install "akchat-fsm[inbox]" ({exc})', EXIT_USAGE)
        sock = bind_loopback(port or 0)
    try:
        ok = run_demo(store, seed, sock)
    finally:
        if sock is not None:
            sock.close()
    if not ok:
        raise SystemExit(EXIT_INVALID)
