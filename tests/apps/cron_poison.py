"""A test app whose one schedule, ``poison``, fails every second with an error a terminal
cannot print as it is: a file name that is not UTF-8 (a lone surrogate once decoded) and a
NUL, in a message of two lines.

Its database URL comes from $JOBQ_DATABASE_URL, as a deployed worker's would.
"""

from __future__ import annotations

import os

import jobq

app = jobq.App()

#: The file name of the error: b"\xff" decoded as the file system does, "\udcff".
NAME = os.fsdecode(b"report-\xff.csv")


@app.periodic(cron="* * * * * *")
@app.task(retries=0, lease=5)
def poison() -> None:
    raise FileNotFoundError(f"cannot open {NAME}\x00\nthe second line of the message")
