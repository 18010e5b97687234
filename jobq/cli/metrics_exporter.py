"""`jobq metrics`: serve the whole database's task counts to Prometheus until stopped."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

import click

from jobq.cli.common import database_url_option, store_for
from jobq.observe.exporter import DatabaseExporter
from jobq.worker import logs

log = logging.getLogger("jobq.exporter")


@click.command("metrics")
@click.option(
    "--port", type=click.IntRange(min=1, max=65535), required=True,
    help="Serve Prometheus metrics on this port at /metrics (needs the 'metrics' extra).",
)  # fmt: skip
@click.option(
    "--host", default="127.0.0.1", show_default=True,
    help="The address to listen on (0.0.0.0: every interface).",
)  # fmt: skip
@click.option(
    "--interval", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
    metavar="SECONDS",
    help="Seconds between counts of the active tasks (queued, in_progress, failed with "
    "retries left), and between retries of a count that failed.",
)  # fmt: skip
@click.option(
    "--finished-interval", type=click.FloatRange(min=0, min_open=True), default=60.0,
    show_default=True, metavar="SECONDS",
    help="Seconds between counts of the finished tasks (done, failed for good, cancelled), "
    "which read the whole table: at least 10 times the last such count's duration.",
)  # fmt: skip
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    help="Least severe records logged.",
)
@click.option(
    "--check", is_flag=True,
    help="Check the options and the database (reachable, migrated), then exit without serving.",
)  # fmt: skip
@database_url_option
def metrics_exporter(
    port: int,
    host: str,
    interval: float,
    finished_interval: float,
    log_level: str,
    check: bool,
    database_url: str,
) -> None:
    """Serve the database's tasks per queue and status to Prometheus at /metrics.

    \b
    Metrics (gauges):
      jobq_tasks{queue,status}             tasks per queue and status, as `jobq status`
      jobq_oldest_waiting_seconds{queue}   age of the queue's longest-due waiting task
                                           (queued or failed with retries left; 0: none due)
      jobq_tasks_counted_seconds{part}     seconds since the active / finished part was counted
      jobq_exporter_refresh_seconds{part}  how long its last count took
      jobq_exporter_up                     1 if the last counts succeeded, else 0

    Scrapes never query the database: background threads count every --interval seconds
    (active tasks) and every --finished-interval seconds (finished ones), and scrapes get
    the last counts. A database that cannot be reached is logged once, and the last counts
    stay served with jobq_exporter_up 0. SIGTERM or SIGINT (Ctrl-C) stops it (exit 0).
    """
    logs.configure(log_level, "text")
    with store_for(database_url, read_only=True, serves=True) as store:
        exporter = DatabaseExporter(store, interval=interval, finished_interval=finished_interval)
        if check:
            store.check_schema()
            click.echo(f"the database is ready; jobq metrics would serve port {port}")
            return
        try:
            server = exporter.serve(port, host)
        except OSError as error:
            raise click.UsageError(f"--port {port}: cannot listen on {host}: {error}") from None
        stopped = _stop_signal()
        log.info("metrics at http://%s:%d/metrics", host, port)
        exporter.start()
        # Woken every second as well: a signal handler runs only between bytecodes.
        while not stopped.wait(1.0):
            pass
        log.info("stopping")
        server.shutdown()
        exporter.stop()


def _stop_signal() -> threading.Event:
    """An event set by the first SIGTERM or SIGINT; a second one ends the process at once."""
    stopped = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopped.set()
        signal.signal(signum, signal.SIG_DFL)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stopped
