"""``manage.py jobq_migrate`` and ``manage.py jobq_worker``."""
