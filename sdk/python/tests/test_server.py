"""Integration tests: the SDK against a real `space server --dev`.

python_test.go starts the server and runs this file with SPACE_API_URL,
SPACE_API_KEY (the admin key) and SPACE_SDK_TEST_SERVER=1 set. The sandboxes
are namespace sandboxes of the minimal (busybox) template.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import shutil
import time
import tracemalloc
import uuid
from typing import AsyncIterator, Iterator, Optional

import pytest

import space_sandbox as ss

pytestmark = pytest.mark.skipif(
    os.environ.get("SPACE_SDK_TEST_SERVER") != "1",
    reason="needs a running server: go test ./sdk/python/ starts one (SPACE_SDK_TEST_SERVER=1)",
)


@pytest.fixture(scope="module")
def client() -> Iterator[ss.Client]:
    with ss.Client() as c:
        yield c


@pytest.fixture(scope="module")
def sb(client: ss.Client) -> Iterator[ss.Sandbox]:
    """One sandbox the tests that only run commands and move files share."""
    with client.create_sandbox("minimal", runtime="ns", metadata={"suite": "shared"}) as s:
        yield s


def test_create_with_options_get_and_list_with_filters(client: ss.Client) -> None:
    tag = uuid.uuid4().hex[:8]
    with client.create_sandbox(
        "minimal", runtime="ns", name="py-" + tag, cpus=1, memory_mib=256, env={"GREETING": "hi"},
        timeout="10m", metadata={"run": tag}, idempotency_key="py-create-" + tag,
    ) as sb:
        assert sb.state == "running" and sb.info.template == "minimal" and sb.info.runtime == "ns"
        got = client.get_sandbox(sb.id)
        assert got.info.name == "py-" + tag and got.info.memory_mib == 256 and got.info.metadata == {"run": tag}
        assert got.info.expires_at is not None and got.info.created_at is not None
        assert sb.exec(["sh", "-c", "echo $GREETING"]).stdout == "hi\n"
        # The same idempotency key makes no second sandbox.
        again = client.create_sandbox("minimal", runtime="ns", name="py-" + tag, cpus=1, memory_mib=256,
                                      env={"GREETING": "hi"}, timeout="10m", metadata={"run": tag},
                                      idempotency_key="py-create-" + tag)
        assert again.id == sb.id
        assert [s.id for s in client.list_sandboxes(metadata={"run": tag})] == [sb.id]
        assert [s.id for s in client.list_sandboxes(metadata={"run": tag}, state="paused")] == []
        assert sb.id in [s.id for s in client.list_sandboxes(state="running", template="minimal")]
        assert [s.id for s in client.list_sandboxes(name="py-" + tag)] == [sb.id]
        sid = sb.id
    # The context manager deleted it.
    with pytest.raises(ss.NotFound):
        client.get_sandbox(sid)


def test_exec(sb: ss.Sandbox) -> None:
    r = sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.exit_code, r.stdout, r.stderr, r.truncated) == (3, "out\n", "err\n", False)
    r = sb.exec("pwd; echo $A; cat", env={"A": "b"}, cwd="/tmp", stdin="from stdin")
    assert r.exit_code == 0 and r.stdout == "/tmp\nb\nfrom stdin"
    # A command past its timeout is killed. The server answers unavailable,
    # or, when the guest's own deadline ends the command first, its result
    # with a failing exit code (both seen; the race is the server's).
    t0 = time.monotonic()
    try:
        res = sb.exec(["sleep", "30"], timeout=1)
    except ss.Unavailable as exc:
        assert exc.message
    else:
        assert res.exit_code != 0, res
    assert time.monotonic() - t0 < 20
    assert_gone(sb, "sleep 30")


def assert_gone(sb: ss.Sandbox, args: str) -> None:
    """Waits up to 15 s for no process of the sandbox to have these args."""
    deadline = time.monotonic() + 15
    while args in sb.exec("ps -o args").stdout:
        assert time.monotonic() < deadline, f"{args!r} still runs in the sandbox"
        time.sleep(0.2)


def test_cancelled_async_exec_leaves_nothing_running(sb: ss.Sandbox) -> None:
    async def main() -> None:
        async with ss.AsyncClient() as c:
            asb = await c.get_sandbox(sb.id)
            task = asyncio.ensure_future(asb.exec(["sleep", "304"], timeout=120))
            deadline = time.monotonic() + 15
            while "sleep 304" not in (await asb.exec("ps -o args")).stdout:
                assert time.monotonic() < deadline, "the command never started"
                await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    assert_gone(sb, "sleep 304")


def test_files(sb: ss.Sandbox) -> None:
    f = sb.files
    f.mkdir("/tmp/py/sub")
    f.write("/tmp/py/a.bin", b"\x00\x01binary")
    f.write("/tmp/py/b.txt", "héllo")
    assert f.read("/tmp/py/a.bin") == b"\x00\x01binary"
    assert f.read_text("/tmp/py/b.txt") == "héllo"
    names = sorted(e.name for e in f.list("/tmp/py"))
    assert names == ["a.bin", "b.txt", "sub"]
    deep = {e.path for e in f.list("/tmp/py", depth=2)}
    assert "/tmp/py/sub" in deep
    st = f.stat("/tmp/py/b.txt")
    assert st.type == "file" and st.size == len("héllo".encode()) and st.modified_at is not None
    assert f.stat("/tmp/py/sub").type == "dir"
    moved = f.move("/tmp/py/b.txt", "/tmp/py/sub/c.txt")
    assert moved.path == "/tmp/py/sub/c.txt"
    assert not f.exists("/tmp/py/b.txt") and f.exists("/tmp/py/sub/c.txt")
    f.remove("/tmp/py/sub")
    assert not f.exists("/tmp/py/sub/c.txt")
    with pytest.raises(ss.NotFound):
        f.read("/tmp/py/nope")
    with pytest.raises(ss.NotFound):
        f.stat("/tmp/py/nope")


def test_files_pages(sb: ss.Sandbox) -> None:
    sb.exec("mkdir -p /tmp/pages && cd /tmp/pages && touch f1 f2 f3 f4 f5")
    first = sb.files.list_page("/tmp/pages", limit=2)
    assert len(first.entries) == 2 and first.next_page_token
    seen = [e.name for e in sb.files.iter("/tmp/pages", page_size=2)]
    assert sorted(seen) == ["f1", "f2", "f3", "f4", "f5"]


def _sha256_of(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def test_files_stream_in_and_out(sb: ss.Sandbox, tmp_path: "os.PathLike[str]") -> None:
    size = 24 << 20
    src = os.path.join(str(tmp_path), "src")
    with open(src, "wb") as out:
        for i in range(size // (1 << 20)):
            out.write(bytes([i]) * (1 << 20))
    with open(src, "rb") as fh:
        sb.files.write("/tmp/big", fh)
    want = _sha256_of(src)
    r = sb.exec(["sha256sum", "/tmp/big"])
    assert r.stdout.split()[0] == want
    dst = os.path.join(str(tmp_path), "dst")
    with open(dst, "wb") as out:
        assert sb.files.download("/tmp/big", out) == size
    assert _sha256_of(dst) == want
    # An iterable of chunks streams too.
    sb.files.write("/tmp/gen", (b"x" * 1000 for _ in range(100)))
    assert sb.exec(["wc", "-c", "/tmp/gen"]).stdout.split()[0] == "100000"
    sb.files.remove("/tmp/big")


class HashSink(io.RawIOBase):
    """A binary file that keeps only the SHA-256 of what is written to it."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.n = 0

    def writable(self) -> bool:
        return True

    def write(self, b: "bytes | bytearray | memoryview") -> int:  # type: ignore[override]
        self.h.update(b)
        self.n += len(b)
        return len(b)


