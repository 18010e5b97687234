"""A TCP forwarder between jobq and a real database server, for outage tests.

Processes reach the server through 127.0.0.1:``port``. ``cut()`` resets every connection
through it and refuses new ones, as a failed network does, until ``restore()``;
``hang()`` lets nothing pass any more, either way, on open connections or new ones (held,
never answered), as a server that stopped answering. The real server stays up for the
other tests meanwhile.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import sqlalchemy as sa


class Forwarder:
    """Forwards 127.0.0.1:``port`` to ``host``:``target_port`` (see the module)."""

    def __init__(self, host: str, target_port: int) -> None:
        self.target = (host, target_port)
        self.open = threading.Event()
        self.open.set()
        self.hanging = threading.Event()
        #: Connections reset on arrival while cut.
        self.refused = 0
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, name="forwarder", daemon=True).start()

    def url(self, db_url: str) -> str:
        """``db_url`` with its host and port this forwarder's."""
        through = sa.make_url(db_url).set(host="127.0.0.1", port=self.port)
        return through.render_as_string(hide_password=False)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed by close()
            if self.hanging.is_set():
                with self._lock:
                    self._held.append(client)  # held open, never answered
                continue
            if not self.open.is_set():
                with self._lock:
                    self.refused += 1
                _reset(client)
                continue
            server = socket.create_connection(self.target, timeout=5)
            server.settimeout(None)
            with self._lock:
                self._pairs.append((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                if not self.hanging.is_set():
                    sink.sendall(data)
        if not self.hanging.is_set():
            _reset(sink)

    def cut(self) -> None:
        """Reset every connection through it; refuse new ones until restore()."""
        self.open.clear()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                _reset(sock)

    def restore(self) -> None:
        self.open.set()

    def hang(self) -> None:
        """From now on nothing passes: open connections and new ones go unanswered."""
        self.hanging.set()

    def close(self) -> None:
        self.hanging.clear()
        self.cut()
        self._listener.close()
        with self._lock:
            held, self._held = self._held, []
        for sock in held:
            _reset(sock)


@contextmanager
def forwarding(db_url: str) -> Iterator[Forwarder]:
    """A Forwarder to ``db_url``'s server, closed afterwards."""
    url = sa.make_url(db_url)
    forwarder = Forwarder(url.host or "127.0.0.1", url.port or 5432)
    try:
        yield forwarder
    finally:
        forwarder.close()


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as a failing network does, not a polite FIN."""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with suppress(OSError):
        sock.close()
