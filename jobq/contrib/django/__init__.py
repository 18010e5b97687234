"""jobq for Django projects: a backend of Django's Tasks framework (JobqBackend) whose
enqueues share Django's transactions, jobq's database taken from ``DATABASES``, the
``jobq_migrate`` and ``jobq_worker`` management commands, and the dashboard behind Django's
staff login. Add ``"jobq.contrib.django"`` to INSTALLED_APPS (needs the ``django`` extra:
Django 6.0 or newer, Python 3.12 or newer). Django is imported here and nowhere else in jobq.
"""

from jobq.contrib.django.backend import JobqBackend

__all__ = ["JobqBackend"]
