"""Who a request comes from, whether it came over HTTPS, and the slowing down of clients
that keep getting the token wrong.

- The client is the peer's address, unless that peer is a proxy the dashboard was told to
  trust (``trusted_proxies``): then the address its X-Forwarded-For header names (the last
  one not itself a trusted proxy), and X-Forwarded-Proto says whether the browser used
  HTTPS. Another peer's X-Forwarded-* headers are ignored: anyone can send them.
- A client's first FREE_FAILURES wrong tokens (sign-in form or Bearer header) cost it
  nothing; each one after shuts it out for twice as long as the one before (1 s, 2 s,
  4 s ... up to LONGEST_WAIT), during which its attempts, right or wrong, get 429
  with Retry-After and are not checked. A client forgets its failures FORGET_SECONDS
  after its last one. Each failure is logged with the client and the count, never the
  token sent.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.types import Scope

log = logging.getLogger("jobq.dashboard")

#: Wrong tokens a client may send before it has to wait.
FREE_FAILURES = 5
#: The longest a client is shut out after a wrong token, in seconds.
LONGEST_WAIT = 300.0
#: Seconds after its last wrong token that a client's failures are forgotten.
FORGET_SECONDS = 900.0
#: Clients whose failures are kept at most (the oldest forgotten first).
MOST_CLIENTS = 100_000

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def proxy_networks(proxies: Sequence[str]) -> list[Network]:
    """The trusted proxies, each an address or a network ('10.0.0.0/8'); a clear error
    naming an entry that is neither."""
    networks = []
    for entry in proxies:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"trusted proxy {entry!r} is not an IP address or network (such as "
                "127.0.0.1 or 10.0.0.0/8)"
            ) from None
    return networks


@dataclass(frozen=True)
class Origin:
    """Where a request came from: the client's address, and whether it used HTTPS."""

    client: str
    https: bool


def _trusted(address: str, networks: Sequence[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return False
    return any(ip in network for network in networks)


def origin(scope: Scope, networks: Sequence[Network]) -> Origin:
    """The client and scheme of the request ``scope``, as trusted proxies say (see the
    module's docstring)."""
    peer = scope.get("client")
    address = str(peer[0]) if peer else "unknown"
    https = scope.get("scheme") == "https"
    if not networks or not _trusted(address, networks):
        return Origin(address, https)
    headers = Headers(scope=scope)
    forwarded = [hop.strip() for hop in headers.get("x-forwarded-for", "").split(",")]
    for hop in reversed([hop for hop in forwarded if hop]):
        address = hop
        if not _trusted(hop, networks):
            break
    proto = headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return Origin(address, https or proto == "https")


@dataclass
class _Record:
    failures: int
    shut_until: float  # time.monotonic()
    last: float


class Throttle:
    """Wrong tokens counted per client, and how long each must wait (module docstring):
    after ``free`` wrong tokens, ``first_wait`` seconds, doubled at each one more."""

    def __init__(
        self,
        *,
        free: int = FREE_FAILURES,
        first_wait: float = 1.0,
        longest_wait: float = LONGEST_WAIT,
    ) -> None:
        if free < 0 or not 0 < first_wait <= longest_wait:
            raise ValueError(
                f"a Throttle needs free >= 0 and 0 < first_wait <= longest_wait, not {free}, "
                f"{first_wait}, {longest_wait}"
            )
        self.free = free
        self.first_wait = first_wait
        self.longest_wait = longest_wait
        self._clients: dict[str, _Record] = {}
        self._lock = threading.Lock()

    def wait(self, client: str) -> float:
        """Seconds ``client`` must wait before a token it sends is checked (0: none)."""
        now = time.monotonic()
        with self._lock:
            record = self._clients.get(client)
            if record is None:
                return 0.0
            if now - record.last > FORGET_SECONDS:
                del self._clients[client]
                return 0.0
            return max(record.shut_until - now, 0.0)

    def failed(self, client: str, where: str) -> None:
        """Count a wrong token of ``client`` (sent ``where``: 'sign-in', 'bearer'), and log it."""
        now = time.monotonic()
        with self._lock:
            record = self._clients.pop(client, None)
            if record is None or now - record.last > FORGET_SECONDS:
                record = _Record(0, now, now)
            record.failures += 1
            record.last = now
            over = record.failures - self.free
            wait = 0.0 if over <= 0 else min(self.first_wait * 2.0 ** (over - 1), self.longest_wait)
            record.shut_until = now + wait
            while len(self._clients) >= MOST_CLIENTS:
                del self._clients[next(iter(self._clients))]
            self._clients[client] = record  # reinserted: the most recent last
        log.warning(
            "dashboard: wrong token (%s) from %s, failure %d in a row%s",
            where, client, record.failures,
            f"; it waits {wait:g} s before its next try" if wait else "",
        )  # fmt: skip

    def succeeded(self, client: str) -> None:
        """Forget ``client``'s failures: it sent the right token."""
        with self._lock:
            self._clients.pop(client, None)
