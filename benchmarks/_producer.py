"""sustained_load.py's producer: batches enqueued at a fixed offered rate, step by step.

A process of its own (so that its work takes no turn from the sampler's), told its steps
on stdin, one line each, ``RATE SECONDS``; after each it prints one JSON line on stdout
(what it offered) and waits for the next; ``quit`` or the end of stdin ends it.

Pacing is on the monotonic clock: batch ``k`` of a step is due ``k * batch / RATE`` s
after the step began. A batch is sent when due, or at once if the producer is late (it
catches up); batches still unsent when the step's time is up are not offered at all, and
the step's line says how many rows that was (``unoffered``), and how late the latest
batch went out (``worst_lag``). A rate of 0 offers nothing for the step's seconds.

The enqueueing itself is a ``send(n)`` callable: jobq's is ``Store.enqueue_many`` of ``n``
runs of a task, in one transaction; the peers' (peer_worker.py ``produce``) are their own
batch APIs.

    python -m benchmarks._producer --url URL --task bench.sleep --args '{"ms": 1}'
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from typing import IO, Any

#: Rows per enqueue call (the issue's harness: batches of 128).
BATCH = 128


def step(send: Callable[[int], object], rate: float, seconds: float, batch: int) -> dict[str, Any]:
    """Offer ``rate`` rows a second for ``seconds`` s in batches of ``batch``; what was
    offered (``start``/``end`` are the wall clock's epoch seconds, for the rows' times)."""
    target = round(rate * seconds)
    start_wall, start = time.time(), time.monotonic()
    end = start + seconds
    offered = calls = 0
    worst_lag = 0.0
    if rate > 0:
        interval = batch / rate
        for k in range(math.ceil(target / batch)):
            due = start + k * interval
            now = time.monotonic()
            if now >= end:
                break  # the rest of the step's batches are not offered
            if now < due:
                time.sleep(due - now)  # pacing: wait for the batch's due time
            else:
                worst_lag = max(worst_lag, now - due)
            n = min(batch, target - offered)
            send(n)
            offered += n
            calls += 1
    now = time.monotonic()
    if now < end:
        time.sleep(end - now)  # the step lasts its seconds whatever was sent
    return {
        "rate": rate,
        "seconds": seconds,
        "target": target,
        "offered": offered,
        "unoffered": target - offered,
        "calls": calls,
        "worst_lag": worst_lag,
        "start": start_wall,
        "end": start_wall + (time.monotonic() - start),
    }


def serve(
    send: Callable[[int], object],
    batch: int = BATCH,
    commands: IO[str] = sys.stdin,
    out: IO[str] = sys.stdout,
) -> None:
    """Run the steps read from ``commands`` until ``quit`` or its end, a JSON line each."""
    print(json.dumps({"ready": True}), file=out, flush=True)
    for line in commands:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        rate, seconds = float(words[0]), float(words[1])
        print(json.dumps(step(send, rate, seconds, batch)), file=out, flush=True)


def main() -> None:
    import jobq

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", required=True, help="the database's SQLAlchemy URL")
    parser.add_argument("--task", required=True)
    parser.add_argument("--args", default="{}", help="every task's arguments, JSON")
    parser.add_argument("--batch", type=int, default=BATCH)
    args = parser.parse_args()
    payload = json.loads(args.args)
    store = jobq.Store(args.url)
    try:
        serve(lambda n: store.enqueue_many(args.task, [payload] * n), args.batch)
    finally:
        store.dispose()


if __name__ == "__main__":
    main()
