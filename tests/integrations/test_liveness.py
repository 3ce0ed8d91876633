"""Nothing strands (issue 22): every run with work left is in the processing index from the
write that leaves the work, and ``reconcile_all`` with the bridge hook finishes it, or reports
it as waiting for a person with its next step and leaves it alone.

Real pydantic-ai, scripted model; a "kill" is an exception no plan catches, raised at the
step the crash comes before, so the stored state is exactly the one a SIGKILL there leaves.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from bridge_harness import ForwardingStorage, RecordsBackend, crash_inside_body
from pai_agents import Call, Counts, build_agent

from akchat_fsm import (
    ChatDefinition,
    ConfigError,
    StorageUnavailable,
    reconcile_all,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge
from akchat_fsm.session.sweep import SweepPorts

DEFINITION = ChatDefinition("support")
EMAIL = Call("send_email", {"to": "a@example.com"}, "c1")
REFUND = Call("refund", {"amount": 5}, "c2")
FIVE_MINUTES = 5 * 60_000
DAY = 24 * 60 * 60_000


class Killed(BaseException):
    """The process died here: no plan catches it, nothing after it runs."""


def later() -> int:
    return time.time_ns() // 1_000_000 + 10 * 60_000


def _sid() -> str:
    import uuid

    return f"chat-{uuid.uuid4().hex[:12]}"


def _bridge(storage: Any, agent: Any, sid: str, **options: Any) -> PydanticAIBridge:
    session = resume_chat_session(DEFINITION, session_id=sid, storage=storage)
    return PydanticAIBridge(agent, session, storage, **options)


def _sweep(storage: Any, agent: Any) -> Any:
    def ports_for(session_id: str) -> SweepPorts:
        return SweepPorts(DEFINITION, bridge=lambda s: PydanticAIBridge(agent, s, storage))

    return reconcile_all(storage, ports_for, older_than_ms=FIVE_MINUTES, clock=later)


def _listed(storage: Any) -> set[str]:
    return {row.session_id for row in storage.list_processing()}


def test_a_fully_decided_run_killed_before_its_claim_is_continued_by_the_sweep(
    records_backend: RecordsBackend,
) -> None:
    counts, sid = Counts(), _sid()
    storage = records_backend.sync()
    agent = build_agent([EMAIL], counts)
    paused = _bridge(storage, agent, sid).run("do it", run_id="r1")
    # the last decision's terminal save applied; the process died before claiming the run
    _bridge(storage, agent, sid).approve(paused.pending[0].token, continue_run=False)
    assert sid in _listed(storage)
    [swept] = _sweep(storage, agent).sessions
    assert swept.status == "settled", swept
    run = _bridge(storage, agent, sid).run_record("r1")
    assert run is not None and run.state == "completed"
    assert run.output == "c1=sent to a@example.com"
    assert counts.bodies == ["send_email:a@example.com"] and counts.requests == 2
    assert sid not in _listed(storage)  # completed: nothing left, the index let go


class KilledAtTheEnvelope:
    """The storage of a process killed at its first envelope write (the first proposal)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def save(self, *args: Any, **kwargs: Any) -> bool:
        raise Killed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_run_killed_before_its_proposals_is_proposed_by_the_sweep(
    records_backend: RecordsBackend,
) -> None:
    counts, sid = Counts(), _sid()
    storage = records_backend.sync()
    agent = build_agent([EMAIL, REFUND], counts)
    with pytest.raises(Killed):
        _bridge(KilledAtTheEnvelope(storage), agent, sid).run("do it", run_id="r1")
    assert storage.load(sid) is None  # the envelope was never created
    assert sid in _listed(storage)
    [swept] = _sweep(storage, agent).sessions
    # proposed now, and waiting for a person: reported with its next step, not as stuck
    assert swept.status == "waiting", swept
    [(run_id, next_step)] = swept.waiting
    assert run_id == "r1" and "c1" in next_step and "c2" in next_step
    bridge = _bridge(storage, agent, sid)
    tokens = {b.tool_call_id: b.token for b in bridge.session.snapshot.confirmations}
    assert set(tokens) == {"c1", "c2"} and counts.bodies == []
    bridge.approve(tokens["c1"])
    done = _bridge(storage, agent, sid).approve(tokens["c2"])
    assert done.run is not None and done.run.status == "completed"
    assert sorted(counts.bodies) == ["refund:5", "send_email:a@example.com"]


