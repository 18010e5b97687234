"""jobq's revision 0016: fair queues."""

from django.db import migrations

from jobq.contrib.django.tables import backward, forward


class Migration(migrations.Migration):
    # jobq migrates on a connection of its own, while Django holds no transaction open.
    atomic = False
    dependencies = [("jobq", "0002_jobq_0015")]
    operations = [migrations.RunPython(forward("0016"), backward("0015"), elidable=False)]
