"""Network namespaces for scale_out.py: worker groups on "hosts" of their own.

Each namespace is joined to the host by a veth pair whose two ends have loopback-range
addresses: namespace k gets 127.77.k.0/30, ``127.77.k.1`` on the host's end (where the
benchmark's PostgreSQL and PgBouncer listen) and ``127.77.k.2`` on the namespace's. Linux
drops packets to or from 127/8 on any interface but lo unless ``route_localnet`` is set
on it, so it is set on both ends (on them only, never on ``all``). The host's local and
main routing tables are one trie while no policy rule is added, so the /30 route of the
veth, the longer prefix, wins over ``local 127.0.0.0/8`` and a reply to 127.77.k.2 leaves
by the veth; ``check_tcp`` proves a connection works before anything is measured.

Names: namespaces ``jobqbench-<pid>-<k>``, host ends ``jqb<pid>-<k>`` (15 characters at
most, as Linux wants), ``veth0`` inside. At most ``MAX_NAMESPACES``. They are removed at
the end (``Namespaces.remove``: called by the context manager, by atexit, and, through
``exit_on_signals``, on SIGTERM, SIGINT and SIGHUP); deleting a namespace deletes both ends
of its veth. Leftovers of earlier runs whose process is gone are removed at start.
Needs root.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import FrameType

from benchmarks.harness import log

PREFIX = "jobqbench"
MAX_NAMESPACES = 16
NET = "127.77"  # 127.77.<k>.0/30 for namespace k
INSIDE = "veth0"  # the namespace's end of its veth (names are per namespace)
COMMAND_TIMEOUT = 15.0  # seconds any one `ip` or `sysctl` command may take
_NAMESPACE = re.compile(rf"^{PREFIX}-(\d+)-(\d+)$")
_HOST_END = re.compile(r"^jqb(\d+)-(\d+)$")


@dataclass(frozen=True)
class Namespace:
    """One namespace and the two ends of its veth."""

    name: str
    host_end: str  # the veth's end on the host
    host_address: str  # 127.77.k.1: what the namespace's workers connect to
    address: str  # 127.77.k.2: the namespace's own

    def exec(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.name, *argv]


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command (``ip``, ``sysctl``) with a deadline; raise on failure if ``check``."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done


def _alive(pid: int) -> bool:
    """Whether a process of that pid exists (a run that is still going)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers() -> list[str]:
    """Delete namespaces and host veth ends of earlier runs whose process is gone (a run
    killed with SIGKILL cannot clean up): what was removed. Live runs' are left alone."""
    removed = []
    for line in run("ip", "netns", "list").stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = _NAMESPACE.match(name)
        if match and not _alive(int(match.group(1))):
            run("ip", "netns", "del", name, check=False)
            removed.append(name)
    for line in run("ip", "-o", "link", "show").stdout.splitlines():
        fields = line.split(":")
        end = fields[1].strip().split("@")[0] if len(fields) > 1 else ""
        match = _HOST_END.match(end)
        if match and not _alive(int(match.group(1))):
            run("ip", "link", "del", end, check=False)
            removed.append(end)
    return removed


def _addresses_in_use() -> list[str]:
    """Addresses of 127.77/16 already on the host's interfaces (another live run's)."""
    out = run("ip", "-o", "-4", "addr", "show").stdout
    return re.findall(rf"inet ({re.escape(NET)}\.\d+\.\d+)/", out)


class Namespaces:
    """``count`` namespaces of this process, made by ``create`` and removed by ``remove``
    (idempotent; registered with atexit as soon as the first is made)."""

    def __init__(self, count: int) -> None:
        if not 1 <= count <= MAX_NAMESPACES:
            raise ValueError(f"1 to {MAX_NAMESPACES} namespaces, not {count}")
        self.count = count
        self.made: list[Namespace] = []
        self._registered = False

    def create(self) -> list[Namespace]:
        """Make the namespaces and their veths; they are all up when this returns."""
        if busy := _addresses_in_use():
            raise RuntimeError(f"{NET}.0.0/16 is in use on this host ({busy[0]}...): another run?")
        if not self._registered:
            atexit.register(self.remove)
            self._registered = True
        try:
            self._make(os.getpid())
        except BaseException:
            self.remove()  # __exit__ does not run when __enter__ raises
            raise
        return list(self.made)

    def _make(self, pid: int) -> None:
        for k in range(self.count):
            ns = Namespace(f"{PREFIX}-{pid}-{k}", f"jqb{pid}-{k}", f"{NET}.{k}.1", f"{NET}.{k}.2")
            run("ip", "netns", "add", ns.name)
            self.made.append(ns)  # from here on remove() deletes it
            run("ip", "link", "add", ns.host_end, "type", "veth", "peer", "name", INSIDE,
                "netns", ns.name)  # fmt: skip
            run("ip", "addr", "add", f"{ns.host_address}/30", "dev", ns.host_end)
            run("sysctl", "-qw", f"net.ipv4.conf.{ns.host_end}.route_localnet=1")
            run("ip", "link", "set", ns.host_end, "up")
            run("ip", "-n", ns.name, "addr", "add", f"{ns.address}/30", "dev", INSIDE)
            run(*ns.exec(["sysctl", "-qw", f"net.ipv4.conf.{INSIDE}.route_localnet=1"]))
            run("ip", "-n", ns.name, "link", "set", INSIDE, "up")
            run("ip", "-n", ns.name, "link", "set", "lo", "up")

    def remove(self) -> None:
        """Delete every namespace made (and so its veth); never raises."""
        while self.made:
            ns = self.made.pop()
            with contextlib.suppress(Exception):
                run("ip", "netns", "del", ns.name, check=False)
                # Gone with the namespace already; this is for a half-made pair.
                if run("ip", "link", "show", ns.host_end, check=False).returncode == 0:
                    run("ip", "link", "del", ns.host_end, check=False)

    def __enter__(self) -> list[Namespace]:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.remove()


def check_tcp(namespaces: Sequence[Namespace], ports: Sequence[int], timeout: float = 5) -> None:
    """Raise unless a TCP connection from each namespace to its host address reaches each
    of ``ports`` (one short Python process a namespace)."""
    probe = (
        "import socket, sys\n"
        "for port in sys.argv[2:]:\n"
        f"    socket.create_connection((sys.argv[1], int(port)), timeout={timeout}).close()\n"
    )
    for ns in namespaces:
        argv = ns.exec([sys.executable, "-c", probe, ns.host_address, *map(str, ports)])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=4 * timeout)
        if done.returncode != 0:
            raise RuntimeError(
                f"{ns.name} cannot reach {ns.host_address} on {ports}: {done.stderr.strip()}"
            )


def exit_on_signals() -> None:
    """Turn SIGTERM, SIGINT and SIGHUP into SystemExit, so that every ``finally`` (workers
    stopped, servers stopped, namespaces removed) runs before the process ends."""

    def leave(signum: int, frame: FrameType | None) -> None:
        log(f"signal {signal.Signals(signum).name}: cleaning up")
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, leave)


@contextlib.contextmanager
def namespaces(count: int) -> Iterator[list[Namespace]]:
    """``count`` namespaces for the length of the block, after removing dead runs' ones."""
    if removed := remove_leftovers():
        log(f"removed leftovers of earlier runs: {', '.join(removed)}")
    with Namespaces(count) as made:
        yield made