def test_a_run_waiting_for_a_person_is_listed_and_left_alone(
    records_backend: RecordsBackend,
) -> None:
    counts, sid = Counts(), _sid()
    storage = records_backend.sync()
    agent = build_agent([EMAIL, REFUND], counts)
    # a day to decide: at the sweep's clock (ten minutes on) nothing is due, so no expiry
    paused = _bridge(storage, agent, sid, ttl_ms=DAY).run("do it", run_id="r1")
    _bridge(storage, agent, sid).approve(paused.pending[0].token)
    before = (
        {key: storage.load_record(sid, key) for key in storage.list_records(sid)},
        storage.load(sid),
    )
    for _ in range(2):  # a sweep, and the next one: nothing is done to a waiting run
        [swept] = _sweep(storage, agent).sessions
        assert swept.status == "waiting" and swept.execution_unknown == ()
        [(run_id, next_step)] = swept.waiting
        assert run_id == "r1" and "c2" in next_step and "c1" not in next_step
    after = (
        {key: storage.load_record(sid, key) for key in storage.list_records(sid)},
        storage.load(sid),
    )
    assert after == before and counts.bodies == [] and counts.requests == 1


def test_a_run_released_after_an_operators_verdict_is_continued_by_the_sweep(
    records_backend: RecordsBackend,
) -> None:
    counts, sid = Counts(), _sid()
    storage = records_backend.sync()
    agent = build_agent([EMAIL], counts)
    paused = _bridge(storage, agent, sid).run("do it", run_id="r1")
    _bridge(storage, agent, sid).approve(paused.pending[0].token, continue_run=False)
    crash_inside_body(storage, "c1", session_id=sid, tool="send_email")
    [swept] = _sweep(storage, agent).sessions
    assert swept.status == "execution_unknown" and swept.execution_unknown == ("c1",)
    _bridge(storage, agent, sid).settle_execution("c1", ran=True, result="sent (ops)")
    # the run went back to paused with every call decided: the index still holds it
    assert sid in _listed(storage)
    [swept] = _sweep(storage, agent).sessions
    assert swept.status == "settled", swept
    run = _bridge(storage, agent, sid).run_record("r1")
    assert run is not None and run.state == "completed" and run.output == "c1=sent (ops)"
    assert counts.bodies == [] and sid not in _listed(storage)


def test_a_reused_run_id_is_refused_before_the_model_is_called(
    records_backend: RecordsBackend,
) -> None:
    counts, sid = Counts(), _sid()
    storage = records_backend.sync()
    agent = build_agent([EMAIL], counts)
    _bridge(storage, agent, sid).run("do it", run_id="r1")
    assert counts.requests == 1
    with pytest.raises(ConfigError, match="already used"):
        _bridge(storage, agent, sid).run("again", run_id="r1")
    assert counts.requests == 1 and counts.bodies == []


