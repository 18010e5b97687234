"""`jobq worker`: run an app's tasks until stopped."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn

import click
from click.core import ParameterSource

from jobq.app.loading import load_app
from jobq.app.store import Store
from jobq.cli.common import app_option, clear_errors
from jobq.cli.params import KeepFor, UnsignedInt
from jobq.limits import Limiter
from jobq.observe.metrics import WorkerMetrics
from jobq.pool import ProcessPool
from jobq.supervise import Supervisor
from jobq.supervise.orphan import watch_supervisor
from jobq.worker import Worker, logs

#: TigerBeetle's cluster ids are 128-bit unsigned integers.
CLUSTER_ID = UnsignedInt(128)


@click.command()
@app_option(required=True, help="The jobq.App to run")
@click.option("--queues", default=None, help="Comma-separated queues to take from (default: all).")
@click.option(
    "--concurrency", type=click.IntRange(min=1), default=8, show_default=True,
    help="Tasks run at once: sync ones on as many threads, async ones on one event loop.",
)  # fmt: skip
@click.option(
    "--processes", type=click.IntRange(min=1), default=1, show_default=True,
    help="Worker processes to run on this host, each with --concurrency slots, under one "
    "supervisor that restarts a process that dies and passes SIGTERM/SIGINT on to all.",
)  # fmt: skip
@click.option(
    "--pool", type=click.Choice(["threads", "processes"]), default="threads",
    show_default=True,
    help="Where sync tasks run: on threads, or each in one of --concurrency child "
    "processes (CPU-bound tasks use every core; a run past its timeout is killed). Async "
    "tasks run on the worker's event loop either way.",
)  # fmt: skip
@click.option(
    "--max-tasks-per-child", type=click.IntRange(min=1), default=None,
    help="With --pool processes: replace a child after this many runs.",
)  # fmt: skip
@click.option(
    "--max-memory-per-child", type=click.IntRange(min=1), default=None, metavar="MB",
    help="With --pool processes: replace a child, after its run, once its peak resident "
    "memory passed this many MB.",
)  # fmt: skip
@click.option(
    "--supervisor-pid", type=int, default=None, hidden=True,
    help="Set by the --processes supervisor for the processes it starts: its own pid.",
)  # fmt: skip
@click.option(
    "--burst", is_flag=True,
    help="Exit once nothing is due now nor within --burst-wait seconds; tasks due later "
    "are left for another worker (the exit line says how many, and when the next is due).",
)  # fmt: skip
@click.option(
    "--burst-wait", type=click.FloatRange(min=0), default=5.0, show_default=True,
    metavar="SECONDS",
    help="With --burst: seconds ahead to look for tasks falling due (a retry after "
    "`jobq.Retry(delay=1)`, say); the worker waits for those and runs them before it exits.",
)  # fmt: skip
@click.option(
    "--lease", type=click.FloatRange(min=0, min_open=True), default=None,
    help="Lease seconds for every task (default: each task's own).",
)  # fmt: skip
@click.option(
    "--grace", type=click.FloatRange(min=0), default=30.0, show_default=True,
    help="Seconds running tasks get to finish after SIGTERM or SIGINT before they are "
    "released.",
)  # fmt: skip
@click.option(
    "--poll-interval", type=click.FloatRange(min=0, min_open=True), default=0.5, show_default=True,
    help="Seconds between looks for due tasks while none is waiting (PostgreSQL also wakes "
    "the worker at each enqueue).",
)  # fmt: skip
@click.option(
    "--max-poll-interval", type=click.FloatRange(min=0, min_open=True), default=None,
    metavar="SECONDS",
    help="While looks find nothing, the wait between them doubles from --poll-interval up "
    "to this (default: 4 x --poll-interval); a retry this worker recorded is looked for "
    "when it falls due, and an enqueue heard of (PostgreSQL) ends the wait.",
)  # fmt: skip
@click.option(
    "--rescue-interval", type=click.FloatRange(min=0, min_open=True), default=5.0,
    show_default=True, metavar="SECONDS",
    help="Seconds between rescues of runs whose lease expired, by the one worker doing "
    "the upkeep, whose lease on it lasts 4 x this. Lower it to rescue a dead worker's "
    "cron runs and workflow nodes sooner (and, if it did the upkeep, to take that over).",
)  # fmt: skip
@click.option(
    "--retain", type=KeepFor(), default="7d", show_default=True,
    help="How long finished tasks are kept (30s, 12h, 7d, 1w, or forever) in queues "
    "without a time of their own (`jobq queues retain`); the worker elected for the "
    "upkeep deletes older ones in batches.",
)  # fmt: skip
@click.option(
    "--vacuum/--no-vacuum", default=True, show_default=True,
    help="PostgreSQL: the worker doing the upkeep vacuums jobq_tasks whenever 100,000 dead "
    "rows pile up between autovacuum's passes (a tenth of the time at most), which else slow "
    "every capture down; --no-vacuum leaves it to autovacuum alone.",
)  # fmt: skip
@click.option(
    "--worker-id", default=None,
    help="Its name in `jobq status` and in its tasks' locked_by; default: host:pid:random.",
)  # fmt: skip
@click.option(
    "--max-stuck", type=click.IntRange(min=0), default=None,
    help="Exit (code 3, for a supervisor to restart the worker) once this many runs are "
    "stuck past their timeouts; 0: never. Default: the concurrency.",
)  # fmt: skip
@click.option(
    "--stuck-after", type=click.FloatRange(min=0), default=60.0, show_default=True,
    help="Seconds past its timeout after which a run that has not returned counts as stuck.",
)  # fmt: skip
@click.option(
    "--limiter", type=click.Choice(["sql", "tigerbeetle"]), default="sql", show_default=True,
    help="What enforces the queues' limits (`jobq limits`): the database, or TigerBeetle.",
)  # fmt: skip
@click.option(
    "--tigerbeetle-addresses", default=None, envvar="JOBQ_TIGERBEETLE_ADDRESSES",
    help="With --limiter tigerbeetle: the replicas' addresses, e.g. 3000 or 10.0.0.1:3000,...",
)  # fmt: skip
@click.option(
    "--tigerbeetle-cluster", type=CLUSTER_ID, default=0, show_default=True,
    help=f"With --limiter tigerbeetle: the cluster id, {CLUSTER_ID.described}.",
)  # fmt: skip
@click.option(
    "--tigerbeetle-timeout", type=click.FloatRange(min=0, min_open=True), default=2.0,
    show_default=True,
    help="Seconds to wait for TigerBeetle; past that, limited queues wait until it answers.",
)  # fmt: skip
@click.option(
    "--metrics-port", type=click.IntRange(min=1, max=65535), default=None,
    help="Serve Prometheus metrics on this port at /metrics (needs the 'metrics' extra).",
)  # fmt: skip
@click.option(
    "--metrics-host", default="127.0.0.1", show_default=True,
    help="With --metrics-port: the address to listen on (0.0.0.0: every interface).",
)  # fmt: skip
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    help="Least severe records logged; warning: only failures and the worker's notices.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"], case_sensitive=False),
    default="text",
    show_default=True,
    help="json: one JSON object per line, with task_id, task, attempt, status, duration_ms.",
)
@click.option(
    "--database-url", envvar="JOBQ_DATABASE_URL", default=None,
    help="Database URL (env: JOBQ_DATABASE_URL); default: the app's own.",
)  # fmt: skip
@click.option(
    "--listen-url", envvar="JOBQ_LISTEN_URL", default=None,
    help="PostgreSQL's own URL, to LISTEN for enqueues on when the database URL goes "
    "through a transaction pooler (?jobq_pooler=transaction), which cannot keep a LISTEN; "
    "without it such a worker polls (env: JOBQ_LISTEN_URL).",
)  # fmt: skip
@click.pass_context
def worker(
    ctx: click.Context,
    app_path: str,
    queues: str | None,
    concurrency: int,
    processes: int,
    pool: str,
    max_tasks_per_child: int | None,
    max_memory_per_child: int | None,
    supervisor_pid: int | None,
    burst: bool,
    burst_wait: float,
    lease: float | None,
    grace: float,
    poll_interval: float,
    max_poll_interval: float | None,
    rescue_interval: float,
    retain: float,
    vacuum: bool,
    worker_id: str | None,
    max_stuck: int | None,
    stuck_after: float,
    limiter: str,
    tigerbeetle_addresses: str | None,
    tigerbeetle_cluster: int,
    tigerbeetle_timeout: float,
    metrics_port: int | None,
    metrics_host: str,
    log_level: str,
    log_format: str,
    database_url: str | None,
    listen_url: str | None,
) -> None:
    """Run the app's tasks: capture, execute, record.

    SIGTERM or SIGINT (Ctrl-C) stops it gracefully: it captures no more tasks, lets the
    running ones finish for --grace seconds, puts the rest back in the queue and exits 0.
    A second SIGTERM or SIGINT exits at once, the running tasks put back in the queue
    first (within a second at most).

    With --processes N, a supervisor runs N such workers and stops them all the same way.
    """
    logs.configure(log_level, log_format.lower())
    if pool == "threads" and (max_tasks_per_child or max_memory_per_child):
        raise click.UsageError(
            "--max-tasks-per-child and --max-memory-per-child need --pool processes"
        )
    with clear_errors():
        app = load_app(app_path)
        if database_url is not None:
            app.store = Store(database_url)
        if listen_url is not None:
            app.store.db.listen_on(listen_url)
        if processes > 1:
            # Clear errors once here, rather than from N processes started again and again.
            app.store.check_schema()
            app.store.dispose()
            if limiter == "tigerbeetle" and tigerbeetle_addresses is None:
                raise click.UsageError("--limiter tigerbeetle needs --tigerbeetle-addresses")
            supervise(
                ctx, processes, grace=grace, burst=burst,
                urls={"JOBQ_DATABASE_URL": database_url, "JOBQ_LISTEN_URL": listen_url},
            )  # fmt: skip
        names = [q.strip() for q in queues.split(",") if q.strip()] if queues else None
        metrics = _metrics(metrics_port, metrics_host)
        running = Worker(
            app, queues=names, concurrency=concurrency, lease=lease, grace=grace,
            poll_interval=poll_interval, max_poll_interval=max_poll_interval, burst=burst,
            burst_wait=burst_wait, worker_id=worker_id, rescue_interval=rescue_interval,
            retain=retain, vacuum=vacuum,
            max_stuck=max_stuck, stuck_after=stuck_after,
            limiter=_limiter(
                limiter, tigerbeetle_addresses, tigerbeetle_cluster, tigerbeetle_timeout
            ),
            metrics=metrics, supervisor_pid=supervisor_pid,
            pool=None if pool == "threads" else ProcessPool(
                app_path, database_url=database_url, max_tasks_per_child=max_tasks_per_child,
                max_memory_per_child=max_memory_per_child,
                log_setup=(log_level, log_format.lower()),
            ),
        )  # fmt: skip
        if supervisor_pid is not None:
            watch_supervisor(supervisor_pid, running.stop)
        running.run()
    if running.stragglers or running.exit_code:
        # Released sync tasks still hold threads that cannot be stopped: leave without them.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(running.exit_code)


def supervise(
    ctx: click.Context,
    processes: int,
    *,
    grace: float,
    burst: bool,
    urls: dict[str, str | None],
) -> NoReturn:
    """Run ``processes`` workers with this command's options under a Supervisor; exit.
    ``urls``: the database URLs given, by the variable that passes each on."""
    env = dict(os.environ)
    # By the environment: no credentials in `ps` output.
    env.update({name: url for name, url in urls.items() if url is not None})
    code = Supervisor(process_command(ctx), processes, grace=grace, burst=burst, env=env).run()
    sys.exit(code)


def process_command(ctx: click.Context) -> Callable[[int], list[str]]:
    """The argv of the k-th worker process of a supervisor: the options given to this
    command (those left at their defaults are not repeated), less --processes and
    --database-url (passed in the environment), with the supervisor's pid, and each its
    own --worker-id (ID-k) and --metrics-port (P+k) where those were given. The URLs
    (--database-url, --listen-url) go in the environment."""
    options: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if not isinstance(param, click.Option) or name in _NOT_PASSED_ON:
            continue
        if ctx.get_parameter_source(name) is ParameterSource.DEFAULT:
            continue
        value = ctx.params[name]
        if param.is_flag:
            options += [param.opts[0]] if value else []
        elif value is not None:
            options += [param.opts[0], str(value)]
    worker_id, port = ctx.params["worker_id"], ctx.params["metrics_port"]

    def command(k: int) -> list[str]:
        own = ["--supervisor-pid", str(os.getpid())]
        if worker_id is not None:
            own += ["--worker-id", f"{worker_id}-{k}"]
        if port is not None:
            own += ["--metrics-port", str(port + k)]
        return [sys.executable, "-m", "jobq.cli", "worker", *options, *own]

    return command


#: Options the supervisor does not pass on as given: it sets them for each process.
_NOT_PASSED_ON = {
    "processes", "database_url", "listen_url", "supervisor_pid", "worker_id", "metrics_port",
}  # fmt: skip


def _limiter(kind: str, addresses: str | None, cluster: int, timeout: float) -> Limiter | None:
    """The limiter named on the command line (None: the database's own)."""
    if kind == "sql":
        return None
    if addresses is None:
        raise click.UsageError("--limiter tigerbeetle needs --tigerbeetle-addresses")
    from jobq.limits.tigerbeetle import TigerBeetleLimiter  # the optional extra

    return TigerBeetleLimiter(addresses, cluster, deadline=timeout)


def _metrics(port: int | None, host: str) -> WorkerMetrics | None:
    """The worker's Prometheus metrics, served on ``host``:``port`` (None: no port given)."""
    if port is None:
        return None
    metrics = WorkerMetrics()
    try:
        metrics.serve(port, host)
    except OSError as error:
        raise click.UsageError(f"--metrics-port {port}: cannot listen on {host}: {error}") from None
    logging.getLogger("jobq.worker").info("metrics at http://%s:%d/metrics", host, port)
    return metrics