MIB100 = 100 << 20


def _chunk_and_digest() -> "tuple[bytes, str]":
    """A random 1 MiB chunk and the SHA-256 of 100 copies of it."""
    chunk = os.urandom(1 << 20)
    want = hashlib.sha256()
    for _ in range(MIB100 // len(chunk)):
        want.update(chunk)
    return chunk, want.hexdigest()


def test_100_mib_streams_in_constant_memory(sb: ss.Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    """100 MiB up from a generator and back down into a sink: the client's
    peak Python heap (tracemalloc) stays far under the file, and the bytes
    that came back are the bytes that went up (SHA-256, both ends)."""
    chunk, want = _chunk_and_digest()
    # Warm up the connection pool and buffers before the measure.
    sb.files.write("/tmp/warm", (chunk for _ in range(2)))
    sb.files.download("/tmp/warm", HashSink())
    tracemalloc.start()
    try:
        sb.files.write("/tmp/huge", (chunk for _ in range(MIB100 // len(chunk))))
        up = tracemalloc.get_traced_memory()[1] / (1 << 20)
        tracemalloc.reset_peak()
        sink = HashSink()
        n = sb.files.download("/tmp/huge", sink)
        down = tracemalloc.get_traced_memory()[1] / (1 << 20)
    finally:
        tracemalloc.stop()
    log_figure(capsys, f"files 100 MiB (sync): client peak Python heap {up:.1f} MiB up, {down:.1f} MiB down")
    assert n == MIB100 and sink.h.hexdigest() == want
    assert sb.exec(["sha256sum", "/tmp/huge"]).stdout.split()[0] == want
    assert up < 16 and down < 16, f"the client's heap peaked at {up:.0f} MiB up, {down:.0f} MiB down moving 100 MiB"
    sb.files.remove("/tmp/huge")


def test_async_100_mib_streams_in_constant_memory(sb: ss.Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    """The async twin: 100 MiB up from an async generator and back down into
    a sink through AsyncClient, the client's peak Python heap (tracemalloc)
    bounded, SHA-256 checked on both ends."""
    chunk, want = _chunk_and_digest()

    async def chunks(count: int) -> "AsyncIterator[bytes]":
        for _ in range(count):
            yield chunk

    async def main() -> "tuple[int, str, float, float]":
        async with ss.AsyncClient() as c:
            asb = await c.get_sandbox(sb.id)
            await asb.files.write("/tmp/awarm", chunks(2))
            await asb.files.download("/tmp/awarm", HashSink())
            tracemalloc.start()
            try:
                await asb.files.write("/tmp/ahuge", chunks(MIB100 // len(chunk)))
                up = tracemalloc.get_traced_memory()[1] / (1 << 20)
                tracemalloc.reset_peak()
                sink = HashSink()
                n = await asb.files.download("/tmp/ahuge", sink)
                down = tracemalloc.get_traced_memory()[1] / (1 << 20)
            finally:
                tracemalloc.stop()
            return n, sink.h.hexdigest(), up, down

    n, got, up, down = asyncio.run(main())
    log_figure(capsys, f"files 100 MiB (async): client peak Python heap {up:.1f} MiB up, {down:.1f} MiB down")
    assert n == MIB100 and got == want
    assert sb.exec(["sha256sum", "/tmp/ahuge"]).stdout.split()[0] == want
    assert up < 16 and down < 16, f"the async client's heap peaked at {up:.0f} MiB up, {down:.0f} MiB down moving 100 MiB"
    sb.files.remove("/tmp/ahuge")


def _yes_digest(size: int) -> str:
    """The SHA-256 of the first size bytes of `yes 0123456789abcdef`."""
    line = b"0123456789abcdef\n"
    want = hashlib.sha256()
    left = size
    while left:
        piece = (line * 4096)[:left]
        want.update(piece)
        left -= len(piece)
    return want.hexdigest()


def test_exec_stream_100_mib_in_constant_memory(sb: ss.Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    """A command writing 100 MiB, read off its stream as it comes: the
    client's peak Python heap (tracemalloc) stays far under the output."""
    want = _yes_digest(MIB100)
    got = hashlib.sha256()
    n = 0
    tracemalloc.start()
    try:
        with sb.exec_stream(["sh", "-c", f"yes 0123456789abcdef | head -c {MIB100}"]) as st:
            for out in st:
                assert out.stream == "stdout", out
                got.update(out.data)
                n += len(out.data)
            assert st.exit_code == 0
        peak = tracemalloc.get_traced_memory()[1] / (1 << 20)
    finally:
        tracemalloc.stop()
    log_figure(capsys, f"exec_stream of 100 MiB (sync): client peak Python heap {peak:.1f} MiB")
    assert n == MIB100 and got.hexdigest() == want
    assert peak < 16, f"the client's heap peaked at {peak:.0f} MiB reading 100 MiB of output"


def test_async_exec_stream_100_mib_in_constant_memory(sb: ss.Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    """The async twin: 100 MiB of a command's output read off an
    AsyncExecStream with ``async for``, the client's peak Python heap
    (tracemalloc) bounded, every byte there in order (SHA-256)."""
    want = _yes_digest(MIB100)

    async def main() -> "tuple[int, str, float, Optional[int]]":
        got = hashlib.sha256()
        n = 0
        async with ss.AsyncClient() as c:
            asb = await c.get_sandbox(sb.id)
            tracemalloc.start()
            try:
                async with await asb.exec_stream(["sh", "-c", f"yes 0123456789abcdef | head -c {MIB100}"]) as st:
                    async for out in st:
                        assert out.stream == "stdout", out
                        got.update(out.data)
                        n += len(out.data)
                    code = st.exit_code
                peak = tracemalloc.get_traced_memory()[1] / (1 << 20)
            finally:
                tracemalloc.stop()
        return n, got.hexdigest(), peak, code

    n, got, peak, code = asyncio.run(main())
    log_figure(capsys, f"exec_stream of 100 MiB (async): client peak Python heap {peak:.1f} MiB")
    assert code == 0 and n == MIB100 and got == want
    assert peak < 16, f"the async client's heap peaked at {peak:.0f} MiB reading 100 MiB of output"


def log_figure(capsys: pytest.CaptureFixture[str], text: str) -> None:
    """Writes a measured figure past pytest's capture, into go test's log."""
    with capsys.disabled():
        print(f"\n[figure] {text}", flush=True)


def test_errors_carry_the_servers_message(client: ss.Client, sb: ss.Sandbox) -> None:
    with pytest.raises(ss.NotFound) as nf:
        client.get_sandbox("sb-does-not-exist")
    assert nf.value.status == 404 and nf.value.message
    with pytest.raises(ss.FailedPrecondition) as fp:
        sb.start()  # a running sandbox has no kept disk to start from
    assert sb.id in fp.value.message
    with pytest.raises(ss.Unauthenticated):
        ss.Client(api_key="space_k-wrong").list_sandboxes()
    with pytest.raises(ss.InvalidArgument) as ia:
        sb.files.list_page("/", page_token="x" * 300)
    assert "page_token" in ia.value.message
    with pytest.raises(ss.APIError) as missing:
        client.create_sandbox("no-such-template", runtime="ns")
    assert "no-such-template" in missing.value.message


def test_lifecycle_snapshots_rollback_fork_timeout(client: ss.Client) -> None:
    with client.create_sandbox("minimal", runtime="ns") as sb:
        sb.files.write("/root/state", "one")
        assert sb.pause().state == "paused"
        assert sb.resume().state == "running"
        snap = sb.create_snapshot()
        assert snap.state == "ready" and snap.kind == "disk" and snap.sandbox == sb.id
        assert snap.id in [s.id for s in sb.list_snapshots()]
        sb.files.write("/root/state", "two")
        assert sb.stop().state == "stopped"
        with pytest.raises(ss.Conflict) as cf:
            sb.pause()
        assert "stopped" in cf.value.message
        assert sb.start().state == "running"
        assert sb.files.read_text("/root/state") == "two"
        assert sb.rollback(snap.id).state == "running"
        assert sb.files.read_text("/root/state") == "one"
        with sb.fork() as child:
            assert child.id != sb.id and child.state == "running"
            assert child.files.read_text("/root/state") == "one"
        assert sb.hibernate().state == "hibernated"
        assert sb.restore().state == "running"
        assert sb.files.read_text("/root/state") == "one"
        before = time.time()
        sb.set_timeout("1h")
        assert sb.info.expires_at is not None and sb.info.expires_at.timestamp() > before + 3000
        sb.set_timeout(0)
        assert sb.refresh().info.expires_at is None
        assert any(e.type for e in sb.events())
        sb.delete_snapshot(snap.id)


def test_ports_and_egress(sb: ss.Sandbox) -> None:
    p = sb.expose_port(8080)
    assert p.port == 8080 and p.protocol == "http" and p.url
    assert 8080 in [x.port for x in sb.list_ports()]
    sb.unexpose_port(8080)
    assert 8080 not in [x.port for x in sb.list_ports()]
    pol = sb.set_egress(ss.EgressPolicy(allow_internet=False, allow=ss.EgressRules(domains=["pypi.org"])))
    assert pol.allow_internet is False and pol.allow.domains == ["pypi.org"]
    assert sb.get_egress().allow.domains == ["pypi.org"]


def test_async_client() -> None:
    async def main() -> None:
        async with ss.AsyncClient() as c:
            async with await c.create_sandbox("minimal", runtime="ns", metadata={"suite": "async"}) as sb:
                r = await sb.exec(["echo", "async"])
                assert r.stdout == "async\n"
                await sb.files.write("/tmp/a", b"async bytes")
                assert await sb.files.read("/tmp/a") == b"async bytes"
                await sb.files.write("/tmp/b", io.BytesIO(b"from a file"))
                assert await sb.files.read_text("/tmp/b") == "from a file"
                assert (await sb.files.stat("/tmp/b")).size == len(b"from a file")
                assert sb.id in [s.id for s in await c.list_sandboxes(metadata={"suite": "async"})]
                assert "minimal" in [t.name for t in await c.list_templates()]
                assert any(k.admin for k in await c.list_keys())
                assert (await sb.pause()).state == "paused"
                assert (await sb.resume()).state == "running"
                sid = sb.id
            with pytest.raises(ss.NotFound):
                await c.get_sandbox(sid)

    asyncio.run(main())


def test_exec_stream_output_exit_code_and_pid(sb: ss.Sandbox) -> None:
    with sb.exec_stream(["sh", "-c", "echo one; echo two >&2; echo three; exit 4"]) as st:
        outs = list(st)
        assert st.exit_code == 4 and st.pid > 0
    assert b"".join(o.data for o in outs if o.stream == "stdout") == b"one\nthree\n"
    assert b"".join(o.data for o in outs if o.stream == "stderr") == b"two\n"


def test_exec_stream_stdin_and_callbacks(sb: ss.Sandbox) -> None:
    got: list = []
    st = sb.exec_stream(["cat"], on_stdout=got.append)
    big = os.urandom(100 << 10)  # several stdin messages
    st.send_stdin(big)
    st.send_stdin("and text")
    st.close_stdin()
    assert st.wait(timeout=60) == 0
    assert b"".join(got) == big + b"and text"


def test_exec_stream_signal_and_close_leave_nothing_running(sb: ss.Sandbox) -> None:
    t0 = time.monotonic()
    with sb.exec_stream(["sleep", "301"]) as st:
        for _ in range(50):
            if st.pid:
                break
            time.sleep(0.05)
        st.signal(15)
        code = st.wait(timeout=30)
    assert code != 0 and time.monotonic() - t0 < 30
    # A stream closed while its command runs: the server kills the command.
    st2 = sb.exec_stream(["sleep", "302"])
    with pytest.raises(ss.WaitTimeout):
        st2.wait(timeout=0.5)
    st2.close()
    assert_gone(sb, "sleep 302")


def test_exec_stream_tty_and_resize(sb: ss.Sandbox) -> None:
    out = bytearray()
    with sb.exec_stream(["sh"], tty=True, cols=100, rows=30) as st:
        it = iter(st)
        st.send_stdin("stty size\n")
        while b"30 100" not in out:
            out += next(it).data
        st.resize(120, 40)
        st.send_stdin("stty size; exit 7\n")
        for o in it:
            out += o.data
        assert st.exit_code == 7
    assert b"40 120" in out, out.decode(errors="replace")


def test_exec_stream_errors(client: ss.Client, sb: ss.Sandbox) -> None:
    with pytest.raises(ss.NotFound):
        ss.Sandbox(client, ss.SandboxInfo(id="sb-nope", state="running")).exec_stream(["true"])
    with pytest.raises(ValueError, match="tty"):
        sb.exec_stream(["true"], cols=80)


def test_files_watch(sb: ss.Sandbox) -> None:
    sb.files.mkdir("/tmp/watched")
    with sb.files.watch("/tmp/watched") as w:
        sb.files.write("/tmp/watched/new.txt", "x")
        names = set()
        deadline = time.monotonic() + 20
        while "new.txt" not in names:
            assert time.monotonic() < deadline
            ev = w.next(timeout=20)
            assert ev is not None
            names.add(ev.name.rsplit("/", 1)[-1])


def test_async_streams() -> None:
    async def main() -> None:
        async with ss.AsyncClient() as c, await c.create_sandbox("minimal", runtime="ns") as sb:
            async with await sb.exec_stream(["sh", "-c", "cat; echo done >&2"]) as st:
                await st.send_stdin(b"async in")
                await st.close_stdin()
                outs = [o async for o in st]
                assert st.exit_code == 0
            assert b"".join(o.data for o in outs if o.stream == "stdout") == b"async in"
            assert b"".join(o.data for o in outs if o.stream == "stderr") == b"done\n"
            await sb.files.mkdir("/tmp/aw")
            async with await sb.files.watch("/tmp/aw") as w:
                await sb.files.write("/tmp/aw/f", b"1")
                names = set()
                while "f" not in names:  # the upload's temporary file comes first
                    ev = await w.next(timeout=20)
                    assert ev is not None
                    names.add(ev.name.rsplit("/", 1)[-1])

    asyncio.run(main())


def test_tenants_keys_and_isolation(client: ss.Client, sb: ss.Sandbox) -> None:
    name = "py-" + uuid.uuid4().hex[:8]
    tenant, key = client.create_tenant(name)
    assert tenant.name == name and key
    assert tenant.id in [t.id for t in client.list_tenants()]
    with ss.Client(api_key=key) as theirs:
        # Another tenant's sandbox does not exist for them.
        assert theirs.list_sandboxes() == []
        with pytest.raises(ss.NotFound):
            theirs.get_sandbox(sb.id)
        with pytest.raises(ss.PermissionDenied):
            theirs.list_tenants()
        made, secret = theirs.create_key()
        assert made.tenant == tenant.id and secret
        assert made.id in [k.id for k in theirs.list_keys()]
        theirs.revoke_key(made.id)
        with pytest.raises(ss.Unauthenticated):
            ss.Client(api_key=secret).list_sandboxes()
    client.delete_tenant(tenant.id)


def test_templates(client: ss.Client, tmp_path: "os.PathLike[str]") -> None:
    assert any(t.name == "minimal" and t.state == "ready" for t in client.list_templates())
    with pytest.raises(ValueError, match="source"):
        client.build_template("x", "/no/scheme")
    # The build runs on the server; its failure comes back as the template's state.
    with pytest.raises(ss.SpaceError) as bad:
        client.build_template("py-bad", "dir:/no/such/dir")
    assert "/no/such/dir" in str(bad.value)
    client.delete_template("py-bad")
    # A template from a directory on the server's machine: busybox alone.
    root = os.path.join(str(tmp_path), "rootfs")
    os.makedirs(os.path.join(root, "bin"))
    shutil.copy("/bin/busybox", os.path.join(root, "bin", "busybox"))
    os.symlink("busybox", os.path.join(root, "bin", "sh"))
    t = client.build_template("py-dir", "dir:" + root, wait_timeout=120)
    assert t.state == "ready" and t.name == "py-dir"
    with client.create_sandbox("py-dir", runtime="ns") as made:
        assert made.exec(["/bin/busybox", "echo", "from py-dir"]).stdout == "from py-dir\n"
    client.delete_template("py-dir")
    assert "py-dir" not in [x.name for x in client.list_templates()]
    with pytest.raises(ss.NotFound):
        client.delete_template("py-no-such-template")


def _http_get(addr: "tuple[str, int]", path: str) -> bytes:
    import socket as so

    with so.create_connection(addr, timeout=20) as c:
        c.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        out = b""
        while True:
            b = c.recv(65536)
            if not b:
                return out
            out += b


def test_dial_port_and_forward(sb: ss.Sandbox) -> None:
    sb.exec("mkdir -p /tmp/www && echo served-by-busybox > /tmp/www/index.html && httpd -p 8000 -h /tmp/www")
    sb.expose_port(8000, protocol="tcp")
    import socket as so

    s = sb.dial_port(8000)
    s.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
    s.shutdown(so.SHUT_WR)  # half-closed: the answer still comes
    got = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    s.close()
    assert got.startswith(b"HTTP/1.") and got.endswith(b"served-by-busybox\n")
    with sb.forward(8000) as fwd:
        for _ in range(3):  # one tunnel per connection
            assert _http_get(fwd.address, "/index.html").endswith(b"served-by-busybox\n")
        assert fwd.errors == []
    with pytest.raises(ss.APIError):
        sb.dial_port(8001)  # not exposed


def test_async_forward(sb: ss.Sandbox) -> None:
    sb.exec("mkdir -p /tmp/www2 && echo async-served > /tmp/www2/index.html && httpd -p 8002 -h /tmp/www2")
    sb.expose_port(8002, protocol="tcp")

    async def main() -> None:
        async with ss.AsyncClient() as c:
            asb = await c.get_sandbox(sb.id)
            r, w = await asb.dial_port(8002)
            w.write(b"GET /index.html HTTP/1.0\r\n\r\n")
            w.write_eof()
            got = await r.read()
            w.close()
            assert got.endswith(b"async-served\n")
            async with await asb.forward(8002) as fwd:
                host, port = fwd.address
                r2, w2 = await asyncio.open_connection(host, port)
                w2.write(b"GET /index.html HTTP/1.0\r\n\r\n")
                await w2.drain()
                assert (await r2.read()).endswith(b"async-served\n")
                w2.close()

    asyncio.run(main())


def test_credentials(client: ss.Client) -> None:
    from datetime import datetime, timedelta, timezone

    with pytest.raises(ValueError, match="injection"):
        client.create_credential("c", "s", injection={"method": "cookie"}, allowed_hosts=["example.com"])
    with pytest.raises(ValueError, match="allowed_hosts"):
        client.create_credential("c", "s", injection={"method": "basic"}, allowed_hosts="example.com")
    until = datetime.now(timezone.utc) + timedelta(hours=1)
    cred = client.create_credential(
        "py-token", "s3cr3t-value", injection={"method": "header", "name": "X-Api-Key"},
        allowed_hosts=["api.example.com"], expires_at=until, rate_limit=30,
    )
    assert cred.name == "py-token" and cred.injection == {"method": "header", "name": "X-Api-Key"}
    assert cred.allowed_hosts == ["api.example.com"] and cred.rate_limit == 30
    assert cred.expires_at is not None and abs(cred.expires_at.timestamp() - until.timestamp()) < 2
    assert "s3cr3t-value" not in repr(client.get_credential(cred.id))
    assert cred.id in [c.id for c in client.list_credentials()]
    client.delete_credential(cred.id)
    with pytest.raises(ss.NotFound):
        client.get_credential(cred.id)


def test_list_processes(sb: ss.Sandbox) -> None:
    # A streamed command is listed by the guest daemon while it runs (its
    # pid, program and arguments, never its environment), and gone once
    # its stream is closed; the async client lists the same.
    with sb.exec_stream(["sleep", "306"], env={"SECRET_ENV": "s3cr3t-env-value"}, cwd="/tmp") as st:
        with pytest.raises(ss.WaitTimeout):
            st.wait(timeout=1)  # reads the stream's start, which names the pid
        assert st.pid > 0
        procs = sb.list_processes()
        mine = [p for p in procs if p.pid == st.pid]
        assert len(mine) == 1, procs
        assert (mine[0].cmd, mine[0].args, mine[0].cwd) == ("sleep", ["306"], "/tmp"), mine[0]
        assert "s3cr3t-env-value" not in repr(procs)
        assert [p.pid for p in procs] == sorted(p.pid for p in procs)

        async def alist() -> "list[int]":
            async with ss.AsyncClient() as c:
                return [p.pid for p in await (await c.get_sandbox(sb.id)).list_processes()]

        assert st.pid in asyncio.run(alist())
        pid = st.pid
    deadline = time.monotonic() + 15
    while pid in [p.pid for p in sb.list_processes()]:
        assert time.monotonic() < deadline, f"process {pid} still listed after its stream closed"
        time.sleep(0.2)
    with pytest.raises(ss.NotFound):
        ss.Sandbox(sb.client, ss.SandboxInfo(id="sb-nope", state="running")).list_processes()
