"""Django migrations of jobq.contrib.django: each applies jobq's own schema revisions
(jobq.contrib.django.tables), so ``manage.py migrate`` makes and upgrades jobq's tables."""
