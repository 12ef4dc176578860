"""Unit tests: the SDK against httpx's mock transport (no server)."""

from __future__ import annotations

import asyncio
import inspect
import io
import json
from typing import Any, Callable, Dict, List

import httpx
import pytest

import space_sandbox as ss

SB = {"id": "sb-1", "state": "running", "template": "minimal", "runtime": "ns", "created_at": "2026-12-07T01:02:03.123456789Z"}


def client(handler: Callable[[httpx.Request], httpx.Response], **kw: Any) -> ss.Client:
    return ss.Client("http://space.test", "k-1", http_client=httpx.Client(transport=httpx.MockTransport(handler)), **kw)


def aclient(handler: Callable[[httpx.Request], httpx.Response]) -> ss.AsyncClient:
    return ss.AsyncClient("http://space.test", "k-1", http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))


def err(status: int, code: str, message: str, reason: str = "") -> httpx.Response:
    body: Dict[str, str] = {"code": code, "message": message}
    if reason:
        body["reason"] = reason
    return httpx.Response(status, json=body)


@pytest.mark.parametrize(
    "status,code,cls",
    [
        (400, "invalid_argument", ss.InvalidArgument),
        (401, "unauthenticated", ss.Unauthenticated),
        (403, "permission_denied", ss.PermissionDenied),
        (404, "not_found", ss.NotFound),
        (409, "conflict", ss.Conflict),
        (409, "failed_precondition", ss.FailedPrecondition),
        (413, "too_large", ss.TooLarge),
        (429, "rate_limited", ss.RateLimited),
        (429, "resource_exhausted", ss.ResourceExhausted),
        (503, "unavailable", ss.Unavailable),
        (503, "refresh_route", ss.RefreshRoute),
        (501, "not_implemented", ss.NotImplemented),
        (500, "internal", ss.Internal),
    ],
)
def test_error_codes_become_their_exceptions(status: int, code: str, cls: type) -> None:
    c = client(lambda r: err(status, code, f"the server says {code}", "why"))
    with pytest.raises(cls) as ei:
        c.get_sandbox("sb-1")
    e = ei.value
    assert isinstance(e, ss.APIError) and isinstance(e, ss.SpaceError)
    assert (e.status, e.code, e.message, e.reason) == (status, code, f"the server says {code}", "why")
    assert f"the server says {code}" in str(e)


def test_unknown_code_is_internal_keeping_the_code() -> None:
    c = client(lambda r: err(418, "brand_new", "a newer server"))
    with pytest.raises(ss.Internal) as ei:
        c.get_sandbox("sb-1")
    assert ei.value.code == "brand_new" and ei.value.message == "a newer server"


def test_a_body_that_is_no_space_error_takes_its_code_from_the_status() -> None:
    c = client(lambda r: httpx.Response(404, content=b"<html>\x1b[31mnope</html>"))
    with pytest.raises(ss.NotFound) as ei:
        c.get_sandbox("sb-1")
    assert ei.value.code == "not_found"
    assert "Not Found" in ei.value.message and "\x1b" not in ei.value.message


def test_server_text_is_cleaned_of_control_characters() -> None:
    c = client(lambda r: err(409, "conflict", "state \x1b[2Jpaused\n\n  now"))
    with pytest.raises(ss.Conflict) as ei:
        c.get_sandbox("sb-1")
    assert ei.value.message == "state ?[2Jpaused now"


