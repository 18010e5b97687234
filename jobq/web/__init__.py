"""The web dashboard (`jobq dashboard`, extra jobq[web]): pages showing the queues, tasks,
schedules, locks and workers of one jobq database, and the operators' actions on them.

create_app builds it as an ASGI app; app.py holds the routes and middleware, auth.py the
sign-in and CSRF checks, queries.py the bounded reads (jobq.observe.counting keeps the
counts, in the background), pages.py and actions.py the handlers, templates/ and static/
what browsers get. Only this package imports Starlette and Jinja2.
"""

from __future__ import annotations

from jobq.web.app import create_app

__all__ = ["create_app"]
