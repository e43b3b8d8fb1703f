"""A TCP proxy in front of PostgreSQL that can lose the server's replies and cut connections.

It plays the network between a worker and its database: statements still reach the server and
run there, but their results never come back, as when a link dies after a request went out.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    """Forwards 127.0.0.1:<port> to PostgreSQL; ``drop_replies`` and ``cut()`` break it.

    ``drop_replies``: ``None`` forwards everything; ``"all"`` loses every reply from now on
    (a statement that committed on the server, whose client never learns it).
    """

    def __init__(self, target: tuple[str, int] = ("127.0.0.1", 5432), port: int = 0) -> None:
        self.target = target
        self.drop_replies: str | None = None
        # port: 0 picks a free one; a closed proxy's port brings "the database" back
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._closed:
                client.close()
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, reply: bool) -> None:
        try:
            while data := src.recv(65536):
                if reply and self.drop_replies == "all":
                    continue  # the reply is lost on the way
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Break every connection through the proxy (both ends see it closed)."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        """Stop accepting and cut what is open."""
        self._closed = True
        # shutdown() wakes the thread blocked in accept(); close() alone leaves the socket
        # listening until that call returns, and the next connection would still get through
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self.cut()