class Counter:
    """A handler answering from a list, counting the requests it saw."""

    def __init__(self, *answers: httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: List[httpx.Request] = []

    def __call__(self, r: httpx.Request) -> httpx.Response:
        self.requests.append(r)
        r.read()
        a = self.answers[min(len(self.requests), len(self.answers)) - 1]
        # A fresh answer each time: a Response's stream is consumed once.
        return httpx.Response(a.status_code, headers=a.headers, content=a.content)


REFRESH = err(503, "refresh_route", "the sandbox moved; retry")


def test_a_read_is_retried_once_on_refresh_route() -> None:
    h = Counter(REFRESH, httpx.Response(200, json=SB))
    assert client(h).get_sandbox("sb-1").id == "sb-1"
    assert len(h.requests) == 2


def test_a_read_is_retried_only_once() -> None:
    h = Counter(REFRESH, REFRESH, httpx.Response(200, json=SB))
    with pytest.raises(ss.RefreshRoute):
        client(h).get_sandbox("sb-1")
    assert len(h.requests) == 2


def test_exec_is_never_retried() -> None:
    h = Counter(REFRESH, httpx.Response(200, json={"exit_code": 0, "stdout": "", "stderr": ""}))
    sb = ss.Sandbox(client(h), ss.SandboxInfo.from_dict(SB))
    with pytest.raises(ss.RefreshRoute):
        sb.exec(["true"])
    assert len(h.requests) == 1


def test_create_without_idempotency_key_is_not_retried() -> None:
    h = Counter(REFRESH, httpx.Response(201, json=SB))
    with pytest.raises(ss.RefreshRoute):
        client(h).create_sandbox("minimal")
    assert len(h.requests) == 1


def test_create_with_idempotency_key_is_retried_once_with_the_same_key() -> None:
    h = Counter(REFRESH, httpx.Response(201, json=SB))
    assert client(h).create_sandbox("minimal", idempotency_key="idem-7").id == "sb-1"
    assert [r.headers.get("Idempotency-Key") for r in h.requests] == ["idem-7", "idem-7"]
    assert h.requests[0].content == h.requests[1].content


def test_other_errors_are_not_retried() -> None:
    h = Counter(err(503, "unavailable", "no capacity", "no_capacity"), httpx.Response(200, json=SB))
    with pytest.raises(ss.Unavailable) as ei:
        client(h).get_sandbox("sb-1")
    assert ei.value.reason == "no_capacity" and len(h.requests) == 1


def test_a_file_read_is_retried_and_an_upload_is_not() -> None:
    h = Counter(REFRESH, httpx.Response(200, content=b"data"))
    sb = ss.Sandbox(client(h), ss.SandboxInfo.from_dict(SB))
    assert sb.files.read("/f") == b"data" and len(h.requests) == 2
    h2 = Counter(REFRESH, httpx.Response(204))
    sb2 = ss.Sandbox(client(h2), ss.SandboxInfo.from_dict(SB))
    with pytest.raises(ss.RefreshRoute):
        sb2.files.write("/f", io.BytesIO(b"data"))
    assert len(h2.requests) == 1


def test_async_retry_rules_are_the_same() -> None:
    async def main() -> None:
        h = Counter(REFRESH, httpx.Response(200, json=SB))
        c = aclient(h)
        assert (await c.get_sandbox("sb-1")).id == "sb-1"
        assert len(h.requests) == 2
        h2 = Counter(REFRESH, httpx.Response(200, json={"exit_code": 0, "stdout": "", "stderr": ""}))
        sb = ss.AsyncSandbox(aclient(h2), ss.SandboxInfo.from_dict(SB))
        with pytest.raises(ss.RefreshRoute):
            await sb.exec(["true"])
        assert len(h2.requests) == 1

    asyncio.run(main())


def test_key_and_url_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPACE_API_URL", "http://from-env.test:7070/")
    monkeypatch.setenv("SPACE_API_KEY", "space_k-env")
    seen: List[httpx.Request] = []

    def h(r: httpx.Request) -> httpx.Response:
        seen.append(r)
        return httpx.Response(200, json={"sandboxes": [SB]})

    c = ss.Client(http_client=httpx.Client(transport=httpx.MockTransport(h)))
    assert c.api_url == "http://from-env.test:7070"
    assert [s.id for s in c.list_sandboxes()] == ["sb-1"]
    assert str(seen[0].url) == "http://from-env.test:7070/v1/sandboxes?limit=100"
    assert seen[0].headers["Authorization"] == "Bearer space_k-env"


def test_a_bad_url_is_refused() -> None:
    with pytest.raises(ValueError, match="api_url"):
        ss.Client("localhost:7070", "k")


def test_list_filters_and_pages_go_to_the_server() -> None:
    a = dict(SB, id="a", metadata={"team": "x", "k": "1"})
    b = dict(SB, id="b", state="paused", template="base", name="bee")
    seen: List[httpx.Request] = []

    def h(r: httpx.Request) -> httpx.Response:
        seen.append(r)
        if r.url.params.get("page_token") == "p2":
            return httpx.Response(200, json={"sandboxes": [b]})
        return httpx.Response(200, json={"sandboxes": [a], "next_page_token": "p2"})

    c = client(h)
    assert [s.id for s in c.list_sandboxes()] == ["a", "b"]
    assert [(r.url.params.get("limit"), r.url.params.get("page_token")) for r in seen] == [("100", None), ("100", "p2")]
    seen.clear()
    assert [s.id for s in c.iter_sandboxes(state="running", template="minimal", name="n", metadata={"team": "x", "k": "1"}, page_size=7)] == []
    q = seen[0].url.params
    assert (q["state"], q["template"], q["name"], q["limit"], q.get_list("metadata")) == ("running", "minimal", "n", "7", ["team=x", "k=1"])
    page, token = c.list_sandboxes_page(metadata={"team": "x"}, limit=1)
    assert [s.id for s in page] == ["a"] and token == "p2"
    # A server older than the filters answers every sandbox: the SDK keeps the matches.
    old = client(lambda r: httpx.Response(200, json={"sandboxes": [a, b]}))
    assert [s.id for s in old.list_sandboxes(state="paused")] == ["b"]
    assert [s.id for s in old.list_sandboxes(metadata={"team": "x"})] == ["a"]
    for bad, field in ((lambda: c.list_sandboxes_page(limit=0), "limit"), (lambda: c.list_sandboxes(state=""), "state"),
                       (lambda: c.list_sandboxes(metadata={"a=b": "c"}), "metadata")):
        with pytest.raises(ValueError, match=field):
            bad()


def test_create_sends_every_option() -> None:
    seen: List[Dict[str, Any]] = []

    def h(r: httpx.Request) -> httpx.Response:
        seen.append(json.loads(r.read()))
        return httpx.Response(201, json=SB)

    client(h).create_sandbox(
        "minimal", runtime="ns", name="n", cpus=2, memory_mib=256, disk_mib=1024, env={"A": "1"}, timeout=90,
        metadata={"m": "v"}, idle_timeout="5m", idle_action="hibernate",
        egress=ss.EgressPolicy(allow_internet=False, allow=ss.EgressRules(domains=["pypi.org"])),
        allow_internet_access=False, project="p-1",
    )
    assert seen[0] == {
        "template": "minimal", "runtime": "ns", "name": "n", "cpus": 2, "memory_mib": 256, "disk_mib": 1024,
        "env": {"A": "1"}, "timeout": "90s", "metadata": {"m": "v"}, "idle_timeout": "5m", "idle_action": "hibernate",
        "egress": {"allow_internet": False, "allow": {"domains": ["pypi.org"]}}, "allow_internet_access": False,
        "project": "p-1",
    }


def never(r: httpx.Request) -> httpx.Response:
    raise AssertionError(f"nothing should be sent: {r.method} {r.url}")


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda c: c.create_sandbox(runtime="docker"), "runtime"),
        (lambda c: c.create_sandbox(cpus=0), "cpus"),
        (lambda c: c.create_sandbox(memory_mib="512"), "memory_mib"),
        (lambda c: c.create_sandbox(timeout="ten minutes"), "timeout"),
        (lambda c: c.create_sandbox(timeout=-1), "timeout"),
        (lambda c: c.create_sandbox(idle_action="sleep"), "idle_action"),
        (lambda c: c.create_sandbox(env={"A": 1}), "env"),
        (lambda c: c.create_sandbox(project="a b"), "project"),
        (lambda c: c.get_sandbox(""), "sandbox_id"),
        (lambda c: c.create_sandbox(3), "template"),
        (lambda c: c.create_sandbox(name=3), "name"),
        (lambda c: c.create_sandbox(env={"A=B": "x"}), "env"),
        (lambda c: c.create_sandbox(env={"A": "x\x00"}), "env"),
        (lambda c: c.create_sandbox(idempotency_key=3), "idempotency_key"),
        (lambda c: c.create_sandbox(idempotency_key="two words"), "idempotency_key"),
        (lambda c: c.wait_for_state("sb-1", "sleeping"), "state"),
        (lambda c: ss.Client("http://space.test", "k", timeout=0), "timeout"),
        (lambda c: ss.Client("http://space.test", "k", timeout=-1), "timeout"),
        (lambda c: ss.AsyncClient("http://space.test", "k", timeout=True), "timeout"),
    ],
)
def test_bad_input_is_a_value_error_naming_the_field(call: Callable[[ss.Client], Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        call(client(never))


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda sb: sb.exec([]), "cmd"),
        (lambda sb: sb.exec(["ls", 3]), r"cmd\[1\]"),
        (lambda sb: sb.exec("true", timeout="1 minute"), "timeout"),
        (lambda sb: sb.exec("cat", stdin=b"\xff"), "stdin"),
        (lambda sb: sb.files.read(""), "path"),
        (lambda sb: sb.files.list("/", depth=0), "depth"),
        (lambda sb: sb.files.list_page("/", limit=0), "limit"),
        (lambda sb: sb.files.move("/a", ""), "destination"),
        (lambda sb: sb.files.write("/a", io.StringIO("text")), "binary"),
        (lambda sb: sb.create_snapshot("memory"), "kind"),
        (lambda sb: sb.rollback(""), "snapshot"),
        (lambda sb: sb.expose_port(70000), "port"),
        (lambda sb: sb.expose_port(80, protocol="udp"), "protocol"),
        (lambda sb: sb.set_timeout(""), "timeout"),
        (lambda sb: sb.exec("true", env={"A=B": "x"}), "env"),
        (lambda sb: sb.files.read("/tmp/a\x00b"), "path"),
        (lambda sb: sb.files.write("/" + "a" * 4096, b""), "path"),
        (lambda sb: sb.files.write("/a", 3), "data"),
        (lambda sb: sb.files.stat(3), "path"),
        (lambda sb: sb.files.move("/a\x00", "/b"), "source"),
        (lambda sb: sb.files.list_page("/", limit=10001), "limit"),
        (lambda sb: sb.fork(name=3), "name"),
        (lambda sb: sb.forward(80, local_port=-1), "local_port"),
        (lambda sb: sb.fork(snapshot=7), "snapshot"),
    ],
)
def test_bad_sandbox_input_is_a_value_error_naming_the_field(call: Callable[[ss.Sandbox], Any], field: str) -> None:
    sb = ss.Sandbox(client(never), ss.SandboxInfo.from_dict(SB))
    with pytest.raises(ValueError, match=field):
        call(sb)


