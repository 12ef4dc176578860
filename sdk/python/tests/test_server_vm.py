"""Integration tests of what is runtime-specific, on the vm runtime: exec
(run to completion and streamed), files, pause/resume and run_code in a
microVM, through the sync and async clients.

python_test.go runs this file against the same `space server --dev` as
test_server.py. It is skipped, saying why, when the server's node offers no
vm runtime (no QEMU, or its kernel is not ready).
"""

from __future__ import annotations

import asyncio
import os
from typing import Iterator

import pytest

import space_sandbox as ss

pytestmark = pytest.mark.skipif(
    os.environ.get("SPACE_SDK_TEST_SERVER") != "1",
    reason="needs a running server: go test ./sdk/python/ starts one (SPACE_SDK_TEST_SERVER=1)",
)

#: A microVM under emulation (TCG) boots and pauses slowly: generous waits.
WAIT = 600.0


@pytest.fixture(scope="module")
def client() -> Iterator[ss.Client]:
    with ss.Client(timeout=WAIT) as c:
        nodes = c.list_nodes()
        if not any("vm" in n.runtimes for n in nodes):
            status = "; ".join(f"{n.id}: runtimes {n.runtimes}, {n.runtime_status}" for n in nodes)
            pytest.skip(f"the server's nodes offer no vm runtime ({status}): the vm tests need QEMU and the guest kernel")
        yield c


@pytest.fixture(scope="module")
def vm(client: ss.Client) -> Iterator[ss.Sandbox]:
    with client.create_sandbox("minimal", runtime="vm", timeout="30m") as sb:
        yield sb


def test_vm_exec_in_its_own_kernel(vm: ss.Sandbox) -> None:
    assert vm.info.runtime == "vm"
    r = vm.exec(["sh", "-c", "uname -r; echo err >&2; exit 4"])
    # A microVM runs the guest kernel, not the host's.
    assert r.exit_code == 4 and r.stderr == "err\n" and r.stdout.strip() != os.uname().release
    r = vm.exec("cat; echo $X", env={"X": "y"}, stdin="in:")
    assert r.stdout == "in:y\n"
    with vm.exec_stream(["sh", "-c", "echo one; sleep 1; echo two >&2; exit 7"]) as st:
        got = [(o.stream, o.data) for o in st]
        assert st.exit_code == 7 and st.pid > 0
    assert got == [("stdout", b"one\n"), ("stderr", b"two\n")]


def test_vm_files(vm: ss.Sandbox) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB through the guest's file service
    vm.files.write("/tmp/vm-bin", data)
    assert vm.files.read("/tmp/vm-bin") == data
    assert vm.files.stat("/tmp/vm-bin").size == len(data)
    vm.files.mkdir("/tmp/vm-dir")
    vm.files.move("/tmp/vm-bin", "/tmp/vm-dir/moved")
    assert [e.name for e in vm.files.list("/tmp/vm-dir")] == ["moved"]
    assert vm.exec(["sha256sum", "/tmp/vm-dir/moved"]).exit_code == 0
    vm.files.remove("/tmp/vm-dir/moved")
    assert not vm.files.exists("/tmp/vm-dir/moved")


def test_vm_pause_resume_keeps_memory(vm: ss.Sandbox) -> None:
    # A process started before the pause is still there after it: the
    # guest's memory was kept, not rebooted.
    st = vm.exec_stream(["sh", "-c", "echo $$; exec sleep 3600"])
    pid = next(iter(st)).data.decode().strip()
    assert vm.pause(wait_timeout=WAIT).state == "paused"
    assert vm.resume(wait_timeout=WAIT).state == "running"
    assert vm.exec(["sh", "-c", f"kill -0 {pid} && echo alive"]).stdout == "alive\n"
    st.close()


def test_vm_async(client: ss.Client) -> None:
    async def main() -> None:
        async with ss.AsyncClient(timeout=WAIT) as c, await c.create_sandbox("minimal", runtime="vm", timeout="30m") as sb:
            assert sb.info.runtime == "vm"
            assert (await sb.exec(["echo", "async vm"])).stdout == "async vm\n"
            await sb.files.write("/tmp/a", b"async vm bytes")
            assert await sb.files.read("/tmp/a") == b"async vm bytes"
            assert (await sb.pause(wait_timeout=WAIT)).state == "paused"
            assert (await sb.resume(wait_timeout=WAIT)).state == "running"
            assert await sb.files.read("/tmp/a") == b"async vm bytes"

    asyncio.run(main())


def test_vm_run_code(client: ss.Client, code_interpreter_template: str) -> None:
    # The code interpreter's kernel runs in the microVM: its state is kept
    # between calls, its output streams to the callback, a Bash context
    # runs there too, and the Python sees the guest kernel, not the host's.
    with client.create_sandbox(code_interpreter_template, runtime="vm", memory_mib=1024, timeout="30m") as sb:
        assert sb.info.runtime == "vm"
        ex = sb.run_code("import os\nrelease = os.uname().release\nrelease", timeout=WAIT)
        assert ex.error is None, ex.error
        assert ex.text.strip("'") != os.uname().release, ex.text
        out: list = []
        ex = sb.run_code("print('from the vm')\nlen(release) * 0 + 6 * 7", timeout=WAIT, on_stdout=out.append)
        assert ex.text == "42" and "".join(out) == "from the vm\n"
        ctx = sb.create_code_context(language="bash")
        try:
            ex = sb.run_code("echo in bash; exit_code_is_kept=3; (exit $exit_code_is_kept)", context=ctx.id, timeout=WAIT)
            assert "".join(ex.logs.stdout) == "in bash\n"
            assert ex.error is not None and ex.error.name == "ExitCodeError", ex.error
        finally:
            sb.delete_code_context(ctx.id)


def test_vm_async_run_code(client: ss.Client, code_interpreter_template: str) -> None:
    # run_code through the async client in a microVM: a result, output to
    # the callback, state kept between two calls, the guest's kernel seen.
    # Kept small: the microVM runs under emulation (TCG).
    async def main() -> None:
        async with ss.AsyncClient(timeout=WAIT) as c, \
                await c.create_sandbox(code_interpreter_template, runtime="vm", memory_mib=1024, timeout="30m") as sb:
            assert sb.info.runtime == "vm"
            out: list = []
            ex = await sb.run_code("import os\nprint('async vm')\nn = 6\nos.uname().release", timeout=WAIT, on_stdout=out.append)
            assert ex.error is None, ex.error
            assert "".join(out) == "async vm\n" and ex.text.strip("'") != os.uname().release, (out, ex.text)
            assert (await sb.run_code("n * 7", timeout=WAIT)).text == "42"

    asyncio.run(main())
