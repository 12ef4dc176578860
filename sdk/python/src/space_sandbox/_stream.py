"""Streaming exec and file watches over WebSockets (``GET /v1/sandboxes/{id}/exec``
and ``…/files/watch``), sync and async."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Dict, Iterator, Mapping, Optional, Union

from websockets.asyncio.client import ClientConnection as AsyncConnection
from websockets.asyncio.client import connect as async_connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, InvalidStatus, WebSocketException
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as sync_connect

from . import errors
from .models import FileEvent

__all__ = ["Output", "StreamError", "ExecStream", "AsyncExecStream", "FileWatch", "AsyncFileWatch"]

#: One WebSocket message from the server is at most this large.
MAX_STREAM_MESSAGE = 4 << 20
#: The most stdin bytes sent in one message (about 22 KB of base64).
STDIN_CHUNK = 16 << 10

OutputCallback = Callable[[bytes], Any]


class StreamError(errors.SpaceError):
    """The server ended a stream with an error (``{"type": "error"}``)."""


@dataclass
class Output:
    """A piece of a command's output: ``stream`` is ``"stdout"`` or ``"stderr"``."""

    stream: str
    data: bytes


def ws_url(api_url: str, path: str) -> str:
    if api_url.startswith("https://"):
        return "wss://" + api_url[len("https://"):] + path
    return "ws://" + api_url[len("http://"):] + path


def _handshake_error(exc: BaseException, what: str) -> errors.SpaceError:
    if isinstance(exc, InvalidStatus):
        resp = exc.response
        return errors.from_response(resp.status_code, bytes(resp.body or b""))
    return errors.TransportError(f"{what}: open WebSocket: {exc}")


def start_message(body: Mapping[str, Any], tty: bool, cols: Optional[int], rows: Optional[int]) -> Dict[str, Any]:
    """The exec start message: the run-to-completion body's cmd, env, cwd and
    user, and the terminal."""
    if body.get("stdin") or body.get("timeout"):
        raise ValueError("a streaming exec takes its stdin with send_stdin and ends with signal or close")
    msg: Dict[str, Any] = {k: v for k, v in body.items() if k in ("cmd", "env", "cwd", "user")}
    for name, v in (("cols", cols), ("rows", rows)):
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535:
                raise ValueError(f"{name} {v!r}: want 1..65535")
            if not tty:
                raise ValueError(f"{name}: a terminal size needs tty=True")
            msg[name] = v
    if tty:
        msg["tty"] = True
    return msg


def signal_number(sig: int) -> int:
    n = int(sig)
    if not 1 <= n <= 64:
        raise ValueError(f"signal {sig!r}: want a signal number 1..64 (signal.SIGTERM, ...)")
    return n


def _stdin_chunks(data: Union[bytes, str]) -> Iterator[str]:
    b = data.encode() if isinstance(data, str) else bytes(data)
    for i in range(0, len(b), STDIN_CHUNK):
        yield json.dumps({"type": "stdin", "data": base64.b64encode(b[i : i + STDIN_CHUNK]).decode()})


class _Decoder:
    """The receiving side of an exec stream's protocol, shared by both clients."""

    def __init__(self) -> None:
        self.pid = 0
        self.exit_code: Optional[int] = None
        self.done = False

    def handle(self, msg: Union[str, bytes]) -> Optional[Output]:
        if isinstance(msg, bytes):
            return None
        try:
            m = json.loads(msg)
        except ValueError as exc:
            self.done = True
            raise StreamError(f"exec stream: malformed message from server: {exc}") from exc
        if not isinstance(m, dict):
            return None
        t = m.get("type")
        if t == "started":
            pid = m.get("pid")
            self.pid = pid if isinstance(pid, int) else 0
        elif t in ("stdout", "stderr"):
            data = m.get("data")
            if isinstance(data, str) and data:
                return Output(t, base64.b64decode(data))
        elif t == "exit":
            self.done = True
            code = m.get("exit_code")
            if not isinstance(code, int):
                raise StreamError("exec stream: exit message without exit_code")
            self.exit_code = code
        elif t == "error":
            self.done = True
            msg_text = m.get("message")
            raise StreamError(errors.clean_text(msg_text if isinstance(msg_text, str) else "stream error", 1024))
        # Unknown types are skipped: newer servers may send more.
        return None

    def closed(self, exc: BaseException) -> errors.SpaceError:
        self.done = True
        return errors.TransportError(f"exec stream ended before the command exited: {exc}")