def test_exec_body_and_http_timeout() -> None:
    seen: List[httpx.Request] = []

    def h(r: httpx.Request) -> httpx.Response:
        seen.append(r)
        return httpx.Response(200, json={"exit_code": 3, "stdout": "o", "stderr": "e", "truncated": True})

    sb = ss.Sandbox(client(h, timeout=5.0), ss.SandboxInfo.from_dict(SB))
    res = sb.exec("echo hi", env={"X": "1"}, cwd="/tmp", user="root", stdin="in", timeout=600)
    assert (res.exit_code, res.stdout, res.stderr, res.truncated) == (3, "o", "e", True)
    body = json.loads(seen[0].content)
    assert body == {"cmd": ["/bin/sh", "-c", "echo hi"], "env": {"X": "1"}, "cwd": "/tmp", "user": "root", "stdin": "in", "timeout": "600s"}
    # The HTTP read waits for the command's own timeout, with a margin.
    assert seen[0].extensions["timeout"]["read"] == 630.0


def test_an_answer_over_its_limit_is_refused() -> None:
    big = b'{"sandboxes": [' + b" " * (17 << 20) + b"]}"
    c = client(lambda r: httpx.Response(200, content=big))
    with pytest.raises(ss.SpaceError, match="larger than"):
        c.list_sandboxes()


