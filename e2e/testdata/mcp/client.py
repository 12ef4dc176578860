"""Drives `space mcp` with the official MCP Python client (the `mcp` package,
pinned in requirements.txt), over stdio or streamable HTTP, against a real
SPACE server. Exits non-zero with a message on the first thing that is not
as it should be.

    client.py stdio SPACE_BINARY        (SPACE_API_URL, SPACE_API_KEY, OTHER_KEY set)
    client.py http  MCP_URL             (SPACE_API_KEY, OTHER_KEY set)
    client.py code  SPACE_BINARY SANDBOX_ID  (a sandbox of the code-interpreter template)
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

WANT_TOOLS = {
    "sandbox_create", "sandbox_list", "sandbox_get", "sandbox_delete", "run_command", "run_code",
    "file_read", "file_write", "file_list", "port_expose", "snapshot_create", "snapshot_list",
    "sandbox_fork", "sandbox_hibernate", "sandbox_restore", "sandbox_pause", "sandbox_resume",
    "code_context_create", "code_context_list", "code_context_restart", "code_context_delete",
}


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def result_json(res):
    if res.structured_content is not None:
        return res.structured_content
    return json.loads("".join(c.text for c in res.content if getattr(c, "type", "") == "text"))


def error_text(res):
    return "".join(c.text for c in res.content if getattr(c, "type", "") == "text")


async def call(session, name, args, want_error=None):
    res = await session.call_tool(name, args)
    if want_error is not None:
        if not res.is_error or want_error not in error_text(res):
            fail(f"{name} {args}: want a tool error with {want_error!r}, got is_error={res.is_error} {error_text(res)!r}")
        return None
    if res.is_error:
        fail(f"{name} {args}: tool error {error_text(res)!r}")
    return result_json(res)


async def exercise(session):
    await session.initialize()
    tools = {t.name for t in (await session.list_tools()).tools}
    if tools != WANT_TOOLS:
        fail(f"tools {sorted(tools)}, want {sorted(WANT_TOOLS)}")

    sb = await call(session, "sandbox_create", {"template": "minimal", "runtime": "ns", "timeout": "10m"})
    if sb["state"] != "running" or sb["runtime"] != "ns":
        fail(f"sandbox_create: {sb}")
    sid = sb["id"]
    try:
        out = await call(session, "run_command", {"id": sid, "command": "echo hello from $0; echo oops >&2; exit 7"})
        if out["exit_code"] != 7 or out["stdout"] != "hello from sh\n" or out["stderr"] != "oops\n":
            fail(f"run_command: {out}")
        await call(session, "file_write", {"id": sid, "path": "/tmp/mcp/note.txt", "content": "written by MCP\n"})
        got = await call(session, "file_read", {"id": sid, "path": "/tmp/mcp/note.txt"})
        if got["content"] != "written by MCP\n" or got["encoding"] != "utf-8":
            fail(f"file_read: {got}")
        await call(session, "file_write", {"id": sid, "path": "/tmp/mcp/bin", "content": "AP8=", "encoding": "base64"})
        got = await call(session, "file_read", {"id": sid, "path": "/tmp/mcp/bin"})
        if got["content"] != "AP8=" or got["encoding"] != "base64":
            fail(f"file_read of binary content: {got}")
        listing = await call(session, "file_list", {"id": sid, "path": "/tmp/mcp"})
        if sorted(e["path"] for e in listing["entries"]) != ["/tmp/mcp/bin", "/tmp/mcp/note.txt"]:
            fail(f"file_list: {listing}")
        listed = await call(session, "sandbox_list", {})
        if sid not in [s["id"] for s in listed["sandboxes"]]:
            fail(f"sandbox_list misses {sid}: {listed}")
        snap = await call(session, "snapshot_create", {"id": sid})
        if snap["state"] != "ready":
            fail(f"snapshot_create: {snap}")
        snaps = await call(session, "snapshot_list", {"id": sid})
        if snap["id"] not in [s["id"] for s in snaps["snapshots"]]:
            fail(f"snapshot_list misses {snap['id']}: {snaps}")
        fork = await call(session, "sandbox_fork", {"id": sid})
        try:
            got = await call(session, "run_command", {"id": fork["id"], "argv": ["cat", "/tmp/mcp/note.txt"]})
            if got["stdout"] != "written by MCP\n":
                fail(f"the fork does not have the parent's file: {got}")
        finally:
            await call(session, "sandbox_delete", {"id": fork["id"]})
        port = await call(session, "port_expose", {"id": sid, "port": 8080})
        if not port["url"] or not port["token"]:
            fail(f"port_expose of a private port: {port}")
        paused = await call(session, "sandbox_pause", {"id": sid})
        resumed = await call(session, "sandbox_resume", {"id": sid})
        if paused["state"] != "paused" or resumed["state"] != "running":
            fail(f"pause/resume: {paused['state']} {resumed['state']}")

        # Errors: the API's, as it said them; bad arguments, before sending.
        await call(session, "sandbox_get", {"id": "doesnotexist0000000000000"}, want_error="not_found")
        await call(session, "file_read", {"id": sid, "path": "relative"}, want_error="argument path")
        await call(session, "file_read", {"id": sid, "path": "/no/such/file"}, want_error="not_found")
        await call(session, "run_command", {"id": sid, "command": "true", "timeout": "soon"}, want_error="argument timeout")
        return sid
    except BaseException:
        await session.call_tool("sandbox_delete", {"id": sid})
        raise


async def other_tenant(session, sid):
    """The other tenant's key sees none of the first tenant's sandboxes."""
    await session.initialize()
    await call(session, "sandbox_get", {"id": sid}, want_error="not_found")
    await call(session, "run_command", {"id": sid, "command": "true"}, want_error="not_found")
    await call(session, "sandbox_delete", {"id": sid}, want_error="not_found")
    listed = await call(session, "sandbox_list", {})
    if sid in [s["id"] for s in listed["sandboxes"]]:
        fail(f"the other tenant lists {sid}")


async def stdio(space_binary):
    await stdio_garbage(space_binary)

    def params(key):
        env = dict(os.environ, SPACE_API_KEY=key)
        return StdioServerParameters(command=space_binary, args=["mcp"], env=env)

    async with stdio_client(params(os.environ["SPACE_API_KEY"])) as (r, w):
        async with ClientSession(r, w) as session:
            sid = await exercise(session)
    async with stdio_client(params(os.environ["OTHER_KEY"])) as (r, w):
        async with ClientSession(r, w) as session:
            await other_tenant(session, sid)
    async with stdio_client(params(os.environ["SPACE_API_KEY"])) as (r, w):
        async with ClientSession(r, w) as session:
            await session.initialize()
            await call(session, "sandbox_delete", {"id": sid})


async def stdio_garbage(space_binary):
    """Bytes that are no JSON-RPC message, written straight to `space mcp`'s
    stdin: each gets a JSON-RPC error line and the session goes on (the
    official client after it works on the same process's output)."""
    proc = await asyncio.create_subprocess_exec(space_binary, "mcp", stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, env=dict(os.environ))

    async def answer(line):
        proc.stdin.write(line + b"\n")
        await proc.stdin.drain()
        got = await asyncio.wait_for(proc.stdout.readline(), 60)
        if not got:
            fail(f"space mcp closed its output after {line[:60]!r} (exit {await proc.wait()})")
        return json.loads(got)

    try:
        a = await answer(b"\x00\xffnot json at all")
        if a.get("id") is not None or a.get("error", {}).get("code") != -32700:
            fail(f"garbage on stdin: {a}, want a parse error (-32700) with a null id")
        a = await answer(b'{"jsonrpc":"2.0","id":9,"method":17}')
        if a.get("id") != 9 or a.get("error", {}).get("code") != -32600:
            fail(f"a request whose method is a number: {a}, want an invalid request (-32600) with id 9")
        a = await answer(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}).encode())
        if a.get("id") != 1 or "result" not in a:
            fail(f"initialize after the garbage: {a}")
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        a = await answer(b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}')
        if a.get("id") != 2 or {t["name"] for t in a["result"]["tools"]} != WANT_TOOLS:
            fail(f"tools/list after the garbage: {a}")
        proc.stdin.close()
        if await asyncio.wait_for(proc.wait(), 60) != 0:
            fail(f"space mcp exited {proc.returncode} at the end of its input, want 0")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def http_garbage(url):
    """Over HTTP, a body that is no JSON-RPC message is refused by the
    transport (400), and the server serves the next request."""
    async with httpx2.AsyncClient(headers={"Authorization": "Bearer " + os.environ["SPACE_API_KEY"]}) as raw:
        resp = await raw.post(url, content=b"\x00\xffnot json at all", headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        if resp.status_code != 400:
            fail(f"garbage over HTTP: HTTP {resp.status_code} {resp.text[:200]!r}, want 400")
        resp = await raw.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}},
            headers={"Accept": "application/json, text/event-stream"})
        if resp.status_code != 200:
            fail(f"initialize after garbage over HTTP: HTTP {resp.status_code}")


