"""Rendering pages: the Jinja2 environment (autoescaping everything), its filters, and
the context every page gets (links, CSRF token, flash message, read-only mode)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from jobq.db.durations import format_duration
from jobq.db.tasks import Undecodable
from jobq.web.auth import BEARER, csrf_token
from jobq.web.values import last_line, size_text

HERE = Path(__file__).parent
#: The header the refreshing script sends: answer with the main content only.
FRAGMENT_HEADER = "x-jobq-fragment"
#: Seconds between two refreshes of a page (read by static/app.js from data-refresh).
REFRESH_SECONDS = 5

NAV = [
    ("overview", "/", "Overview"),
    ("tasks", "/tasks", "Tasks"),
    ("queues", "/queues", "Queues"),
    ("cron", "/cron", "Cron"),
    ("locks", "/locks", "Locks"),
    ("workers", "/workers", "Workers"),
]


def relative(moment: datetime | None, now: datetime | None) -> str:
    """``moment`` as people say it relative to ``now``, the database's time read with the
    rows: '3m 5s ago', 'in 40s', '-'. Without ``now`` (a page that read no clock), the
    absolute time: this machine's clock may be hours off the database's."""
    if moment is None:
        return "-"
    if now is None:
        return absolute(moment)
    seconds = (_aware(moment) - _aware(now)).total_seconds()
    if abs(seconds) < 1:
        return "now"
    text = format_duration(abs(seconds))
    return f"in {text}" if seconds > 0 else f"{text} ago"


def absolute(moment: datetime | None) -> str:
    """``moment`` in UTC to the second, for titles and tooltips; '' for None."""
    if moment is None:
        return ""
    return _aware(moment).strftime("%Y-%m-%d %H:%M:%S UTC")


def _aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def as_json(value: Any) -> str:
    """A stored JSON value for reading: indented; an undecodable one said as such."""
    if isinstance(value, Undecodable):
        return f"(not JSON: {value.reason})\n{value.text}"
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def number(value: int | float | None) -> str:
    """A count with thousands separators; '-' for None."""
    return "-" if value is None else f"{value:,}"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        # Every value is escaped, whatever the template's name; no template marks any
        # value from the database safe.
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        relative=relative, absolute=absolute, as_json=as_json, number=number,
        duration=format_duration, size=size_text, last_line=last_line,
    )  # fmt: skip
    return env


ENVIRONMENT = _environment()


def is_fragment(request: Request) -> bool:
    """Whether the refreshing script asks for the main content only."""
    return request.headers.get(FRAGMENT_HEADER) == "1"


def flash(request: Request, text: str, kind: str = "ok") -> None:
    """Leave ``text`` for the next full page this session sees (kind: ok or error)."""
    # A script sent with the Bearer token keeps no session: it would only get a cookie.
    if "session" in request.scope and not request.scope.get(BEARER):
        request.session["flash"] = [kind, text]


def render(
    request: Request, template: str, context: dict[str, Any], *, status_code: int = 200
) -> HTMLResponse:
    """``template`` rendered with ``context`` and what every page needs; with the
    fragment header, only its main content (and the flash message is kept for later)."""
    fragment = is_fragment(request)
    base = request.scope.get("root_path", "")
    state = request.app.state
    page = {
        "request": request,
        "base": base,
        "layout": "fragment.html" if fragment else "base.html",
        "read_only": state.read_only,
        "signed_in": signed_in(request),
        "auth_enabled": state.token is not None,
        "csrf": csrf_token(request) if "session" in request.scope else "",
        "flash": None if fragment else _pop_flash(request),
        "nav": NAV,
        # Ages are measured on the database's clock: each page passes the time it read
        # with its rows (never this machine's, which may be hours off).
        "now": None,
        "refresh": REFRESH_SECONDS,
        "database": state.database_label,
    }
    page.update(context)
    html = ENVIRONMENT.get_template(template).render(page)
    # A stored text may hold lone surrogates (undecodable bytes): shown escaped, not a 500.
    body = html.encode("utf-8", "backslashreplace")
    return HTMLResponse(body, status_code=status_code)


def signed_in(request: Request) -> bool:
    """Whether the request's session is signed in (and not signed out since)."""
    if "session" not in request.scope:
        return False
    return bool(request.app.state.sessions.alive(request.session.get("sid")))


def _pop_flash(request: Request) -> tuple[str, str] | None:
    if "session" not in request.scope:
        return None
    found = request.session.pop("flash", None)
    if isinstance(found, list) and len(found) == 2:
        return found[0], found[1]
    return None