def test_paths_are_escaped() -> None:
    seen: List[httpx.Request] = []

    def h(r: httpx.Request) -> httpx.Response:
        seen.append(r)
        return httpx.Response(200, json=SB)

    client(h).get_sandbox("../keys")
    assert seen[0].url.raw_path == b"/v1/sandboxes/..%2Fkeys"


def test_files_stat_asks_the_stat_route() -> None:
    def h(r: httpx.Request) -> httpx.Response:
        assert r.url.path == "/v1/sandboxes/sb-1/files/stat"
        if r.url.params["path"] == "/d/b":
            return httpx.Response(200, json={"name": "b", "path": "/d/b", "type": "dir", "size": 4096})
        return err(404, "not_found", "stat /d/c: no such file")

    sb = ss.Sandbox(client(h), ss.SandboxInfo.from_dict(SB))
    e = sb.files.stat("/d/b")
    assert (e.name, e.type, e.size) == ("b", "dir", 4096)
    with pytest.raises(ss.NotFound):
        sb.files.stat("/d/c")
    assert sb.files.exists("/d/b") and not sb.files.exists("/d/c")


def test_times_parse_with_nanoseconds() -> None:
    info = ss.SandboxInfo.from_dict(SB)
    assert info.created_at is not None and info.created_at.microsecond == 123456 and info.created_at.utcoffset() is not None


def test_the_async_surface_is_the_sync_one() -> None:
    """Every public method of Client, Sandbox and Files has an async twin with
    the same parameters (close is aclose, as httpx names it)."""
    pairs = [
        (ss.Client, ss.AsyncClient), (ss.Sandbox, ss.AsyncSandbox), (ss.Files, ss.AsyncFiles),
        (ss.ExecStream, ss.AsyncExecStream), (ss.FileWatch, ss.AsyncFileWatch), (ss.PortForward, ss.AsyncPortForward),
    ]
    for sync, asyn in pairs:
        for name, fn in inspect.getmembers(sync, inspect.isfunction):
            if name.startswith("_") and name not in ("__enter__", "__exit__", "__iter__"):
                continue
            twin = {"close": "aclose", "__enter__": "__aenter__", "__exit__": "__aexit__", "__iter__": "__aiter__"}.get(name, name)
            afn = getattr(asyn, twin, None)
            assert afn is not None, f"{asyn.__name__} has no {twin}"
            assert inspect.iscoroutinefunction(afn) or inspect.isasyncgenfunction(afn), f"{asyn.__name__}.{twin} is not async"
            sp = [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]
            ap = [(p.name, p.kind, p.default) for p in inspect.signature(afn).parameters.values()]
            assert sp == ap, f"{twin}: {sp} != {ap}"


