"""A pool child's life: load the app, run the tasks it is sent one at a time, report.

It runs in a process of its own, forked from multiprocessing's fork server (which has
the app imported already). It reads task frames from its connection, runs each with
jobq.worker.executor as a slot thread would, and sends back progress reports and the outcome.
SIGTERM from its worker (stopping a run past its timeout, or cancelled) raises
SystemExit in the task, so that its ``finally`` blocks run; SIGKILL follows if it does
not exit. SIGTERM from anyone else (a platform that signals every process of a service)
and SIGINT (a Ctrl-C reaches the whole process group) are not its to act on: its worker
decides what its children do then. It exits when its worker closes the connection, or
dies; and it is killed (SIGKILL) when its fork server exits, which it does once the worker
is gone (see jobq.pool.fork_server), so that even code that never lets the child's own
threads run dies with the worker.
"""

from __future__ import annotations

import logging
import multiprocessing.forkserver
import os
import queue
import resource
import signal
import threading
import time
from multiprocessing.connection import Connection
from types import FrameType

from jobq.app.loading import load_app
from jobq.db.tasks import Status
from jobq.lifecycle.in_task import PROGRESS
from jobq.pool import fork_server, wire
from jobq.worker import executor, logs
from jobq.worker.executor import Outcome
from jobq.workflows import in_task as workflow_results

#: Seconds between the sends of a run's progress reports to the worker.
PROGRESS_EVERY = 0.5


#: What the child's own thread sends its main thread once its worker sent SIGTERM: a
#: real signal, so that a sleep or a blocking read in the task is interrupted too.
STOP_SIGNAL = signal.SIGUSR1


def main(
    app_path: str,
    database_url: str | None,
    conn: Connection,
    log_setup: tuple[str, str] | None,
    worker_pid: int,
) -> None:
    """Serve the worker (``worker_pid``) at the other end of ``conn`` until it closes it."""
    _let_the_fork_server_go()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(STOP_SIGNAL, _exit_now)
    # Blocked here before any thread starts (they inherit it): only _hear_sigterm takes it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(
        target=_hear_sigterm, args=(worker_pid, threading.get_ident()), name="jobq-child-term",
        daemon=True,
    ).start()  # fmt: skip
    if log_setup is not None:
        logs.configure(*log_setup)
    logging.getLogger("jobq.task").addFilter(_note_end_line)
    if fork_server.ARMED_IN is None:
        logging.getLogger("jobq.worker").warning(
            "worker child %d: its fork server was not started by jobq's process pool; "
            "this child may outlive its worker", os.getpid(),
        )  # fmt: skip
    app = load_app(app_path)
    # Connections the fork server opened (an app module that connects on import) are its
    # own: this process must not share their sockets, nor close them.
    app.store.engine.dispose(close=False)
    if database_url is not None:
        from jobq.app.store import Store  # the worker's --database-url, for in-task reads

        app.store = Store(database_url)
    workflow_results.serve(app.store)
    send_lock = threading.Lock()
    inbox: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    threading.Thread(target=_read, args=(conn, inbox), name="jobq-child-read", daemon=True).start()
    threading.Thread(
        target=_send_progress, args=(conn, send_lock), name="jobq-child-progress", daemon=True
    ).start()
    global _end_logged
    while True:
        task, timeout = wire.read_task(inbox.get())
        _end_logged = False
        definition = app.registry.get(task.name)
        if definition is None:  # the worker checked: only a different app file gets here
            outcome = executor.not_registered(task.name)
        else:
            definition = definition.with_timeout(timeout)
            began = time.monotonic()
            try:
                outcome = executor.run_sync(definition, task.args, task.attempt, task=task)
            except _Stopped:
                raise
            except BaseException as error:  # sys.exit() in a task: the child lives on
                seconds = time.monotonic() - began
                outcome = executor.escaped(definition, task.attempt, task, error, seconds)
        with send_lock:
            _flush_progress(conn)
            conn.send_bytes(_outcome_frame(outcome))


class _Stopped(SystemExit):
    """Its worker sent SIGTERM: the run is being stopped (timeout or cancel)."""


#: Whether the current run's end line is logged (by the executor, in this process). Once
#: it is, the run is over here: a stop arriving then must not kill the child before it
#: sends the outcome, else its worker, seeing it die, would log the run's end again.
_end_logged = False


def _note_end_line(record: logging.LogRecord) -> bool:
    """A filter of the jobq.task logger: notes the run's end line as it is logged."""
    global _end_logged
    if "status" in record.__dict__:  # an end line has a status (jobq.worker.executor.log_end)
        _end_logged = True
    return True


def _exit_now(_signum: int, _frame: FrameType | None) -> None:
    if not _end_logged:  # else the run has ended: its outcome goes to the worker
        raise _Stopped(128 + signal.SIGTERM)


def _let_the_fork_server_go() -> None:
    """Close this child's copy of the fork server's "alive" pipe (multiprocessing hands
    each child one): the fork server exits when no process holds it any more, so while
    a child held it the fork server, and every child it forked, outlived their worker."""
    server = multiprocessing.forkserver._forkserver
    alive_fd = getattr(server, "_forkserver_alive_fd", None)
    if alive_fd is not None:
        os.close(alive_fd)
        server._forkserver_alive_fd = None  # type: ignore[attr-defined]


def _hear_sigterm(worker_pid: int, main_thread: int) -> None:
    """Stop the run in the main thread on SIGTERM from the worker; ignore anyone else's."""
    while True:
        sender = signal.sigwaitinfo({signal.SIGTERM}).si_pid
        if sender == worker_pid:
            signal.pthread_kill(main_thread, STOP_SIGNAL)
            return
        logging.getLogger("jobq.worker").info(
            "worker child %d: SIGTERM from pid %d ignored (its worker decides)",
            os.getpid(), sender,
        )  # fmt: skip


def _outcome_frame(outcome: Outcome) -> bytes:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    try:
        return wire.outcome_frame(outcome, peak)
    except (TypeError, ValueError) as error:  # the executor checked the result: a bug
        failed = Outcome(Status.FAILED, error=f"its outcome could not be sent: {error}")
        return wire.outcome_frame(failed, peak)


def _read(conn: Connection, inbox: queue.SimpleQueue[bytes]) -> None:
    """Pass the worker's frames on; exit the process once the worker closes or dies."""
    try:
        while True:
            inbox.put(conn.recv_bytes())
    except (EOFError, OSError):
        logging.shutdown()
        os._exit(0)  # a run still going is abandoned: its worker is gone or retired us


def _send_progress(conn: Connection, send_lock: threading.Lock) -> None:
    while True:
        time.sleep(PROGRESS_EVERY)
        if PROGRESS:
            with send_lock:
                _flush_progress(conn)


def _flush_progress(conn: Connection) -> None:
    reports = PROGRESS.take()
    if reports:
        conn.send_bytes(wire.progress_frame(reports))
