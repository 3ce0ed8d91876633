"""``akchat-fsm inbox URL``: serve the approver's inbox over a store with uvicorn (ADR-0073).

The host's hooks are named like ``reconcile --all --bridge`` names its factory
(``module:callable``, :func:`._common.load_callable`): the very same ``--bridge`` factory
(``(session_id, storage) -> SweepPorts | None``) gives the inbox its definition and its bridge
for the sessions it claims. Without ``--authorize`` the inbox is the developer's own, local-only
(loopback clients, loopback ``Host``), so a non-loopback ``--host`` is refused before anything
is opened: there would be nobody to authorize the others.

Settling an unknown execution on the operator's page is allowed to the principals named by
``--can-settle`` only (repeatable; none named: nobody, also in the local-only mode, whose one
principal is ``local``), checked per request after the CSRF token; a refused settle writes
nothing, not even its audit entry.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import click

from ..errors import ConfigError
from ..session import ChatDefinition, resume_chat_session
from ..session.sweep import SweepPorts
from ._common import EXIT_USAGE, describe, fail, load_callable, opened_storage

__all__ = ["inbox"]

NOT_LOOPBACK = (
    "--host {host} is not a loopback address; without --authorize the inbox serves only "
    "this machine (give --authorize module:callable to serve others)"
)
NOTHING_DECIDES = (
    "the inbox needs --bridge module:callable (the reconcile --all factory) or "
    "--upstream module:callable to decide with"
)
NO_DEFINITION = "--upstream needs --definition module:callable (session_id -> ChatDefinition)"
EMPTY_SETTLER = "--can-settle names a principal: give a non-empty name"


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a name or an address to bind) is this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _HostHooks:
    """The inbox's ``definition`` and ``bridge_for`` from the host's ``--bridge`` factory
    (a session it claims) or ``--definition`` (any other session)."""

    def __init__(self, storage: Any, factory: Any, definition: Any) -> None:
        self.storage, self.factory, self.definition = storage, factory, definition

    def ports(self, session_id: str) -> SweepPorts | None:
        if self.factory is None:
            return None
        try:
            ports = self.factory(session_id, self.storage)
        except Exception as exc:  # the host's factory: its failure is this session's
            raise ConfigError(f"--bridge factory raised {exc!r} for {session_id!r}") from exc
        if ports is not None and not isinstance(ports, SweepPorts):
            raise ConfigError(
                f"--bridge factory returned {type(ports).__name__} for {session_id!r}; it must "
                "return SweepPorts(definition, bridge=...) or None (not this host's session)"
            )
        return ports

    def definition_for(self, session_id: str) -> ChatDefinition:
        ports = self.ports(session_id)
        if ports is not None:
            return ports.definition
        if self.definition is None:
            raise ConfigError(f"no definition for session {session_id!r} (give --definition)")
        found = self.definition(session_id)
        if not isinstance(found, ChatDefinition):
            raise ConfigError(f"--definition returned {type(found).__name__} for {session_id!r}")
        return found

    def bridge_for(self, session_id: str) -> Any:
        ports = self.ports(session_id)
        if ports is None or ports.bridge is None:
            return None
        session = resume_chat_session(ports.definition, session_id=session_id, storage=self.storage)
        return ports.bridge(session)


def _spec(spec: str | None, option: str) -> Any:
    return None if spec is None else load_callable(spec, option)


@click.command("inbox")
@click.argument("url")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to bind.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="The port."
)
@click.option(
    "--bridge",
    "bridge_spec",
    default=None,
    metavar="MODULE:CALLABLE",
    help="The reconcile --all factory: (session_id, storage) -> SweepPorts | None.",
)
@click.option(
    "--upstream",
    "upstream_spec",
    default=None,
    metavar="MODULE:CALLABLE",
    help="session_id -> UpstreamChat, for the sessions no bridge claims.",
)
@click.option(
    "--definition",
    "definition_spec",
    default=None,
    metavar="MODULE:CALLABLE",
    help="session_id -> ChatDefinition, for the sessions no bridge claims.",
)
@click.option(
    "--authorize",
    "authorize_spec",
    default=None,
    metavar="MODULE:CALLABLE",
    help="request -> principal | None (may be async); without it: local-only.",
)
@click.option(
    "--can-decide",
    "can_decide_spec",
    default=None,
    metavar="MODULE:CALLABLE",
    help="(principal, pending) -> bool; with --authorize and without it nobody decides.",
)
@click.option(
    "--can-edit",
    "can_edit_spec",
    default=None,
    metavar="MODULE:CALLABLE",
    help="(principal, pending) -> bool: who may also edit what they approve; with "
    "--authorize and without it nobody edits.",
)
@click.option(
    "--can-settle",
    "can_settle_names",
    multiple=True,
    metavar="PRINCIPAL",
    help="A principal who may settle unknown executions (repeatable; none: nobody; "
    "the local-only inbox's principal is 'local').",
)
def inbox(
    url: str,
    host: str,
    port: int,
    bridge_spec: str | None,
    upstream_spec: str | None,
    definition_spec: str | None,
    authorize_spec: str | None,
    can_decide_spec: str | None,
    can_edit_spec: str | None,
    can_settle_names: tuple[str, ...],
) -> None:
    """Serve the approver's inbox over a store (docs/inbox.md), until interrupted.

    Without --authorize it is local-only: loopback clients with a loopback Host, every one
    of them may decide, and a non-loopback --host is refused. With --authorize the host's
    hook authenticates each request, --can-decide allows each decision and --can-edit
    each edit of the arguments a decider approves. Only the
    principals named by --can-settle may settle an unknown execution (none: nobody).

    \b
    Examples:
      akchat-fsm inbox sqlite:///sessions.db --bridge myhost.bridges:bridge_for
      akchat-fsm inbox postgresql://db/app --host 0.0.0.0 --bridge myhost.bridges:bridge_for \\
          --authorize myhost.auth:principal --can-decide myhost.auth:may_decide \\
          --can-settle ops@example.com
      akchat-fsm inbox sqlite:///sessions.db --bridge myhost.bridges:bridge_for --can-settle local
    """
    if authorize_spec is None and not is_loopback_host(host):
        fail(NOT_LOOPBACK.format(host=host), EXIT_USAGE)
    if bridge_spec is None and upstream_spec is None:
        fail(NOTHING_DECIDES, EXIT_USAGE)
    if upstream_spec is not None and definition_spec is None:
        fail(NO_DEFINITION, EXIT_USAGE)
    if any(not name.strip() for name in can_settle_names):
        fail(EMPTY_SETTLER, EXIT_USAGE)
    factory = _spec(bridge_spec, "--bridge")
    upstream_for = _spec(upstream_spec, "--upstream")
    definition = _spec(definition_spec, "--definition")
    authorize = _spec(authorize_spec, "--authorize")
    can_decide = _spec(can_decide_spec, "--can-decide")
    can_edit = _spec(can_edit_spec, "--can-edit")
    try:
        import uvicorn

        from ..inbox import AllowPrincipals, create_inbox
    except ImportError as exc:
        fail(f'the inbox needs its extra: pip install "akchat-fsm[inbox]" ({exc})', EXIT_USAGE)
    with opened_storage(url, create=False) as storage:
        hooks = _HostHooks(storage, factory, definition)
        try:
            app = create_inbox(
                storage,  # type: ignore[arg-type]  # create_inbox checks the pending index
                definition=hooks.definition_for,
                authorize=authorize,
                can_decide=can_decide,
                can_edit=can_edit,
                can_settle=AllowPrincipals(can_settle_names),  # deny by default
                local_only=authorize is None,
                bridge_for=hooks.bridge_for if factory is not None else None,
                upstream_for=upstream_for,
            )
        except ConfigError as exc:
            fail(f"cannot serve {url!r}: {describe(exc)}", EXIT_USAGE)
        click.echo(f"inbox: serving {url} on http://{host}:{port}/", err=True)
        uvicorn.run(app, host=host, port=port, log_level="warning", server_header=False)
