"""The inbox's own defences: headers, CSRF, origin and the local-only gate (ADR-0130).

Authentication and authorization stay the host's (ADR-0031): these checks only make sure that
a request the host authorized was meant, by its user, for this page.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSRF_COOKIE = "akchat_inbox_csrf"
CSRF_FIELD = "csrf"

#: No inline script or style, nothing from elsewhere, no framing, forms post only here.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


class SecurityHeaders:
    """ASGI middleware: every response, error pages and static files included, gets the headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(n, v) for n, v in SECURITY_HEADERS if n not in names]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def is_loopback_client(request: Request) -> bool:
    """Whether the peer is a loopback address *and* the Host names loopback.

    The Host check stops DNS rebinding: a hostile page whose name resolves to 127.0.0.1 reaches
    a loopback server from the user's own browser, but with its own name in ``Host``.
    """
    client = request.client
    if client is None:
        return False
    try:
        if not ipaddress.ip_address(client.host).is_loopback:
            return False
    except ValueError:
        return False
    host = request.headers.get("host", "")
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return name.lower() in _LOOPBACK_NAMES


def principal_identity(principal: object) -> str:
    """The stable identity a CSRF token is bound to: the principal's ``id`` attribute when it
    has one (and it is not ``None``), else ``str(principal)``.

    It must be the same for one user on every request and differ between users, so a token
    one user's page holds is refused in another user's request (docs/inbox.md).
    """
    found = getattr(principal, "id", None)
    return str(principal if found is None else found)


class Csrf:
    """Signed double submit: a random nonce in a cookie; in every form, the HMAC of that nonce
    *and* the identity of the principal the page was rendered for."""

    def __init__(self, secret: bytes | None) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    @staticmethod
    def new_nonce() -> str:
        return secrets.token_urlsafe(32)

    def form_token(self, nonce: str, identity: str) -> str:
        # The nonce is URL-safe base64 (no ":"), so "length:nonce:identity" reads one way only.
        message = f"{len(nonce)}:{nonce}:{identity}".encode("utf-8", "surrogatepass")
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def valid(self, nonce: str | None, token: str | None, identity: str) -> bool:
        if not nonce or not token or len(nonce) > 128 or len(token) > 128:
            return False
        return hmac.compare_digest(self.form_token(nonce, identity), token)


def same_origin(headers: Headers, own_origin: str, trusted: frozenset[str]) -> bool:
    """Whether a state-changing request comes from this page (Fetch Metadata, then Origin).

    A browser sends both on every POST; a missing header passes this check (an old client or
    a script with no cookie), and the CSRF token is what refuses it then. Our own
    ``Referrer-Policy: no-referrer`` makes Chromium send ``Origin: null`` on the page's own
    form posts, so ``null`` passes only beside ``Sec-Fetch-Site: same-origin``, a header a page
    cannot forge. A cross-site POST passes only from one of the host's ``trusted`` origins.
    """
    site = headers.get("sec-fetch-site")
    origin = headers.get("origin")
    if site is not None and site != "same-origin":
        # Another site (or site-less): allowed only from an origin the host named, which a
        # browser sends as ``Origin`` and a page cannot forge.
        return origin is not None and origin in trusted
    if origin == "null":
        return site == "same-origin"
    return origin is None or origin == own_origin or origin in trusted