async def http(url):
    await http_garbage(url)
    # No key: refused by the transport itself.
    async with httpx2.AsyncClient() as raw:
        resp = await raw.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                              headers={"Accept": "application/json, text/event-stream"})
        if resp.status_code != 401:
            fail(f"a request without a key: HTTP {resp.status_code}, want 401")

    def client(key):
        return httpx2.AsyncClient(headers={"Authorization": "Bearer " + key}, timeout=httpx2.Timeout(120.0))

    async with client(os.environ["SPACE_API_KEY"]) as hc:
        async with streamable_http_client(url, http_client=hc) as (r, w):
            async with ClientSession(r, w) as session:
                sid = await exercise(session)
    async with client(os.environ["OTHER_KEY"]) as hc:
        async with streamable_http_client(url, http_client=hc) as (r, w):
            async with ClientSession(r, w) as session:
                await other_tenant(session, sid)
    async with client("space_k-notakey_0000") as hc:
        async with streamable_http_client(url, http_client=hc) as (r, w):
            async with ClientSession(r, w) as session:
                await session.initialize()
                await call(session, "sandbox_list", {}, want_error="unauthenticated")
    async with client(os.environ["SPACE_API_KEY"]) as hc:
        async with streamable_http_client(url, http_client=hc) as (r, w):
            async with ClientSession(r, w) as session:
                await session.initialize()
                await call(session, "sandbox_delete", {"id": sid})