def test_a_run_id_that_completed_at_once_is_refused_too(records_backend: RecordsBackend) -> None:
    counts, sid = Counts(), _sid()
    storage = records_backend.sync()
    agent = build_agent([Call("clock", {}, "k1")], counts)  # no approval: it never pauses
    assert _bridge(storage, agent, sid).run("hi", run_id="r1").status == "completed"
    asked = counts.requests
    with pytest.raises(ConfigError, match="already used"):
        _bridge(storage, agent, sid).run("hi", run_id="r1")
    assert counts.requests == asked


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_the_openai_bridge_refuses_a_reused_run_id_before_the_model(flavour: str) -> None:
    from oai_harness import ExecutionLog, Host, make_agent

    log = ExecutionLog()
    agent, model = make_agent([[("send_email", {"to": "a@x"}), ("lookup", {"q": "z"})]], log)
    host = Host(flavour, agent, session_id=_sid())
    assert host.run("mail", run_id="r1").status == "paused"
    asked, ran = model.requests, log.read()
    with pytest.raises(ConfigError, match="already used"):
        host.run("mail", run_id="r1")
    assert (model.requests, log.read()) == (asked, ran)


def test_two_hosts_starting_one_run_id_at_once_run_the_model_once(
    records_backend: RecordsBackend,
) -> None:
    """Host B starts the same run id while host A's model call is in flight: B's claim of the
    run id finds A's, so B runs neither the model nor a body."""
    import threading

    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    sid, storage = _sid(), records_backend.sync()
    requests: list[str] = []
    raced: list[BaseException] = []

    def host_b() -> None:
        try:
            _bridge(records_backend.sync(), agent, sid).run("b", run_id="r1")
        except BaseException as exc:  # the test reads what B got
            raced.append(exc)

    def model(messages: list[Any], info: Any) -> ModelResponse:
        requests.append("call")
        if len(requests) == 1:  # host A's first request: B starts now and must be refused
            thread = threading.Thread(target=host_b)
            thread.start()
            thread.join()
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("send_email", {"to": "a@x"}, "c1")])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, Any] = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        return f"sent to {to}"

    outcome = _bridge(storage, agent, sid).run("a", run_id="r1")
    assert outcome.status == "paused" and len(requests) == 1
    [error] = raced
    assert isinstance(error, ConfigError) and "already used" in str(error)


# --------------------------------------------------------------------------- the lease

LEASE = 30_000


class Clock:
    """The clock the bridges read (epoch ms): it starts at the wall clock (the adapters stamp
    writes with theirs) and then moves only when the test moves it."""

    def __init__(self) -> None:
        self.start = self.now = time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return self.now


def _one_call_agent() -> Any:
    """An agent whose model asks for ``slow_email`` once, then answers; tools added by the test."""
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def model(messages: list[Any], info: Any) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("slow_email", {"to": "a@example.com"}, "c1")])
        return ModelResponse(parts=[TextPart("done")])

    return Agent(FunctionModel(model), output_type=[str, DeferredToolRequests])


class SlowAfterTheClaim:
    """A storage after whose continuation claim 20 s pass on the bridges' clock."""

    def __init__(self, inner: Any, clock: Clock) -> None:
        self.inner, self.clock = inner, clock

    def save_record(self, session_id: str, key: str, text: str, *args: Any, **kw: Any) -> bool:
        applied = bool(self.inner.save_record(session_id, key, text, *args, **kw))
        claim = key.startswith("run:") and '"state":"continuing"' in text
        if applied and claim and self.clock.now == self.clock.start:
            self.clock.now += 20_000
        return applied

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _leased(
    storage: Any, agent: Any, sid: str, clock: Clock, lease_ms: int = LEASE
) -> PydanticAIBridge:
    session = resume_chat_session(DEFINITION, session_id=sid, storage=storage, clock=clock)
    return PydanticAIBridge(agent, session, storage, clock=clock, lease_ms=lease_ms)