def test_durations() -> None:
    from space_sandbox._core import duration, seconds_of

    assert duration("t", 90) == "90s" and duration("t", 1.5) == "1500ms" and duration("t", 0) == "0"
    assert duration("t", "1h30m") == "1h30m" and duration("t", None) == ""
    assert seconds_of("1h30m") == 5400 and seconds_of("250ms") == 0.25


def test_set_timeout_zero_removes_it() -> None:
    seen: List[Any] = []

    def h(r: httpx.Request) -> httpx.Response:
        seen.append(json.loads(r.read()))
        return httpx.Response(200, json=SB)

    sb = ss.Sandbox(client(h), ss.SandboxInfo.from_dict(SB))
    sb.set_timeout(0)
    sb.set_timeout("30m")
    assert seen == [{"timeout": "0"}, {"timeout": "30m"}]


def test_a_body_that_cannot_be_sent_again_is_not_replayed() -> None:
    from space_sandbox._core import Req

    assert Req("POST", "/x", content=io.BytesIO(b"d"), idempotency_key="k").replayable()
    assert Req("POST", "/x", content=b"d", idempotency_key="k").replayable()
    assert not Req("POST", "/x", content=(b for b in [b"d"]), idempotency_key="k").replayable()
    assert not Req("GET", "/x", content=iter([b"d"])).replayable()
    assert not Req("POST", "/x", json={"a": 1}).replayable()


def test_a_replayed_file_body_is_sent_whole_again() -> None:
    from space_sandbox._core import Req

    bodies: List[bytes] = []

    def h(r: httpx.Request) -> httpx.Response:
        bodies.append(r.read())
        return REFRESH if len(bodies) == 1 else httpx.Response(204)

    c = client(h)
    f = io.BytesIO(b"skip:payload")
    f.seek(5)
    c._call(Req("PUT", "/v1/x", content=f, idempotency_key="k"))
    assert bodies == [b"payload", b"payload"]


def test_stream_start_message_and_decoder() -> None:
    from space_sandbox._core import exec_body
    from space_sandbox._stream import _Decoder, start_message

    body = exec_body(["sh"], env={"A": "1"}, cwd="/w", user="u", stdin=None, timeout=None)
    assert start_message(body, True, 80, 24) == {"cmd": ["sh"], "env": {"A": "1"}, "cwd": "/w", "user": "u", "tty": True, "cols": 80, "rows": 24}
    with pytest.raises(ValueError, match="tty"):
        start_message(body, False, 80, None)
    with pytest.raises(ValueError, match="rows"):
        start_message(body, True, 80, 0)
    d = _Decoder()
    assert d.handle('{"type":"started","pid":42}') is None and d.pid == 42
    out = d.handle('{"type":"stdout","data":"aGk="}')
    assert out is not None and (out.stream, out.data) == ("stdout", b"hi")
    assert d.handle('{"type":"newer-kind"}') is None and not d.done
    assert d.handle('{"type":"exit","exit_code":3}') is None and d.done and d.exit_code == 3
    with pytest.raises(ss.StreamError, match=r"^boom\?\[0m$"):
        _Decoder().handle('{"type":"error","message":"boom\\u001b[0m"}')
    with pytest.raises(ss.StreamError, match="exit_code"):
        _Decoder().handle('{"type":"exit"}')


def test_stdin_is_sent_in_chunks() -> None:
    import base64

    from space_sandbox._stream import STDIN_CHUNK, _stdin_chunks

    msgs = [json.loads(m) for m in _stdin_chunks(b"x" * (STDIN_CHUNK * 2 + 1))]
    assert [len(base64.b64decode(m["data"])) for m in msgs] == [STDIN_CHUNK, STDIN_CHUNK, 1]
    assert all(m["type"] == "stdin" for m in msgs)


def test_signal_numbers_are_checked() -> None:
    from space_sandbox._stream import signal_number

    assert signal_number(15) == 15
    with pytest.raises(ValueError, match="signal"):
        signal_number(0)


def recorder(answer: Any) -> "tuple[List[httpx.Request], Callable[[httpx.Request], httpx.Response]]":
    seen: List[httpx.Request] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(r)
        if answer is None:
            return httpx.Response(204)
        if isinstance(answer, bytes):
            return httpx.Response(200, content=answer)
        return httpx.Response(200, json=answer)

    return seen, handler


