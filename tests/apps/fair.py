"""A test app for fair queues: each tenant's runs in the fair queue ``shared``.

``work`` sleeps ``ms`` milliseconds and returns when its code began and ended (wall
clock), so a test counts from the rows alone how many runs of one key overlapped. Its
database URL comes from $JOBQ_DATABASE_URL, as a deployed worker's would.
"""

from __future__ import annotations

import time

import jobq

app = jobq.App()


@app.task(queue="shared", fair_key="{tenant}", retries=0)
def work(tenant: str, ms: float = 0.0) -> dict[str, float]:
    began = time.time()
    if ms:
        time.sleep(ms / 1000)
    return {"began": began, "ended": time.time()}
