"""The App a jobq worker runs in a Django project: ``jobq worker --app
jobq.contrib.django.worker:app`` (what ``manage.py jobq_worker`` runs), with
DJANGO_SETTINGS_MODULE set.

Importing it sets Django up, then imports the ``tasks`` module of every installed app and
the modules the backends' OPTIONS ``TASK_MODULES`` list, so that every task is registered
before the worker takes one; a row naming a task defined elsewhere fails as unknown (no
module named by a row is ever imported). ``app`` is the App of the TASKS backend named by
$JOBQ_DJANGO_BACKEND (default ``"default"``).
"""

from __future__ import annotations

import os

import django
from django.apps import apps

from jobq.contrib.django.backend import BACKEND_VARIABLE, backend_app, discover

if not apps.ready:
    django.setup()
discover()
app = backend_app(os.environ.get(BACKEND_VARIABLE, "default"))