ADMIN_CALLS = [
    ("set_quota", ("t-1",), {"max_sandboxes": 3, "max_cpus": 2}, "PUT", "/v1/tenants/t-1/quota", {},
     {"max_sandboxes": 3, "max_memory_mib": 0, "max_cpus": 2}, {"id": "t-1", "name": "a", "quota": {"max_sandboxes": 3}}),
    ("set_template_egress", ("py t",), {"egress": {"allow_internet": False}}, "PUT", "/v1/templates/py%20t/egress", {},
     {"allow_internet": False}, {"name": "py t", "egress": {"allow_internet": False}}),
    ("set_template_egress", ("base",), {"egress": None}, "PUT", "/v1/templates/base/egress", {}, None, {"name": "base"}),
    ("list_nodes", (), {}, "GET", "/v1/nodes", {}, None, {"nodes": [{"id": "n1", "state": "ready", "runtimes": ["ns"], "live": True}]}),
    ("drain_node", ("n/1",), {}, "POST", "/v1/nodes/n%2F1/drain", {}, None, {"id": "n/1", "state": "draining"}),
    ("undrain_node", ("n1",), {}, "POST", "/v1/nodes/n1/undrain", {}, None, {"id": "n1", "state": "ready"}),
    ("list_signing_keys", (), {}, "GET", "/v1/signing-keys", {}, None, {"version": 4, "keys": [{"id": "k1", "signing": True}]}),
    ("rotate_signing_key", (), {}, "POST", "/v1/signing-keys/rotate", {}, None, {"id": "k2", "active_at": "2026-12-07T01:02:03Z"}),
    ("list_encryption_keys", ("t-1",), {}, "GET", "/v1/tenants/t-1/encryption-keys", {}, None, {"keys": [{"id": "kek-1", "tenant": "t-1"}]}),
    ("revoke_encryption_key", ("t-1", "kek-1"), {}, "DELETE", "/v1/tenants/t-1/encryption-keys/kek-1", {}, None, None),
    ("credential_audit", (), {"sandbox": "sb-1", "limit": 7}, "GET", "/v1/credentials/audit", {"sandbox": "sb-1", "limit": "7"}, None,
     {"entries": [{"time": "2026-12-07T01:02:03Z", "tenant": "t-1", "host": "api.test", "allowed": False, "reason": "rate limited", "count": 2}]}),
]


@pytest.mark.parametrize("name,args,kw,method,path,query,body,answer", ADMIN_CALLS)
def test_admin_calls_send_their_route(name: str, args: Any, kw: Any, method: str, path: str, query: Dict[str, str], body: Any, answer: Any) -> None:
    seen, handler = recorder(answer)
    got = getattr(client(handler), name)(*args, **kw)
    aseen, ahandler = recorder(answer)

    async def run() -> Any:
        return await getattr(aclient(ahandler), name)(*args, **kw)

    agot = asyncio.run(run())
    assert got == agot
    for r in (seen[0], aseen[0]):
        assert (r.method, r.url.raw_path.decode().split("?")[0], dict(r.url.params)) == (method, path, query)
        if method == "PUT":
            assert r.headers["content-type"] == "application/json"
            assert json.loads(r.content) == body
    if name == "credential_audit":
        assert got[0].host == "api.test" and got[0].allowed is False and got[0].count == 2 and got[0].time is not None
    if name == "list_nodes":
        assert got[0].runtimes == ["ns"] and got[0].live
    if name == "list_signing_keys":
        assert got.version == 4 and got.keys[0].signing


def test_ca_certificate_is_the_pem_text() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    seen, handler = recorder(pem)
    c = client(handler)
    sb = ss.Sandbox(c, ss.SandboxInfo.from_dict(SB))
    assert sb.ca_certificate() == pem.decode()
    assert seen[0].url.path == "/v1/sandboxes/sb-1/ca.pem"


