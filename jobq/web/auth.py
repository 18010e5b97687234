"""Who may use the dashboard, and proof that a form was posted from its own pages.

- Sign-in: with a token configured, a request is let in when it carries
  ``Authorization: Bearer <token>`` (scripts) or the cookie of a session signed in by the
  form at /login (browsers) and not signed out since (sessions.py). Without one, a browser
  asking for a page (Accept: text/html) is sent to the form; anything else gets 401. A
  wrong Bearer token is 401, and counts against its client (guard.py: after a few, 429
  with Retry-After). Tokens are compared with hmac.compare_digest. With no token
  configured, everyone is let in: the command line serves that only on a loopback address.
- Cookies: the session cookie is HttpOnly, SameSite=Lax, and Secure when the request came
  over HTTPS (directly, or as a trusted proxy's X-Forwarded-Proto says).
- CSRF: every POST from a browser carries the session's random ``csrf`` field, checked
  here; missing or wrong is 403. A Bearer request needs none: no cookie is sent with it,
  so no other site can make a browser send one.
- Headers: every response forbids framing, inline scripts and referrers.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobq.web.guard import Network, Origin, Throttle, origin
from jobq.web.sessions import Sessions

#: The session cookie's name.
COOKIE = "jobq_dashboard"
#: The scope key set on requests let in by their Bearer token.
BEARER = "jobq.bearer"
#: The scope key holding the request's guard.Origin (its client, and whether HTTPS).
ORIGIN = "jobq.origin"

SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
}


def token_matches(given: str | None, expected: str) -> bool:
    """Whether ``given`` is ``expected``, compared in constant time."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


def session_secret(token: str | None) -> str:
    """The key that signs session cookies: derived from ``token`` (sessions outlive a
    restart, and end when the token changes), else random for this process."""
    if token is None:
        return secrets.token_hex(32)
    return hmac.new(token.encode(), b"jobq dashboard session", hashlib.sha256).hexdigest()


def csrf_token(request: Request) -> str:
    """The session's CSRF token, made on first use."""
    token = request.session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        request.session["csrf"] = token
    return token


def csrf_ok(request: Request, form: Any) -> bool:
    """Whether a POST of ``form`` may act: sent with the Bearer token, or carrying the
    session's CSRF token."""
    if request.scope.get(BEARER):
        return True
    expected = request.session.get("csrf")
    given = form.get("csrf")
    return isinstance(expected, str) and isinstance(given, str) and token_matches(given, expected)


def route_path(scope: Scope) -> str:
    """The request's path within this app (the part after any mount's prefix)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def safe_next(target: str | None) -> str:
    """``target`` if it is a path of this site (never another host), else '/'."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    # Browsers drop tabs and newlines from URLs: "/\t/evil.example" would lead away.
    if any(ch <= " " or ch == "\x7f" for ch in target):
        return "/"
    return target


def origin_of(scope: Scope) -> Origin:
    """The request's Origin, as SecurityHeaders found it."""
    found = scope.get(ORIGIN)
    return found if isinstance(found, Origin) else Origin("unknown", False)


def too_many(wait: float) -> PlainTextResponse:
    """429: this client sent too many wrong tokens; ``wait`` seconds before it may retry."""
    seconds = max(1, math.ceil(wait))
    return PlainTextResponse(
        f"429 Too Many Requests: too many wrong tokens from here; try again in {seconds} s\n",
        status_code=429,
        headers={"retry-after": str(seconds)},
    )


class SignInRequired:
    """ASGI middleware: lets in signed-in requests only (see the module's docstring).

    It must run inside Starlette's SessionMiddleware, which reads the cookie, and inside
    SecurityHeaders, which finds the request's origin.
    """

    def __init__(
        self, app: ASGIApp, *, token: str | None, sessions: Sessions, throttle: Throttle
    ) -> None:
        self.app = app
        self.token = token
        self.sessions = sessions
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.token is None:
            await self.app(scope, receive, send)
            return
        path = route_path(scope)
        if path == "/login" or path.startswith("/static/"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        authorization = headers.get("authorization")
        if authorization is not None:
            client = origin_of(scope).client
            wait = self.throttle.wait(client)
            if wait > 0:  # shut out for its wrong tokens: not even checked
                await too_many(wait)(scope, receive, send)
                return
            scheme, _, given = authorization.partition(" ")
            if scheme.lower() == "bearer" and token_matches(given.strip(), self.token):
                self.throttle.succeeded(client)
                scope[BEARER] = True
                await self.app(scope, receive, send)
                return
            self.throttle.failed(client, "bearer")
            await _unauthorized()(scope, receive, send)
            return
        if self.sessions.alive(scope.get("session", {}).get("sid")):
            await self.app(scope, receive, send)
            return
        wants_page = "text/html" in headers.get("accept", "") and scope["method"] == "GET"
        if wants_page and "x-jobq-fragment" not in headers:
            target = path + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
            root = scope.get("root_path", "")
            login = f"{root}/login?next={quote(target, safe='')}"
            await RedirectResponse(login, status_code=303)(scope, receive, send)
            return
        await _unauthorized()(scope, receive, send)


def _unauthorized() -> PlainTextResponse:
    return PlainTextResponse(
        "401 Unauthorized: sign in, or send Authorization: Bearer <token>\n",
        status_code=401,
        headers={"www-authenticate": 'Bearer realm="jobq"'},
    )


class SecurityHeaders:
    """ASGI middleware, the outermost: finds the request's origin (guard.origin, through
    the ``trusted`` proxies), adds SECURITY_HEADERS to every response, keeps pages (not
    the static files) out of caches, and marks cookies Secure on a request over HTTPS."""

    def __init__(self, app: ASGIApp, *, trusted: Sequence[Network] = ()) -> None:
        self.app = app
        self.trusted = list(trusted)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = route_path(scope).startswith("/static/")
        found = origin(scope, self.trusted)
        scope[ORIGIN] = found

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
                if not static:
                    headers["cache-control"] = "no-store"
                if found.https:
                    message["headers"] = [
                        _secure(name, value) for name, value in message["headers"]
                    ]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _secure(name: bytes, value: bytes) -> tuple[bytes, bytes]:
    """A response header, a Set-Cookie one marked Secure (the request came over HTTPS)."""
    if name.lower() == b"set-cookie" and b"; secure" not in value.lower():
        return name, value + b"; secure"
    return name, value