class ExecStream:
    """A command running in a sandbox over a WebSocket.

    Iterate it for its :class:`Output` as it comes, or give ``on_stdout`` /
    ``on_stderr`` callbacks and call :meth:`wait`. :meth:`send_stdin`,
    :meth:`close_stdin`, :meth:`signal` and :meth:`resize` may be called from
    another thread while one reads. Closing the stream (or leaving its
    ``with`` block) before the command exits makes the server kill it.
    """

    def __init__(self, conn: ClientConnection, on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback]) -> None:
        self._conn = conn
        self._dec = _Decoder()
        self._on = {"stdout": on_stdout, "stderr": on_stderr}
        self._stdin_closed = False

    @property
    def pid(self) -> int:
        """The command's process id in the sandbox (0 until the server said)."""
        return self._dec.pid

    @property
    def exit_code(self) -> Optional[int]:
        """The exit code once the command exited, else None."""
        return self._dec.exit_code

    def _next(self, timeout: Optional[float]) -> Optional[Output]:
        try:
            msg = self._conn.recv(timeout=timeout)
        except TimeoutError:
            raise
        except ConnectionClosed as exc:
            raise self._dec.closed(exc) from exc
        out = self._dec.handle(msg)
        if self._dec.done:
            self._conn.close()
        return out

    def __iter__(self) -> Iterator[Output]:
        while not self._dec.done:
            out = self._next(None)
            if out is not None:
                yield out

    def wait(self, timeout: Optional[float] = None) -> int:
        """Reads until the command exits, handing output to the callbacks (or
        dropping it), and returns the exit code. :class:`~space_sandbox.WaitTimeout`
        after ``timeout`` seconds leaves the command running."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._dec.done:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                out = self._next(left)
            except TimeoutError as exc:
                raise errors.WaitTimeout(f"the command is still running after {timeout:g}s") from exc
            if out is not None:
                cb = self._on.get(out.stream)
                if cb is not None:
                    cb(out.data)
        assert self._dec.exit_code is not None
        return self._dec.exit_code

    def _send(self, text: str, what: str) -> None:
        try:
            self._conn.send(text)
        except (ConnectionClosed, WebSocketException) as exc:
            raise errors.TransportError(f"exec stream: {what}: {exc}") from exc

    def send_stdin(self, data: Union[bytes, str]) -> None:
        """Writes to the command's stdin (text as UTF-8)."""
        for msg in _stdin_chunks(data):
            self._send(msg, "send stdin")

    def close_stdin(self) -> None:
        """Closes the command's stdin (it reads EOF). Later calls do nothing."""
        if not self._stdin_closed:
            self._stdin_closed = True
            self._send(json.dumps({"type": "close_stdin"}), "close stdin")

    def signal(self, sig: int) -> None:
        """Sends a signal (``signal.SIGTERM``, ...) to the command."""
        self._send(json.dumps({"type": "signal", "signal": signal_number(sig)}), "send signal")

    def kill(self) -> None:
        """Sends SIGKILL to the command."""
        self.signal(9)

    def resize(self, cols: int, rows: int) -> None:
        """Tells the command's terminal its new size (``tty=True`` streams)."""
        start_message({}, True, cols, rows)
        self._send(json.dumps({"type": "resize", "cols": cols, "rows": rows}), "resize")

    def close(self) -> None:
        """Ends the stream; the server kills a command still running."""
        self._conn.close()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncExecStream:
    """:class:`ExecStream` for asyncio: ``async for out in stream``, ``await stream.wait()``."""

    def __init__(self, conn: AsyncConnection, on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback]) -> None:
        self._conn = conn
        self._dec = _Decoder()
        self._on = {"stdout": on_stdout, "stderr": on_stderr}
        self._stdin_closed = False

    @property
    def pid(self) -> int:
        """The command's process id in the sandbox (0 until the server said)."""
        return self._dec.pid

    @property
    def exit_code(self) -> Optional[int]:
        """The exit code once the command exited, else None."""
        return self._dec.exit_code

    async def _next(self) -> Optional[Output]:
        try:
            msg = await self._conn.recv()
        except ConnectionClosed as exc:
            raise self._dec.closed(exc) from exc
        out = self._dec.handle(msg)
        if self._dec.done:
            await self._conn.close()
        return out

    async def __aiter__(self) -> AsyncIterator[Output]:
        while not self._dec.done:
            out = await self._next()
            if out is not None:
                yield out

    async def wait(self, timeout: Optional[float] = None) -> int:
        """Reads until the command exits and returns the exit code; see :meth:`ExecStream.wait`."""

        async def drain() -> None:
            while not self._dec.done:
                out = await self._next()
                if out is not None:
                    cb = self._on.get(out.stream)
                    if cb is not None:
                        cb(out.data)

        try:
            await asyncio.wait_for(drain(), timeout)
        except asyncio.TimeoutError as exc:
            raise errors.WaitTimeout(f"the command is still running after {timeout:g}s") from exc
        assert self._dec.exit_code is not None
        return self._dec.exit_code

    async def _send(self, text: str, what: str) -> None:
        try:
            await self._conn.send(text)
        except (ConnectionClosed, WebSocketException) as exc:
            raise errors.TransportError(f"exec stream: {what}: {exc}") from exc

    async def send_stdin(self, data: Union[bytes, str]) -> None:
        """Writes to the command's stdin (text as UTF-8)."""
        for msg in _stdin_chunks(data):
            await self._send(msg, "send stdin")

    async def close_stdin(self) -> None:
        """Closes the command's stdin (it reads EOF). Later calls do nothing."""
        if not self._stdin_closed:
            self._stdin_closed = True
            await self._send(json.dumps({"type": "close_stdin"}), "close stdin")

    async def signal(self, sig: int) -> None:
        """Sends a signal (``signal.SIGTERM``, ...) to the command."""
        await self._send(json.dumps({"type": "signal", "signal": signal_number(sig)}), "send signal")

    async def kill(self) -> None:
        """Sends SIGKILL to the command."""
        await self.signal(9)

    async def resize(self, cols: int, rows: int) -> None:
        """Tells the command's terminal its new size (``tty=True`` streams)."""
        start_message({}, True, cols, rows)
        await self._send(json.dumps({"type": "resize", "cols": cols, "rows": rows}), "resize")

    async def aclose(self) -> None:
        """Ends the stream; the server kills a command still running."""
        await self._conn.close()

    async def __aenter__(self) -> "AsyncExecStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _event(msg: Union[str, bytes]) -> Optional[FileEvent]:
    if isinstance(msg, bytes):
        return None
    try:
        m = json.loads(msg)
    except ValueError as exc:
        raise StreamError(f"watch: malformed event from server: {exc}") from exc
    return FileEvent.from_dict(m) if isinstance(m, dict) else None


