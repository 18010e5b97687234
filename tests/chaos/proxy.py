"""A TCP proxy on loopback that cuts the connections passing through it at random.

Workers reach PostgreSQL through it; every cut is an abrupt reset of both sides, as a
failing network or a restarted load balancer would give. It only ever listens on and
connects to 127.0.0.1, and it stops cutting (and then stops altogether) when told to.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from contextlib import suppress


class CuttingProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target_port``; ``cutting`` turns cuts on."""

    def __init__(
        self, target_port: int, *, mean_gap: float = 0.5, seed: int = 0, cut_for: float = 3600
    ) -> None:
        self.target_port = target_port
        # However the run goes, cutting ends this many seconds from now.
        self.cut_until = time.monotonic() + cut_for
        self.mean_gap = mean_gap  # mean seconds between two cuts
        self.cutting = threading.Event()
        self.cuts = 0
        self.connections = 0
        self._rng = random.Random(seed)
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._threads = [
            threading.Thread(target=self._accept, name="proxy-accept", daemon=True),
            threading.Thread(target=self._cut_at_random, name="proxy-cut", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed by stop()
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                server.settimeout(None)
            except OSError:
                _reset(client)  # the database is down: so is the way to it
                continue
            with self._lock:
                self._pairs.append((client, server))
                self.connections += 1
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        self._close_pair(source)

    def _cut_at_random(self) -> None:
        while not self._stopped.wait(self._rng.expovariate(1 / self.mean_gap)):
            if not self.cutting.is_set() or time.monotonic() > self.cut_until:
                continue
            with self._lock:
                pair = self._rng.choice(self._pairs) if self._pairs else None
            if pair is not None:
                self.cuts += 1
                self._close_pair(pair[0])

    def _close_pair(self, either: socket.socket) -> None:
        with self._lock:
            pair = next((p for p in self._pairs if either in p), None)
            if pair is None:
                return
            self._pairs.remove(pair)
        for sock in pair:
            _reset(sock)

    def stop(self) -> None:
        self._stopped.set()
        self._listener.close()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                _reset(sock)


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset, not a polite FIN: the peer sees the connection fail."""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    # SHUT_RD wakes the pump thread blocked in recv() on it, sending nothing; the socket
    # then goes when that thread lets go of it, with the reset the linger asks for.
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with suppress(OSError):
        sock.close()
