"""The sign-in form (/login) and signing out (/logout), for browsers; scripts send the
token in an Authorization header instead (see auth.py)."""

from __future__ import annotations

import asyncio
import secrets

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobq.web.actions import forbidden
from jobq.web.auth import csrf_ok, safe_next, token_matches
from jobq.web.views import render

#: Seconds a wrong token waits before its answer: guessing stays slow.
WRONG_TOKEN_DELAY = 0.3


async def login_page(request: Request) -> Response:
    """The sign-in form; with no token configured there is nothing to sign in to."""
    base = request.scope.get("root_path", "")
    target = safe_next(request.query_params.get("next"))
    if request.app.state.token is None or request.session.get("signed_in") is True:
        return RedirectResponse(base + target, status_code=303)
    return render(request, "login.html", {"page": "login", "next": target, "error": None})


async def login_submit(request: Request) -> Response:
    """Sign in with the token typed in the form: a fresh session, then back to ``next``."""
    base = request.scope.get("root_path", "")
    form = await request.form()
    target = safe_next(str(form.get("next") or ""))
    expected = request.app.state.token
    if expected is None:
        return RedirectResponse(base + target, status_code=303)
    given = form.get("token")
    if not csrf_ok(request, form) or not token_matches(
        given if isinstance(given, str) else None, expected
    ):
        await asyncio.sleep(WRONG_TOKEN_DELAY)
        error = "That token is not the dashboard's (or the form was stale): try again."
        context = {"page": "login", "next": target, "error": error}
        return render(request, "login.html", context, status_code=401)
    # A new session, and a new CSRF token with it: nothing from before sign-in carries over.
    request.session.clear()
    request.session["signed_in"] = True
    request.session["csrf"] = secrets.token_urlsafe(32)
    return RedirectResponse(base + target, status_code=303)


async def logout(request: Request) -> Response:
    """Sign out: the session is emptied (a POST with the CSRF token)."""
    base = request.scope.get("root_path", "")
    form = await request.form()
    if not csrf_ok(request, form):
        return forbidden("missing or wrong CSRF token")
    request.session.clear()
    return RedirectResponse(base + "/login", status_code=303)
