"""jobq.pool.fork_server arms only in a fork server: imported anywhere else (here, by
pytest), it leaves that process's forks alone. (That a pool child dies with its worker is
tests/acceptance/test_pool_worker_death.py's.)"""

from __future__ import annotations

import ctypes
import os
import sys

import pytest

from jobq.pool import fork_server

#: prctl's option that reads the calling process's parent-death signal (linux/prctl.h).
PR_GET_PDEATHSIG = 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_imported_outside_a_fork_server_it_leaves_forks_alone() -> None:
    assert fork_server.ARMED_IN is None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its parent-death signal, and exit at once
        signal_number = ctypes.c_int(-1)
        ctypes.CDLL(None).prctl(PR_GET_PDEATHSIG, ctypes.byref(signal_number), 0, 0, 0)
        os.write(write_end, str(signal_number.value).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as reported:
        assert reported.read() == "0"  # none: it does not die with this process
    os.waitpid(pid, 0)
