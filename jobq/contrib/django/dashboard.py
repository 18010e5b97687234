"""jobq's dashboard inside a Django project, behind Django's staff login:
``path("jobq/", include("jobq.contrib.django.urls"))``.

The view hands each request, in-process, to the Starlette dashboard of the backend's Store
(jobq.web.create_app: no token of its own, as Django's login guards it) as one ASGI call
whose ``root_path`` is the prefix the URLconf mounted it at, so its links and static files
resolve under it; the answer becomes Django's response. The dashboard checks its own CSRF
token on every action, so the view is exempt from Django's. A body over
MAX_BODY bytes is refused (413) before it is read.
"""

from __future__ import annotations

import threading
from http.cookies import SimpleCookie
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from jobq.app.store import Store
from jobq.contrib.django.backend import backend_app
from jobq.web import create_app

#: Bytes a request to the dashboard may send (its forms are a few hundred).
MAX_BODY = 1 << 20
_DASHBOARDS: dict[int, Any] = {}
_LOCK = threading.Lock()


def _dashboard(store: Store) -> Any:
    """The Starlette dashboard of ``store``, made once per Store."""
    with _LOCK:
        app = _DASHBOARDS.get(id(store))
        if app is None:
            app = _DASHBOARDS[id(store)] = create_app(store)
        return app


@csrf_exempt
@staff_member_required
def dashboard(request: HttpRequest, path: str = "", backend: str = "default") -> HttpResponse:
    """The dashboard's page or action at ``path`` (below the URLconf's prefix), of the jobq
    database of the TASKS backend ``backend``."""
    length = int(request.META.get("CONTENT_LENGTH") or 0)
    if length > MAX_BODY:
        return HttpResponse("request body too large", status=413, content_type="text/plain")
    body = request.body[: MAX_BODY + 1]
    if len(body) > MAX_BODY:
        return HttpResponse("request body too large", status=413, content_type="text/plain")
    full = request.path
    root = full[: len(full) - len(path) - 1] if path else full.rstrip("/")
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": request.method, "scheme": request.scheme, "path": full,
        "raw_path": full.encode(), "root_path": root,
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": _headers(request),
        "client": (request.META.get("REMOTE_ADDR") or "127.0.0.1", 0),
        "server": (request.get_host().split(":")[0], int(request.get_port() or 80)),
    }  # fmt: skip
    status, headers, content = async_to_sync(_call)(
        _dashboard(backend_app(backend).store), scope, body
    )
    return _response(status, headers, content)


def _headers(request: HttpRequest) -> list[tuple[bytes, bytes]]:
    """The request's headers as ASGI lists them (lower-case names, latin-1 bytes)."""
    return [
        (name.lower().encode("latin-1"), str(value).encode("latin-1"))
        for name, value in request.headers.items()
    ]


async def _call(app: Any, scope: dict[str, Any], body: bytes) -> tuple[int, list[Any], bytes]:
    """One ASGI call of ``app``: the status, headers and whole body it answered."""
    sent = False
    start: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return start["status"], start.get("headers", []), b"".join(chunks)


def _response(status: int, headers: list[Any], content: bytes) -> HttpResponse:
    """Django's response of the dashboard's answer, cookies and all."""
    response = HttpResponse(content, status=status)
    for raw_name, raw_value in headers:
        name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
        if name.lower() == "set-cookie":
            response.cookies.load(SimpleCookie(value))
        else:
            response.headers[name] = value
    return response