def _leased_sweep(storage: Any, agent: Any, clock: Clock, lease_ms: int = LEASE) -> Any:
    def ports_for(session_id: str) -> SweepPorts:
        return SweepPorts(
            DEFINITION,
            bridge=lambda s: PydanticAIBridge(agent, s, storage, clock=clock, lease_ms=lease_ms),
        )

    # a start-up sweep that looks at everything, however recent (older_than_ms=0)
    def cutoff() -> int:  # past every adapter write stamp; the lease reads the bridges' clock
        return max(clock.now, time.time_ns() // 1_000_000) + 1

    return reconcile_all(storage, ports_for, older_than_ms=0, clock=cutoff)


def test_a_sweep_overlapping_a_live_continuation_leaves_it_alone(
    records_backend: RecordsBackend,
) -> None:
    """Issue 22: the sweep runs while the continuer is inside a long tool body. The owner's
    lease (renewed before the body) is live, so the sweep takes nothing over; the owner
    finishes, and the body ran once."""
    import threading

    sid, storage, clock = _sid(), records_backend.sync(), Clock()
    ran: list[str] = []
    swept: list[Any] = []

    def sweep_now() -> None:  # another process's start-up sweep, mid-body
        swept.append(_leased_sweep(records_backend.sync(), agent, clock))

    agent = _one_call_agent()

    @agent.tool_plain(requires_approval=True)
    def slow_email(to: str) -> str:
        ran.append(to)
        clock.now += LEASE // 2  # a long body: half the lease passes
        thread = threading.Thread(target=sweep_now)
        thread.start()
        thread.join()
        return f"sent to {to}"

    paused = _leased(storage, agent, sid, clock).run("do it", run_id="r1")
    # The claim is saved at start; the body starts 20 s later (a slow resume), so only the
    # renewal before the body keeps the lease live through the sweep at start + 35 s.
    done = _leased(SlowAfterTheClaim(storage, clock), agent, sid, clock).approve(
        paused.pending[0].token
    )
    assert done.run is not None and done.run.status == "completed", done
    assert ran == ["a@example.com"] and clock.now == clock.start + 20_000 + LEASE // 2
    [report] = swept
    [session] = report.sessions
    assert session.status == "waiting" and session.execution_unknown == ()
    [(run_id, next_step)] = session.waiting
    assert run_id == "r1" and "another process holds" in next_step


#: A lease short enough that its keeper (every third of it, in real milliseconds) ticks while
#: a test's body waits; the bridges' clock is the test's, so the lease's length on it is exact.
SHORT_LEASE = 30


def _renewed_past(storage: Any, sid: str, clock: Clock, run: str = "run:r1") -> bool:
    """Wait (bounded) until the run's lease reaches past ``clock.now``: a renewal mid-body."""
    import json

    for _ in range(2000):
        found = storage.load_record(sid, run)
        if found is not None and json.loads(found[1])["leaseUntilMs"] > clock.now:
            return True
        time.sleep(0.005)
    return False


@pytest.mark.parametrize("flaky", [False, True], ids=["steady", "one-renewal-fails"])
def test_a_body_that_outlasts_the_lease_keeps_its_run_while_it_runs(
    records_backend: RecordsBackend, flaky: bool
) -> None:
    """Issue 22: "a long tool body keeps it". While the body runs, the lease is renewed every
    third of it (a renewal that fails is tried again at the next tick); a start-up sweep after
    the original lease passed finds a live owner and takes nothing over; the owner finishes
    the run, and the body ran once."""
    import threading

    sid, storage, clock = _sid(), records_backend.sync(), Clock()
    ran: list[str] = []
    swept: list[Any] = []
    renewed: list[bool] = []
    agent = _one_call_agent()

    @agent.tool_plain(requires_approval=True)
    def slow_email(to: str) -> str:
        ran.append(to)
        clock.now += 10 * SHORT_LEASE  # far longer than the lease
        renewed.append(_renewed_past(records_backend.sync(), sid, clock))
        sweep = records_backend.sync(), agent, clock, SHORT_LEASE
        thread = threading.Thread(target=lambda: swept.append(_leased_sweep(*sweep)))
        thread.start()
        thread.join()
        return f"sent to {to}"

    paused = _leased(storage, agent, sid, clock, SHORT_LEASE).run("do it", run_id="r1")
    owner_storage = RenewalsFail(storage, fails=1) if flaky else storage
    done = _leased(owner_storage, agent, sid, clock, SHORT_LEASE).approve(paused.pending[0].token)
    assert renewed == [True]  # the keeper renewed the lease while the body ran
    assert done.run is not None and done.run.status == "completed", done
    [report] = swept
    [session] = report.sessions
    assert session.status == "waiting" and session.execution_unknown == (), session
    [(run_id, next_step)] = session.waiting
    assert run_id == "r1" and "another process holds" in next_step
    run = _leased(storage, agent, sid, clock).run_record("r1")
    assert run is not None and run.state == "completed" and run.lease_until_ms is None
    assert ran == ["a@example.com"]


class RenewalsFail(ForwardingStorage):
    """A storage on which the lease keeper's renewals fail (its thread cannot reach the
    store): what a stalled or cut-off owner looks like to everyone else."""

    def __init__(self, inner: Any, fails: int | None = None) -> None:
        super().__init__(inner)
        self.fails = fails  # how many renewals fail (None: every one)
        self.owner = threading.get_ident()

    def save_record(self, session_id: str, key: str, text: str, *args: Any, **kw: Any) -> bool:
        keeper = threading.get_ident() != self.owner and key.startswith("run:")
        if keeper and (self.fails is None or self.fails > 0):
            self.fails = None if self.fails is None else self.fails - 1
            raise StorageUnavailable("the owner cannot reach the store")
        return super().save_record(session_id, key, text, *args, **kw)


def test_a_stalled_owners_body_is_taken_over_mid_body_and_still_runs_once(
    records_backend: RecordsBackend,
) -> None:
    """ADR-0106 §7: an owner whose renewals do not reach the store (stalled, cut off) loses
    its run once the lease passes. The sweep meets the body's ledger entry ``executing`` and
    runs nothing (an unknown execution); the owner records the body's outcome on its own
    ledger claim and stops with ``RunClaimLost``; the next sweep replays it. Ran once."""
    from akchat_fsm.integrations import RunClaimLost

    sid, storage, clock = _sid(), records_backend.sync(), Clock()
    ran: list[str] = []
    swept: list[Any] = []
    agent = _one_call_agent()

    @agent.tool_plain(requires_approval=True)
    def slow_email(to: str) -> str:
        ran.append(to)
        clock.now += 10 * SHORT_LEASE  # the lease passes: no renewal reaches the store
        sweep = records_backend.sync(), agent, clock, SHORT_LEASE
        thread = threading.Thread(target=lambda: swept.append(_leased_sweep(*sweep)))
        thread.start()
        thread.join()
        return f"sent to {to}"

    paused = _leased(storage, agent, sid, clock, SHORT_LEASE).run("do it", run_id="r1")
    stalled = _leased(RenewalsFail(storage), agent, sid, clock, SHORT_LEASE)
    with pytest.raises(RunClaimLost):
        stalled.approve(paused.pending[0].token)
    [report] = swept
    [session] = report.sessions
    assert session.status == "execution_unknown" and session.execution_unknown == ("c1",)
    [swept_again] = _leased_sweep(storage, agent, clock, SHORT_LEASE).sessions
    assert swept_again.status == "settled", swept_again
    run = _leased(storage, agent, sid, clock).run_record("r1")
    assert run is not None and run.state == "completed" and run.output == "done"
    assert ran == ["a@example.com"]


def test_a_dead_continuers_run_is_taken_over_once_its_lease_passed(
    records_backend: RecordsBackend,
) -> None:
    sid, storage, clock = _sid(), records_backend.sync(), Clock()
    counts = Counts()
    agent = build_agent([EMAIL], counts)
    paused = _leased(storage, agent, sid, clock).run("do it", run_id="r1")

    def dies(*args: Any, **kwargs: Any) -> Any:
        raise Killed

    bridge = _leased(storage, agent, sid, clock)
    bridge._runtime = lambda: type("Dead", (), {"resume": dies, "runtime": "pydantic-ai"})()  # type: ignore[method-assign]
    with pytest.raises(Killed):  # claimed (lease until start + LEASE), then the process died
        bridge.approve(paused.pending[0].token)
    run = bridge.run_record("r1")
    assert (
        run is not None and run.state == "continuing" and run.lease_until_ms == clock.start + LEASE
    )
    clock.now = clock.start + LEASE - 2  # the lease has not passed: nothing is taken over
    [swept] = _leased_sweep(storage, agent, clock).sessions
    assert swept.status == "waiting" and counts.bodies == []
    clock.now = clock.start + LEASE  # passed: the sweep takes the run over and finishes it
    [swept] = _leased_sweep(storage, agent, clock).sessions
    assert swept.status == "settled", swept
    assert counts.bodies == ["send_email:a@example.com"]
    run = _leased(storage, agent, sid, clock).run_record("r1")
    assert run is not None and run.state == "completed" and run.lease_until_ms is None


# --------------------------------------------------------------------------- cancelled siblings


def test_the_openai_sweep_records_a_cancelled_plain_def_sibling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's case end to end: the sweep takes over a continuation whose first call has an
    unknown outcome; the SDK cancels the running plain-``def`` sibling and its private loop
    closes. The sibling's body is held until the runtime is leaving (it drains its guard, or,
    before the fix, the run was already released): its entry must say ``executed``."""
    import threading

    from agents import Agent, function_tool
    from oai_harness import RUN_CONFIG, Host
    from oai_models import ScriptedModel

    from akchat_fsm.integrations.ledger import ToolLedger
    from akchat_fsm.integrations.openai_agents import OpenAIAgentsBridge

    ran: list[str] = []
    leaving = threading.Event()

    @function_tool(needs_approval=True)
    def wipe(x: int) -> str:
        """Wipe (its execution outcome is unknown here)."""
        ran.append("wipe")
        return "wiped"

    @function_tool(needs_approval=True)
    def mail(to: str) -> str:
        """Mail (still running while its sibling fails)."""
        leaving.wait(10)
        ran.append("mail")
        return "mailed"

    async def draining(self: Any) -> None:
        leaving.set()
        if drain is not None:
            await drain(self)

    agent = Agent(
        name="a",
        model=ScriptedModel([[("wipe", {"x": 1}), ("mail", {"to": "a"})]]),
        tools=[wipe, mail],
    )
    host = Host("sync", agent, session_id=_sid())
    guard_type = type(host.bridge().execution_guard())
    drain = getattr(guard_type, "drain", None)
    monkeypatch.setattr(guard_type, "drain", draining, raising=False)
    out = host.run("go", run_id="r1")
    leaving.clear()  # the pausing run drained too
    ids = {p.action: p for p in out.pending}
    host.approve(ids["wipe"].token, continue_run=False)
    host.approve(ids["mail"].token, continue_run=False)
    wipe_id = ids["wipe"].tool_call_id
    crash_inside_body(host.storage, wipe_id, session_id=host.session_id, tool="wipe", args={"x": 1})

    class ReleaseMeansLeaving:
        """Before the fix nothing drains: the runtime has left once the run is released."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def save_record(self, session_id: str, key: str, text: str, *a: Any, **k: Any) -> bool:
            applied = bool(self.inner.save_record(session_id, key, text, *a, **k))
            if key.startswith("run:") and '"state":"paused"' in text:
                leaving.set()
            return applied

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    storage = ReleaseMeansLeaving(host.storage)
    report = reconcile_all(
        storage,
        lambda sid: SweepPorts(
            DEFINITION,
            bridge=lambda s: OpenAIAgentsBridge(agent, s, storage, run_config=RUN_CONFIG),
        ),
        older_than_ms=0,
        clock=later,
    )
    [swept] = report.sessions
    assert swept.execution_unknown == (wipe_id,), swept
    for _ in range(1000):  # before the fix the body thread outlives the sweep: let it end
        if ran:
            break
        threading.Event().wait(0.01)
    entries = {e.tool: e.state for e in ToolLedger(host.storage, host.session_id).entries()}
    assert ran == ["mail"] and entries == {"wipe": "executing", "mail": "executed"}


