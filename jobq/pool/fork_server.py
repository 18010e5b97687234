"""What the process pool's fork server does for its children: each dies with it.

The fork server (multiprocessing's, started by the worker) forks every pool child. This
module is the first of its preload (ProcessPool): imported there, it has every child it
forks ask the kernel for SIGKILL once the fork server dies (Linux: prctl
PR_SET_PDEATHSIG). The fork server exits once its worker is gone (its "alive" pipe
reads EOF: the children close their copies, jobq.pool.child), so a child dies with its
worker even in C code that never lets its own threads run, such as
``sum(range(4 * 10**9))``.

The signal comes when the *thread* that forked the child ends: the fork server forks
from its main thread, which lives as long as it does. A fork server that died before the
child's prctl is caught by comparing the child's parent with the process that forked it.

Imported anywhere else (the worker, a tool listing modules), it does nothing: only a
fork server's main() arms it, so no other process's forks are touched.
"""

from __future__ import annotations

import ctypes
import multiprocessing.forkserver
import os
import signal
import sys

#: prctl's option that sets the signal a process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1

#: The pid of the fork server this module was armed in, or None (not a fork server).
ARMED_IN: int | None = None
# The pid of the process that is forking, as the fork server's before-fork hook saw it.
_forking_pid = 0


def _imported_by_fork_server() -> bool:
    """Whether multiprocessing's fork server main() is importing this module (its preload)."""
    frame = sys._getframe(1)
    main_code = multiprocessing.forkserver.main.__code__
    while frame is not None:
        if frame.f_code is main_code:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _before_fork() -> None:
    global _forking_pid
    _forking_pid = os.getpid()


def _die_with_the_fork_server() -> None:
    """In a child just forked: SIGKILL when the fork server dies; exit now if it has."""
    if _forking_pid != ARMED_IN:
        return  # a fork made by a task in a child: not a pool child
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != _forking_pid:
        os._exit(1)  # the fork server died before the prctl: the signal will never come


_LIBC: ctypes.CDLL | None = None
if _imported_by_fork_server():
    ARMED_IN = os.getpid()
    if sys.platform.startswith("linux"):
        _LIBC = ctypes.CDLL(None, use_errno=True)
    os.register_at_fork(before=_before_fork, after_in_child=_die_with_the_fork_server)
