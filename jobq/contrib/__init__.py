"""jobq inside the frameworks its users build with: one subpackage per framework, each
behind an extra of its own, each using only jobq's public faces (App, Store, the worker,
the command line, the dashboard) and never imported by anything else in jobq.

- jobq.contrib.django: a backend for Django's Tasks framework, enqueueing in Django's own
  transaction, settings from ``DATABASES``, management commands, the dashboard behind
  Django's staff login.
- jobq.contrib.fastapi: FastAPI and Starlette: a lifespan that opens and closes the App's
  Store, a dependency giving handlers the App, the dashboard under a prefix.
"""
