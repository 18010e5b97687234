"""jobq's revision 0017: fair queues by deficit round robin (a cursor per queue)."""

from django.db import migrations

from jobq.contrib.django.tables import backward, forward


class Migration(migrations.Migration):
    # jobq migrates on a connection of its own, while Django holds no transaction open.
    atomic = False
    dependencies = [("jobq", "0003_jobq_0016")]
    operations = [migrations.RunPython(forward("0017"), backward("0016"), elidable=False)]
