"""jobq's tables at jobq's revision 0014 (every revision up to it, on a fresh database)."""

from django.db import migrations

from jobq.contrib.django.tables import backward, forward


class Migration(migrations.Migration):
    # jobq migrates on a connection of its own, while Django holds no transaction open.
    atomic = False
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [migrations.RunPython(forward("0014"), backward("base"), elidable=False)]
