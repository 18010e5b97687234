"""jobq's revision 0015: the finished_at index holds the finished rows only."""

from django.db import migrations

from jobq.contrib.django.tables import backward, forward


class Migration(migrations.Migration):
    # jobq migrates on a connection of its own, while Django holds no transaction open.
    atomic = False
    dependencies = [("jobq", "0001_jobq_0014")]
    operations = [migrations.RunPython(forward("0015"), backward("0014"), elidable=False)]
