"""The sign-in form (/login) and signing out (/logout), for browsers; scripts send the
token in an Authorization header instead (see auth.py).

A wrong token typed in the form counts against its client like a wrong Bearer token
(guard.py): after a few, the form answers 429 until the client's wait is over.
"""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobq.web.actions import forbidden
from jobq.web.auth import csrf_ok, origin_of, safe_next, token_matches
from jobq.web.views import render, signed_in


async def login_page(request: Request) -> Response:
    """The sign-in form; with no token configured there is nothing to sign in to."""
    base = request.scope.get("root_path", "")
    target = safe_next(request.query_params.get("next"))
    if request.app.state.token is None or signed_in(request):
        return RedirectResponse(base + target, status_code=303)
    return render(request, "login.html", {"page": "login", "next": target, "error": None})


async def login_submit(request: Request) -> Response:
    """Sign in with the token typed in the form: a fresh session, then back to ``next``."""
    base = request.scope.get("root_path", "")
    form = await request.form()
    target = safe_next(str(form.get("next") or ""))
    state = request.app.state
    if state.token is None:
        return RedirectResponse(base + target, status_code=303)
    client = origin_of(request.scope).client
    wait = state.throttle.wait(client)
    if wait > 0:  # shut out for its wrong tokens: this one is not even checked
        error = f"Too many wrong tokens from here: try again in {max(1, round(wait))} s."
        context = {"page": "login", "next": target, "error": error}
        answer = render(request, "login.html", context, status_code=429)
        answer.headers["retry-after"] = str(max(1, round(wait + 0.5)))
        return answer
    given = form.get("token")
    if not csrf_ok(request, form):
        error = "The form was stale: try again."
        context = {"page": "login", "next": target, "error": error}
        return render(request, "login.html", context, status_code=403)
    if not token_matches(given if isinstance(given, str) else None, state.token):
        state.throttle.failed(client, "sign-in")
        error = "That token is not the dashboard's: try again."
        context = {"page": "login", "next": target, "error": error}
        return render(request, "login.html", context, status_code=401)
    state.throttle.succeeded(client)
    # A new session, and a new CSRF token with it: nothing from before sign-in carries over.
    state.sessions.close(request.session.get("sid"))
    request.session.clear()
    request.session["sid"] = state.sessions.open()
    request.session["csrf"] = secrets.token_urlsafe(32)
    return RedirectResponse(base + target, status_code=303)


async def logout(request: Request) -> Response:
    """Sign out: the session is forgotten by the server, so that no copy of its cookie
    lets anyone in again, and emptied (a POST with the CSRF token)."""
    base = request.scope.get("root_path", "")
    form = await request.form()
    if not csrf_ok(request, form):
        return forbidden("missing or wrong CSRF token")
    request.app.state.sessions.close(request.session.get("sid"))
    request.session.clear()
    return RedirectResponse(base + "/login", status_code=303)