async def code(space_binary, sid):
    """run_code over stdio: its output streams as progress notifications of
    the call's progress token, in order, before the result; state is kept
    across calls; the code's error is in the result; a sandbox without an
    interpreter is a tool error."""
    env = dict(os.environ)
    async with stdio_client(StdioServerParameters(command=space_binary, args=["mcp"], env=env)) as (r, w):
        async with ClientSession(r, w) as session:
            await session.initialize()
            progress = []

            async def on_progress(done, total, message):
                progress.append(message)

            res = await session.call_tool("run_code", {"id": sid, "code": "import sys\nprint('one')\nprint('warn', file=sys.stderr)\nprint('two')\nx = 41\nx + 1"},
                                          progress_callback=on_progress)
            if res.is_error:
                fail(f"run_code: tool error {error_text(res)!r}")
            out = result_json(res)
            if out["text"] != "42" or out["stdout"] != "one\ntwo\n" or out["stderr"] != "warn\n" or out.get("error"):
                fail(f"run_code: {out}")
            # The kernel may send both prints as one chunk: what counts is
            # the text, in order, each chunk marked with its stream.
            streamed = {k: "".join(m[len(k) + 2:] for m in progress if m.startswith(k + ": ")) for k in ("stdout", "stderr")}
            if streamed != {"stdout": "one\ntwo\n", "stderr": "warn\n"} or any(not m.startswith(("stdout: ", "stderr: ")) for m in progress):
                fail(f"run_code progress notifications: {progress}")
            out = await call(session, "run_code", {"id": sid, "code": "x"})
            if out["text"] != "41":
                fail(f"run_code keeps no state: {out}")
            out = await call(session, "run_code", {"id": sid, "code": "raise ValueError('bad value')"})
            if not out.get("error") or out["error"]["name"] != "ValueError" or out["error"]["value"] != "bad value":
                fail(f"run_code of a raise: {out}")
            out = await call(session, "run_code", {"id": sid, "code": "echo $0 $GREETING", "language": "bash", "env": {"GREETING": "hi"}})
            if not out["stdout"].endswith("hi\n"):
                fail(f"run_code in bash: {out}")
            await contexts(session, sid)
            plain = await call(session, "sandbox_create", {"template": "minimal", "runtime": "ns", "timeout": "10m"})
            try:
                await call(session, "run_code", {"id": plain["id"], "code": "1"}, want_error="code-interpreter")
                await call(session, "code_context_create", {"id": plain["id"]}, want_error="code-interpreter")
            finally:
                await call(session, "sandbox_delete", {"id": plain["id"]})
            await call(session, "run_code", {"id": sid, "code": ""}, want_error="argument code")


async def contexts(session, sid):
    """The code context tools: a context keeps its own state apart from the
    default one, is listed, restarts to a fresh kernel and, deleted, is
    gone (run_code in it is then a tool error)."""
    ctx = await call(session, "code_context_create", {"id": sid, "language": "python", "cwd": "/tmp"})
    if not ctx["id"] or ctx["language"] != "python" or ctx["cwd"] != "/tmp":
        fail(f"code_context_create: {ctx}")
    cid = ctx["id"]
    await call(session, "run_code", {"id": sid, "code": "x = 'in the context'", "context": cid})
    out = await call(session, "run_code", {"id": sid, "code": "import os\n(x, os.getcwd())", "context": cid})
    if out["text"] != "('in the context', '/tmp')":
        fail(f"run_code in a context: {out}")
    out = await call(session, "run_code", {"id": sid, "code": "x"})
    if out["text"] != "41":
        fail(f"the context's state reached the default one: {out}")
    listed = await call(session, "code_context_list", {"id": sid})
    if cid not in [c["id"] for c in listed["contexts"]]:
        fail(f"code_context_list: {listed}, want {cid} in it")
    await call(session, "code_context_restart", {"id": sid, "context": cid})
    out = await call(session, "run_code", {"id": sid, "code": "x", "context": cid})
    if not out.get("error") or out["error"]["name"] != "NameError":
        fail(f"run_code after code_context_restart kept its state: {out}")
    await call(session, "code_context_delete", {"id": sid, "context": cid})
    listed = await call(session, "code_context_list", {"id": sid})
    if cid in [c["id"] for c in listed["contexts"]]:
        fail(f"code_context_list after delete: {listed}")
    await call(session, "run_code", {"id": sid, "code": "1", "context": cid}, want_error="not_found")
    await call(session, "code_context_restart", {"id": sid, "context": ""}, want_error="argument context")


def main():
    mode, target = sys.argv[1], sys.argv[2]
    if mode == "code":
        asyncio.run(code(target, sys.argv[3]))
    else:
        asyncio.run(stdio(target) if mode == "stdio" else http(target))
    print("ok " + mode)


if __name__ == "__main__":
    main()