@pytest.mark.parametrize(
    "call,field",
    [
        (lambda c: c.set_quota("t-1", max_sandboxes=-1), "max_sandboxes"),
        (lambda c: c.set_quota("t-1", max_memory_mib=1.5), "max_memory_mib"),
        (lambda c: c.set_quota("", max_cpus=1), "tenant_id"),
        (lambda c: c.credential_audit(limit=0), "limit"),
        (lambda c: c.credential_audit(limit=1001), "limit"),
        (lambda c: c.credential_audit(credential=""), "credential"),
        (lambda c: c.revoke_encryption_key("t-1", ""), "key_id"),
        (lambda c: c.undrain_node(""), "node_id"),
        (lambda c: c.set_template_egress("", None), "name"),
    ],
)
def test_bad_admin_input_is_a_value_error_naming_the_field(call: Callable[[ss.Client], Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        call(client(never))


def test_every_public_name_is_documented() -> None:
    # The API reference (pdoc, docs/python/) is made from these docstrings.
    missing = []
    for name in ss.__all__:
        obj = getattr(ss, name)
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if not inspect.isclass(obj):
            continue
        for attr, v in vars(obj).items():
            if attr.startswith("_"):
                continue
            fn = v.__func__ if isinstance(v, (classmethod, staticmethod)) else v.fget if isinstance(v, property) else v
            if callable(fn) and not (getattr(fn, "__doc__", None) or "").strip():
                missing.append(f"{name}.{attr}")
    assert missing == [], "public names without a docstring (the API reference shows them empty)"


def code_stream(*events: Dict[str, Any]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


CODE_EVENTS = (
    {"type": "stdout", "text": "hello\n"},
    {"type": "stderr", "text": "warn\n"},
    {"type": "result", "result": {"main": False, "png": "iVBORw0=", "text": "<Figure>"}},
    {"type": "result", "result": {"main": True, "text": "42", "json": {"a": 1}, "extra": {"application/x-y": "z"}}},
    {"type": "error", "error": {"name": "ValueError", "value": "bad", "traceback": "Traceback ..."}},
    {"type": "execution_count", "execution_count": 3},
    {"type": "end"},
)


def test_run_code_streams_events_to_callbacks_and_the_execution() -> None:
    seen: List[Any] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append((r.method, r.url.path, json.loads(r.content)))
        # The stream arrives in pieces that cut events in two.
        body = code_stream(*CODE_EVENTS)
        return httpx.Response(200, stream=httpx.ByteStream(body), headers={"content-type": "application/x-ndjson"})

    sb = ss.Sandbox(client(handler), ss.SandboxInfo.from_dict(SB))
    got: List[Any] = []
    ex = sb.run_code(
        "print('hello')", language="python", env={"A": "1"}, timeout=5,
        on_stdout=lambda t: got.append(("out", t)), on_stderr=lambda t: got.append(("err", t)),
        on_result=lambda r: got.append(("res", r.text)), on_error=lambda e: got.append(("error", e.name)),
    )
    assert seen == [("POST", "/v1/sandboxes/sb-1/code", {"code": "print('hello')", "language": "python", "env": {"A": "1"}, "timeout": "5s"})]
    assert got == [("out", "hello\n"), ("err", "warn\n"), ("res", "<Figure>"), ("res", "42"), ("error", "ValueError")]
    assert ex.text == "42" and ex.execution_count == 3
    assert ex.logs.stdout == ["hello\n"] and ex.logs.stderr == ["warn\n"]
    assert ex.results[0].formats() == ["text", "png"] and ex.results[1].formats() == ["text", "json", "application/x-y"]
    assert ex.error == ss.CodeError("ValueError", "bad", "Traceback ...")


def test_run_code_decoder_takes_events_split_across_chunks() -> None:
    from space_sandbox import _core

    dec = _core.CodeDecoder(None, None, None, None)
    body = code_stream(*CODE_EVENTS)
    for i in range(len(body)):
        dec.feed(body[i : i + 1])
    ex = dec.finish()
    assert ex.text == "42" and ex.execution_count == 3 and ex.error is not None


def test_run_code_stream_without_end_is_an_error() -> None:
    body = code_stream({"type": "stdout", "text": "x"})
    sb = ss.Sandbox(client(lambda r: httpx.Response(200, content=body)), ss.SandboxInfo.from_dict(SB))
    with pytest.raises(ss.SpaceError, match="ended before the execution's end event"):
        sb.run_code("x")


def test_run_code_event_over_its_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from space_sandbox import _core

    monkeypatch.setattr(_core, "MAX_CODE_EVENT", 100)
    body = b'{"type":"stdout","text":"' + b"x" * 500
    sb = ss.Sandbox(client(lambda r: httpx.Response(200, content=body)), ss.SandboxInfo.from_dict(SB))
    with pytest.raises(ss.SpaceError, match="over 100 bytes"):
        sb.run_code("x")


def test_run_code_is_never_retried() -> None:
    calls: List[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        calls.append(r.url.path)
        return err(503, "refresh_route", "moved")

    sb = ss.Sandbox(client(handler), ss.SandboxInfo.from_dict(SB))
    with pytest.raises(ss.RefreshRoute):
        sb.run_code("1")
    assert calls == ["/v1/sandboxes/sb-1/code"]


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"language": "python", "context": "c-1"}, "language and context"),
        ({"language": ""}, "language"),
        ({"context": ""}, "context"),
        ({"timeout": "soon"}, "timeout"),
        ({"env": {"A": 1}}, "env"),
    ],
)
def test_run_code_bad_input_is_a_value_error(kw: Dict[str, Any], field: str) -> None:
    sb = ss.Sandbox(client(lambda r: httpx.Response(500)), ss.SandboxInfo.from_dict(SB))
    with pytest.raises(ValueError, match=field):
        sb.run_code("1", **kw)