# ----------------------------------------------------------------- lease keeper, LangGraph


def _graph_bridge(flavour: str, storage: Any, graph: Any, clock: Clock) -> Any:
    from akchat_fsm.integrations.langgraph import AsyncLangGraphBridge, LangGraphBridge

    options = {"clock": clock, "lease_ms": SHORT_LEASE}
    if flavour == "sync":
        session = resume_chat_session(DEFINITION, session_id="lg-1", storage=storage, clock=clock)
        return LangGraphBridge(graph, session, storage, **options)

    async def build() -> Any:
        session = await resume_chat_session_async(
            DEFINITION, session_id="lg-1", storage=storage, clock=clock
        )
        return AsyncLangGraphBridge(graph, session, storage, **options)

    return build()


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_long_langgraph_body_keeps_its_run_on_either_flavour(
    records_backend: RecordsBackend, flavour: str
) -> None:
    """The keeper is a thread, not a task: a sync graph calls each body on a private event
    loop that the body blocks, and an asyncio storage's renewals are handed to the bridge's
    loop. Either way the sweep that runs mid-body finds the run held, and the body ran once."""
    import asyncio

    from langgraph.checkpoint.memory import InMemorySaver
    from lg_agents import Call, build_graph
    from lg_agents import Counts as GraphCounts

    clock = Clock()
    sync_storage = records_backend.sync()
    storage = sync_storage if flavour == "sync" else records_backend.async_()
    seen: list[Any] = []

    def inside(body: str) -> None:  # the body is long: the lease passes many times over
        clock.now += 10 * SHORT_LEASE
        seen.append(_renewed_past(sync_storage, "lg-1", clock, run="run:r1"))

        def sweep() -> None:
            def ports_for(session_id: str) -> SweepPorts:
                def bridge(s: Any) -> Any:
                    return _swept_graph_bridge(graph, s, sync_storage, clock)

                return SweepPorts(DEFINITION, bridge=bridge)

            cutoff = max(clock.now, time.time_ns() // 1_000_000) + 1
            seen.append(
                reconcile_all(sync_storage, ports_for, older_than_ms=0, clock=lambda: cutoff)
            )

        thread = threading.Thread(target=sweep)
        thread.start()
        thread.join()

    counts = GraphCounts(inside=inside)
    graph = build_graph(
        [Call("send_email", {"to": "a@example.com"}, "c1")], counts, InMemorySaver()
    )
    user = {"messages": [{"role": "user", "content": "do it"}]}
    if flavour == "sync":
        paused = _graph_bridge(flavour, storage, graph, clock).run(
            user, thread_id="t1", run_id="r1"
        )
        done = _graph_bridge(flavour, storage, graph, clock).approve(paused.pending[0].token)
    else:

        async def scenario() -> Any:
            first = await _graph_bridge(flavour, storage, graph, clock)
            paused = await first.run(user, thread_id="t1", run_id="r1")
            second = await _graph_bridge(flavour, storage, graph, clock)
            return await second.approve(paused.pending[0].token)

        done = asyncio.run(scenario())
    assert done.run is not None and done.run.status == "completed", done
    renewed, report = seen
    assert renewed is True  # renewed while the body blocked
    [session] = report.sessions
    assert session.status == "waiting" and session.execution_unknown == (), session
    assert counts.bodies == ["send_email:a@example.com"]


def _swept_graph_bridge(graph: Any, session: Any, storage: Any, clock: Clock) -> Any:
    from akchat_fsm.integrations.langgraph import LangGraphBridge

    return LangGraphBridge(graph, session, storage, clock=clock, lease_ms=SHORT_LEASE)