class FileWatch:
    """Changes under a watched path, as :class:`FileEvent` s; iterate it, and close it when done."""

    def __init__(self, conn: ClientConnection) -> None:
        self._conn = conn

    def next(self, timeout: Optional[float] = None) -> Optional[FileEvent]:
        """The next event; None when the server ended the watch.
        :class:`~space_sandbox.WaitTimeout` when none came within ``timeout`` seconds."""
        while True:
            try:
                msg = self._conn.recv(timeout=timeout)
            except TimeoutError as exc:
                raise errors.WaitTimeout(f"no file event within {timeout:g}s") from exc
            except ConnectionClosedOK:
                return None
            except ConnectionClosed as exc:
                raise errors.TransportError(f"watch stream ended: {exc}") from exc
            ev = _event(msg)
            if ev is not None:
                return ev

    def __iter__(self) -> Iterator[FileEvent]:
        while True:
            ev = self.next()
            if ev is None:
                return
            yield ev

    def close(self) -> None:
        """Ends the watch."""
        self._conn.close()

    def __enter__(self) -> "FileWatch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncFileWatch:
    """:class:`FileWatch` for asyncio."""

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def next(self, timeout: Optional[float] = None) -> Optional[FileEvent]:
        """The next event; None when the server ended the watch.
        :class:`~space_sandbox.WaitTimeout` when none came within ``timeout`` seconds."""
        while True:
            try:
                msg = await asyncio.wait_for(self._conn.recv(), timeout)
            except asyncio.TimeoutError as exc:
                raise errors.WaitTimeout(f"no file event within {timeout:g}s") from exc
            except ConnectionClosedOK:
                return None
            except ConnectionClosed as exc:
                raise errors.TransportError(f"watch stream ended: {exc}") from exc
            ev = _event(msg)
            if ev is not None:
                return ev

    async def __aiter__(self) -> AsyncIterator[FileEvent]:
        while True:
            ev = await self.next()
            if ev is None:
                return
            yield ev

    async def aclose(self) -> None:
        """Ends the watch."""
        await self._conn.close()

    async def __aenter__(self) -> "AsyncFileWatch":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def open_sync(api_url: str, path: str, headers: Mapping[str, str], what: str) -> ClientConnection:
    try:
        return sync_connect(ws_url(api_url, path), additional_headers=dict(headers), max_size=MAX_STREAM_MESSAGE, open_timeout=30)
    except (InvalidStatus, WebSocketException, OSError, TimeoutError) as exc:
        raise _handshake_error(exc, what) from exc


async def open_async(api_url: str, path: str, headers: Mapping[str, str], what: str) -> AsyncConnection:
    try:
        return await async_connect(ws_url(api_url, path), additional_headers=dict(headers), max_size=MAX_STREAM_MESSAGE, open_timeout=30)
    except (InvalidStatus, WebSocketException, OSError, TimeoutError, asyncio.TimeoutError) as exc:
        raise _handshake_error(exc, what) from exc