def test_code_contexts_routes() -> None:
    seen: List[Any] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append((r.method, r.url.raw_path.decode(), r.content.decode()))
        if r.method == "POST" and r.url.path.endswith("/contexts"):
            return httpx.Response(201, json={"id": "c 1", "language": "bash", "cwd": "/tmp"})
        if r.method == "GET":
            return httpx.Response(200, json={"contexts": [{"id": "c 1", "language": "bash", "cwd": "/tmp"}]})
        return httpx.Response(204)

    sb = ss.Sandbox(client(handler), ss.SandboxInfo.from_dict(SB))
    c = sb.create_code_context(language="bash", cwd="/tmp")
    assert c == ss.CodeContext("c 1", "bash", "/tmp")
    assert sb.list_code_contexts() == [c]
    sb.restart_code_context(c.id)
    sb.delete_code_context(c.id)
    assert [(m, p) for m, p, _ in seen] == [
        ("POST", "/v1/sandboxes/sb-1/code/contexts"), ("GET", "/v1/sandboxes/sb-1/code/contexts"),
        ("POST", "/v1/sandboxes/sb-1/code/contexts/c%201/restart"), ("DELETE", "/v1/sandboxes/sb-1/code/contexts/c%201"),
    ]
    assert json.loads(seen[0][2]) == {"language": "bash", "cwd": "/tmp"}


def test_async_run_code_and_contexts() -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        if r.url.path.endswith("/code"):
            return httpx.Response(200, stream=httpx.ByteStream(code_stream(*CODE_EVENTS)))
        return httpx.Response(200, json={"contexts": [{"id": "c-1", "language": "python"}]})

    async def main() -> None:
        sb = ss.AsyncSandbox(aclient(handler), ss.SandboxInfo.from_dict(SB))
        out: List[str] = []
        ex = await sb.run_code("1", on_stdout=out.append)
        assert ex.text == "42" and out == ["hello\n"]
        assert [c.id for c in await sb.list_code_contexts()] == ["c-1"]

    asyncio.run(main())


def test_build_template_takes_a_builtin_name() -> None:
    sent: List[Any] = []

    def handler(r: httpx.Request) -> httpx.Response:
        sent.append(json.loads(r.content))
        return httpx.Response(202, json={"name": "code-interpreter", "state": "building"})

    c = client(handler)
    c.build_template("code-interpreter", "code-interpreter", wait=False)
    assert sent == [{"name": "code-interpreter", "from": "code-interpreter"}]
    for bad in ("/no/scheme", "Code Interpreter", ""):
        with pytest.raises(ValueError, match="source"):
            c.build_template("x", bad)
    assert len(sent) == 1


def test_run_code_without_keep_logs_gives_output_to_the_callbacks_alone() -> None:
    body = code_stream(*CODE_EVENTS)
    sb = ss.Sandbox(client(lambda r: httpx.Response(200, stream=httpx.ByteStream(body))), ss.SandboxInfo.from_dict(SB))
    out: List[str] = []
    err_: List[str] = []
    ex = sb.run_code("x", on_stdout=out.append, on_stderr=err_.append, keep_logs=False)
    assert out == ["hello\n"] and err_ == ["warn\n"]
    assert ex.logs.stdout == [] and ex.logs.stderr == [] and ex.text == "42" and ex.error is not None
    with pytest.raises(ValueError, match="keep_logs"):
        sb.run_code("x", keep_logs="no")  # type: ignore[arg-type]


def test_list_processes_asks_the_processes_route() -> None:
    answer = {"processes": [{"pid": 7, "cmd": "python3", "args": ["-m", "http.server"], "cwd": "/work", "tag": "agent"},
                            {"pid": 31, "cmd": "/bin/bash", "args": ["-l"]}]}

    def h(r: httpx.Request) -> httpx.Response:
        assert (r.method, r.url.path) == ("GET", "/v1/sandboxes/sb-1/processes")
        return httpx.Response(200, json=answer)

    want = [ss.Process(pid=7, cmd="python3", args=["-m", "http.server"], cwd="/work", tag="agent"),
            ss.Process(pid=31, cmd="/bin/bash", args=["-l"])]
    assert ss.Sandbox(client(h), ss.SandboxInfo.from_dict(SB)).list_processes() == want

    async def main() -> None:
        async with aclient(h) as c:
            assert await ss.AsyncSandbox(c, ss.SandboxInfo.from_dict(SB)).list_processes() == want

    asyncio.run(main())


def test_a_file_page_may_be_as_large_as_the_server_serves() -> None:
    seen: List[httpx.Request] = []

    def h(r: httpx.Request) -> httpx.Response:
        seen.append(r)
        return httpx.Response(200, json={"entries": []})

    ss.Sandbox(client(h), ss.SandboxInfo.from_dict(SB)).files.list_page("/", limit=10000)
    assert seen[0].url.params["limit"] == "10000"
