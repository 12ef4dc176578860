"""Raw TCP to a sandbox port through the server (``GET
/v1/sandboxes/{id}/ports/{port}/tcp`` with ``Upgrade: space-tcp``), and a
local listener that forwards each connection it accepts through such a
tunnel, sync (threads) and async (asyncio)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from typing import Any, Callable, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from . import errors

__all__ = ["PortForward", "AsyncPortForward"]

#: The server's answer to a tunnel request is read up to this many bytes.
MAX_HANDSHAKE = 64 << 10
#: How long the server may take to answer (it may first wake a paused sandbox).
HANDSHAKE_TIMEOUT = 120.0

TUNNEL_UPGRADE = "space-tcp"


def _request(api_url: str, path: str, headers: Mapping[str, str]) -> Tuple[str, int, bool, bytes]:
    u = urlsplit(api_url)
    tls = u.scheme == "https"
    host = u.hostname or "127.0.0.1"
    port = u.port or (443 if tls else 80)
    prefix = u.path.rstrip("/")
    lines = [f"GET {prefix}{path} HTTP/1.1", f"Host: {u.netloc}", "Connection: Upgrade", f"Upgrade: {TUNNEL_UPGRADE}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return host, port, tls, ("\r\n".join(lines) + "\r\n\r\n").encode()


def _parse_answer(head: bytes, body: bytes, what: str) -> None:
    """Raises unless head is a 101 switching to the tunnel."""
    first, _, rest = head.partition(b"\r\n")
    parts = first.split(b" ", 2)
    try:
        status = int(parts[1])
    except (IndexError, ValueError):
        raise errors.TransportError(f"{what}: the server's answer is not HTTP: {errors.clean_text(first.decode('latin-1'), 120)!r}") from None
    if status != 101:
        raise errors.from_response(status, body)
    upgrade = ""
    for line in rest.split(b"\r\n"):
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"upgrade":
            upgrade = v.strip().decode("latin-1")
    if upgrade.lower() != TUNNEL_UPGRADE:
        raise errors.TransportError(f"{what}: the server switched to {upgrade!r}, want {TUNNEL_UPGRADE}")


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            try:
                return max(0, min(int(v.strip()), MAX_HANDSHAKE))
            except ValueError:
                return 0
    return 0


def dial(api_url: str, path: str, headers: Mapping[str, str], what: str) -> socket.socket:
    """Opens the tunnel: a socket carrying the bytes of one TCP connection to the port."""
    host, port, tls, req = _request(api_url, path, headers)
    try:
        raw = socket.create_connection((host, port), timeout=HANDSHAKE_TIMEOUT)
    except OSError as exc:
        raise errors.TransportError(f"{what}: connect to {host}:{port}: {exc}") from exc
    sock: socket.socket = raw
    try:
        if tls:
            ctx = ssl.create_default_context()
            ctx.set_alpn_protocols(["http/1.1"])
            sock = ctx.wrap_socket(raw, server_hostname=host)
        sock.sendall(req)
        # The answer's head is read a byte at a time, so that nothing of what
        # follows a 101 (the guest's first bytes) is read here.
        buf = bytearray()
        while not buf.endswith(b"\r\n\r\n"):
            chunk = sock.recv(1)
            if not chunk:
                raise errors.TransportError(f"{what}: the server closed the connection before answering")
            buf += chunk
            if len(buf) > MAX_HANDSHAKE:
                raise errors.TransportError(f"{what}: the server's answer is larger than {MAX_HANDSHAKE} bytes")
        head, rest = bytes(buf[:-4]), b""
        if not head.startswith(b"HTTP/1.1 101") and not head.startswith(b"HTTP/1.0 101"):
            want = _content_length(head)
            while len(rest) < want:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                rest += chunk
        _parse_answer(head, rest, what)
        sock.settimeout(None)
        return sock
    except BaseException:
        sock.close()
        raise


def _pump(src: Callable[[], bytes], dst: socket.socket) -> None:
    """Copies until src ends, then half-closes dst."""
    try:
        while True:
            data = src()
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


class PortForward:
    """A local TCP listener whose connections reach a sandbox port.

    ``address`` is the ``(host, port)`` it listens on. Use it as a context
    manager, or call :meth:`close`, which also ends the connections it carries.
    """

    def __init__(self, connect: Callable[[], socket.socket], host: str, port: int) -> None:
        self._connect = connect
        self._listener = socket.create_server((host, port))
        self.address: Tuple[str, int] = self._listener.getsockname()[:2]
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._socks: List[socket.socket] = []
        #: The errors of connections that could not be forwarded, newest last.
        self.errors: List[BaseException] = []
        self._thread = threading.Thread(target=self._accept, name="space-forward", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                local, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(local,), daemon=True).start()

    def _track(self, s: socket.socket) -> bool:
        with self._lock:
            if self._closed.is_set():
                return False
            self._socks.append(s)
            return True

    def _serve(self, local: socket.socket) -> None:
        if not self._track(local):
            local.close()
            return
        try:
            remote = self._connect()
        except Exception as exc:  # noqa: BLE001 - any failure is kept in .errors; the local side sees a close
            self.errors.append(exc)
            local.close()
            return
        if not self._track(remote):
            remote.close()
            local.close()
            return
        up = threading.Thread(target=_pump, args=(lambda: local.recv(65536), remote), daemon=True)
        up.start()
        _pump(lambda: remote.recv(65536), local)
        up.join()
        for s in (local, remote):
            s.close()

    def close(self) -> None:
        """Stops listening and ends every forwarded connection."""
        self._closed.set()
        self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "PortForward":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def dial_async(api_url: str, path: str, headers: Mapping[str, str], what: str) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port, tls, req = _request(api_url, path, headers)
    ctx: Any = None
    if tls:
        ctx = ssl.create_default_context()
        ctx.set_alpn_protocols(["http/1.1"])
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=ctx, limit=MAX_HANDSHAKE), HANDSHAKE_TIMEOUT)
    except (OSError, asyncio.TimeoutError) as exc:
        raise errors.TransportError(f"{what}: connect to {host}:{port}: {exc}") from exc
    try:
        writer.write(req)
        await writer.drain()
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HANDSHAKE_TIMEOUT)
        except asyncio.IncompleteReadError as exc:
            raise errors.TransportError(f"{what}: the server closed the connection before answering") from exc
        except asyncio.LimitOverrunError as exc:
            raise errors.TransportError(f"{what}: the server's answer is larger than {MAX_HANDSHAKE} bytes") from exc
        head = head[:-4]
        body = b""
        if not head.startswith(b"HTTP/1.1 101") and not head.startswith(b"HTTP/1.0 101"):
            try:
                body = await asyncio.wait_for(reader.readexactly(_content_length(head)), HANDSHAKE_TIMEOUT)
            except asyncio.IncompleteReadError as exc:
                body = exc.partial
        _parse_answer(head, body, what)
        return reader, writer
    except BaseException:
        writer.close()
        raise


async def _apump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await src.read(65536)
            if not data:
                break
            dst.write(data)
            await dst.drain()
    except (OSError, asyncio.CancelledError):
        pass
    finally:
        try:
            if dst.can_write_eof():
                dst.write_eof()
        except OSError:
            pass


class AsyncPortForward:
    """:class:`PortForward` for asyncio: ``async with await sb.forward(port) as fwd``."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._server: Optional[asyncio.AbstractServer] = None
        self._tasks: "set[asyncio.Task[None]]" = set()
        self.address: Tuple[str, int] = ("", 0)
        self.errors: List[BaseException] = []

    async def start(self, host: str, port: int) -> "AsyncPortForward":
        """Listens on ``host``:``port`` (0: any free port; see ``address``)."""
        self._server = await asyncio.start_server(self._serve, host, port)
        self.address = self._server.sockets[0].getsockname()[:2]
        return self

    async def _serve(self, lr: asyncio.StreamReader, lw: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            try:
                rr, rw = await self._connect()
            except Exception as exc:  # noqa: BLE001 - any failure is kept in .errors; the local side sees a close
                self.errors.append(exc)
                return
            try:
                await asyncio.gather(_apump(lr, rw), _apump(rr, lw))
            finally:
                rw.close()
        finally:
            lw.close()
            if task is not None:
                self._tasks.discard(task)

    async def aclose(self) -> None:
        """Stops listening and ends every forwarded connection."""
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> "AsyncPortForward":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
