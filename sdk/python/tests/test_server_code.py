"""Integration tests of run_code: the SDK against a real `space server --dev`
and a sandbox of the code-interpreter template (built here from
``code-interpreter``, the server's built-in; python_test.go points the server at
$SPACE_TEST_CACHE_DIR, where its Debian tree is kept, so only a cold cache
pays for debootstrap).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import tracemalloc
from typing import Iterator, List

import pytest

import space_sandbox as ss

pytestmark = pytest.mark.skipif(
    os.environ.get("SPACE_SDK_TEST_SERVER") != "1",
    reason="needs a running server: go test ./sdk/python/ starts one (SPACE_SDK_TEST_SERVER=1)",
)


@pytest.fixture(scope="module")
def client() -> Iterator[ss.Client]:
    with ss.Client(timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def sb(client: ss.Client, code_interpreter_template: str) -> Iterator[ss.Sandbox]:
    with client.create_sandbox(code_interpreter_template, runtime="ns", memory_mib=1024) as s:
        yield s


def test_run_code_results_state_and_callbacks(sb: ss.Sandbox) -> None:
    ex = sb.run_code("1+1")
    assert ex.text == "2" and ex.error is None and ex.execution_count >= 1
    assert ex.results[0].main and "text" in ex.results[0].formats()
    sb.run_code("x = 41")
    assert sb.run_code("x + 1").text == "42"
    out: List[str] = []
    err: List[str] = []
    res: List[ss.CodeResult] = []
    ex = sb.run_code(
        "import sys\nprint('out')\nprint('err', file=sys.stderr)\nfrom IPython.display import display, HTML\ndisplay(HTML('<b>hi</b>'))\n7",
        on_stdout=out.append, on_stderr=err.append, on_result=res.append,
    )
    assert "".join(out) == "out\n" and "".join(ex.logs.stdout) == "out\n"
    assert "".join(err) == "err\n" and "".join(ex.logs.stderr) == "err\n"
    assert [r.html for r in res if not r.main] == ["<b>hi</b>"] and ex.text == "7"
    ex = sb.run_code("echo $GREETING", language="bash", env={"GREETING": "hi"})
    assert "".join(ex.logs.stdout) == "hi\n"


def test_run_code_error(sb: ss.Sandbox) -> None:
    errs: List[ss.CodeError] = []
    ex = sb.run_code("def f():\n    raise ValueError('bad value')\nf()", on_error=errs.append)
    assert ex.error is not None and (ex.error.name, ex.error.value) == ("ValueError", "bad value")
    assert "bad value" in ex.error.traceback and errs == [ex.error]
    assert sb.run_code("1+2").text == "3"


def test_run_code_timeout_interrupts_and_keeps_state(sb: ss.Sandbox) -> None:
    sb.run_code("kept = 'yes'")
    t0 = time.monotonic()
    ex = sb.run_code("import time\ntime.sleep(60)", timeout=2)
    assert ex.error is not None and ex.error.name == "TimeoutError", ex.error
    assert time.monotonic() - t0 < 50
    assert sb.run_code("kept").text == "'yes'"


def test_code_contexts_keep_their_own_state(sb: ss.Sandbox) -> None:
    a = sb.create_code_context(language="python", cwd="/tmp")
    b = sb.create_code_context()
    try:
        sb.run_code("v = 'a'", context=a.id)
        sb.run_code("v = 'b'", context=b.id)
        assert sb.run_code("v", context=a.id).text == "'a'"
        assert sb.run_code("import os; os.getcwd()", context=a.id).text == "'/tmp'"
        assert {a.id, b.id} <= {c.id for c in sb.list_code_contexts()}
        sb.restart_code_context(a.id)
        ex = sb.run_code("v", context=a.id)
        assert ex.error is not None and ex.error.name == "NameError"
        assert sb.run_code("v", context=b.id).text == "'b'"
    finally:
        sb.delete_code_context(a.id)
        sb.delete_code_context(b.id)
    assert a.id not in {c.id for c in sb.list_code_contexts()}
    with pytest.raises(ss.NotFound):
        sb.run_code("1", context=a.id)


def test_async_run_code(sb: ss.Sandbox) -> None:
    async def main() -> None:
        async with ss.AsyncClient(timeout=120) as c:
            asb = await c.get_sandbox(sb.id)
            out: List[str] = []
            ctx = await asb.create_code_context()
            try:
                ex = await asb.run_code("print('async')\nz = 5\nz * 2", context=ctx.id, on_stdout=out.append)
                assert ex.text == "10" and "".join(out) == "async\n"
                assert ctx.id in [x.id for x in await asb.list_code_contexts()]
            finally:
                await asb.delete_code_context(ctx.id)

    asyncio.run(main())


def test_a_sandbox_without_an_interpreter_is_refused(client: ss.Client) -> None:
    # The server's code is failed_precondition (HTTP 409): the sandbox is
    # fine, it is not of the code-interpreter template.
    with client.create_sandbox("minimal", runtime="ns") as plain:
        with pytest.raises(ss.FailedPrecondition) as ei:
            plain.run_code("1")
        assert ei.value.status == 409 and "code-interpreter" in ei.value.message


def test_run_code_streams_100_mib_in_constant_memory(sb: ss.Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    """Code printing 100 MiB in 1 MiB pieces, its output taken by a callback
    with keep_logs=False: the client's peak Python heap (tracemalloc) stays
    far under the output, and every byte arrived in order."""
    chunks, piece = 100, 1 << 20
    want = hashlib.sha256()
    for i in range(chunks):
        want.update((str(i % 10) * piece).encode())
    got = hashlib.sha256()
    n = 0

    def take(text: str) -> None:
        nonlocal n
        got.update(text.encode())
        n += len(text)

    code = (f"import sys\nfor i in range({chunks}):\n"
            f"    sys.stdout.write(str(i % 10) * {piece})\n    sys.stdout.flush()\n")
    sb.run_code("1")  # the kernel and the connection warm before the measure
    tracemalloc.start()
    try:
        t0 = time.monotonic()
        ex = sb.run_code(code, timeout=600, on_stdout=take, keep_logs=False)
        secs = time.monotonic() - t0
        peak = tracemalloc.get_traced_memory()[1] / (1 << 20)
    finally:
        tracemalloc.stop()
    with capsys.disabled():
        print(f"\n[figure] run_code printing 100 MiB: client peak Python heap {peak:.1f} MiB, {secs:.1f} s", flush=True)
    assert ex.error is None, ex.error
    assert n == chunks * piece and got.hexdigest() == want.hexdigest(), f"{n} characters arrived"
    assert peak < 40, f"the client's heap peaked at {peak:.0f} MiB taking 100 MiB of output"
    assert ex.logs.stdout == []
