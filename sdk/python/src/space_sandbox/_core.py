"""What the sync and async clients share: building requests, validating input
before it is sent, the route-repair retry rule, and the limits on answers."""

from __future__ import annotations

import io
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote

from . import errors
from .models import CodeError, CodeResult, EgressPolicy, Execution

DEFAULT_API_URL = "http://127.0.0.1:7070"

#: An ordinary JSON answer is read up to this many bytes.
MAX_JSON_BODY = 16 << 20
#: A run-to-completion exec answer: two 16 MiB captures, JSON-escaped.
MAX_EXEC_BODY = 200 << 20
#: The body of an error answer.
MAX_ERROR_BODY = 64 << 10

#: The longest path the file API takes, in bytes (UTF-8).
MAX_PATH = 4096
#: The longest Idempotency-Key sent.
MAX_IDEMPOTENCY_KEY = 255

#: The largest page of a directory listing the server serves.
MAX_FILE_PAGE = 10000

#: Every state a sandbox can be in (api/sandbox/v1).
STATES = (
    "creating", "running", "pausing", "paused", "resuming", "hibernating", "hibernated",
    "restoring", "recovering", "stopping", "stopped", "deleting", "deleted", "failed",
)

#: Lifecycle verbs and the state each one settles in.
TARGET_STATE = {
    "pause": "paused",
    "resume": "running",
    "stop": "stopped",
    "start": "running",
    "hibernate": "hibernated",
    "restore": "running",
    "rollback": "running",
}

#: States a wait gives up in: the sandbox will not reach another.
TERMINAL_STATES = ("failed", "deleting", "deleted")

#: The name of one of the server's built-in templates, as a template source.
BUILTIN_NAME = re.compile(r"^[a-z][a-z0-9-]*$")

_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")

Body = Union[bytes, str, io.IOBase, Iterable[bytes], None]


@dataclass
class Req:
    """One HTTP call, independent of the client that sends it."""

    method: str
    path: str
    #: The query: a mapping, or pairs when a name repeats.
    params: Union[Dict[str, str], Tuple[Tuple[str, str], ...]] = field(default_factory=dict)
    json: Optional[Any] = None
    content: Any = None
    idempotency_key: str = ""
    limit: int = MAX_JSON_BODY
    #: Where a seekable body starts (see mark and rewind).
    start: int = 0
    #: The Content-Type of ``content`` when it is not opaque bytes.
    content_type: str = ""

    def __post_init__(self) -> None:
        k = self.idempotency_key
        if not isinstance(k, str) or not all(" " < c < "\x7f" for c in k) or len(k) > MAX_IDEMPOTENCY_KEY:
            raise ValueError(f"idempotency_key {k!r}: want a string of at most {MAX_IDEMPOTENCY_KEY} printable ASCII characters, no spaces")

    def replayable(self) -> bool:
        """Whether the request may be sent again after ``refresh_route``: a read,
        or one carrying an Idempotency-Key, whose body can be sent again (none,
        JSON, bytes, or a seekable file)."""
        if self.content is not None and not isinstance(self.content, (bytes, str)) and not _seekable(self.content):
            return False
        if self.method in ("GET", "HEAD"):
            return True
        return self.idempotency_key != ""

    def rewind(self) -> None:
        """Puts a seekable body back at the position it started from."""
        if self.content is not None and not isinstance(self.content, (bytes, str)):
            self.content.seek(self.start)

    def mark(self) -> None:
        """Remembers where a seekable body starts, for :meth:`rewind`."""
        if self.content is not None and not isinstance(self.content, (bytes, str)) and _seekable(self.content):
            self.start = self.content.tell()

    def headers(self) -> Dict[str, str]:
        h: Dict[str, str] = {}
        if self.json is not None:
            h["Content-Type"] = "application/json"
        elif self.content is not None:
            h["Content-Type"] = self.content_type or "application/octet-stream"
        if self.idempotency_key:
            h["Idempotency-Key"] = self.idempotency_key
        return h


def _seekable(f: Any) -> bool:
    try:
        return bool(f.seekable())
    except (AttributeError, OSError, ValueError):
        return False


def resolve_config(api_url: Optional[str], api_key: Optional[str]) -> Tuple[str, str]:
    """The server URL and key: the arguments, else ``SPACE_API_URL`` and
    ``SPACE_API_KEY``, else the CLI's default URL and no key."""
    url = api_url if api_url is not None else os.environ.get("SPACE_API_URL", "") or DEFAULT_API_URL
    key = api_key if api_key is not None else os.environ.get("SPACE_API_KEY", "")
    url = url.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError(f"api_url {url!r}: want http://host[:port] or https://host[:port] (SPACE_API_URL)")
    return url, key.strip()


def segment(what: str, v: str) -> str:
    """Escapes one path element, refusing an empty one (it would address another route)."""
    if not isinstance(v, str) or v == "":
        raise ValueError(f"{what} is empty")
    return quote(v, safe="")


def sandbox_path(sandbox_id: str, suffix: str = "") -> str:
    return "/v1/sandboxes/" + segment("sandbox_id", sandbox_id) + suffix


def duration(name: str, v: Union[str, int, float, None]) -> str:
    """A duration as the server takes it (a Go duration: "90s", "30m", "1h30m").
    Numbers are seconds. None and "" mean none."""
    if v is None:
        return ""
    if isinstance(v, bool):
        raise ValueError(f"{name}: want a duration such as '30m' or a number of seconds, not a bool")
    if isinstance(v, (int, float)):
        if v < 0:
            raise ValueError(f"{name} {v}: want 0 or more seconds")
        if v == 0:
            return "0"
        if float(v).is_integer():
            return f"{int(v)}s"
        return f"{round(v * 1000)}ms"
    if not isinstance(v, str):
        raise ValueError(f"{name}: want a duration such as '30m' or a number of seconds")
    if v == "" or v == "0":
        return v
    if not _DURATION.match(v):
        raise ValueError(f"{name} {v!r}: want a duration such as '90s', '30m' or '1h30m', or a number of seconds")
    return v


def _str_map(name: str, m: Optional[Mapping[str, str]], env: bool = False) -> Optional[Dict[str, str]]:
    """A mapping of strings, checked; ``env`` adds the rules of environment
    variables (no '=' or NUL in a name, no NUL in a value)."""
    if m is None:
        return None
    if not isinstance(m, Mapping):
        raise ValueError(f"{name}: want a mapping of strings to strings")
    out: Dict[str, str] = {}
    for k, v in m.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"{name}[{k!r}]: keys and values must be strings")
        if k == "":
            raise ValueError(f"{name}: a key is empty")
        if env and ("=" in k or "\x00" in k):
            raise ValueError(f"{name}[{k!r}]: a variable name must not contain '=' or NUL")
        if env and "\x00" in v:
            raise ValueError(f"{name}[{k!r}]: the value must not contain NUL")
        out[k] = v
    return out


def _count(name: str, v: Optional[int]) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} {v!r}: want a whole number of 1 or more")
    return v


def create_body(
    *,
    template: Optional[str],
    runtime: Optional[str],
    name: Optional[str],
    cpus: Optional[int],
    memory_mib: Optional[int],
    disk_mib: Optional[int],
    env: Optional[Mapping[str, str]],
    timeout: Union[str, int, float, None],
    metadata: Optional[Mapping[str, str]],
    idle_timeout: Union[str, int, float, None],
    idle_action: Optional[str],
    egress: Union[EgressPolicy, Mapping[str, Any], None],
    allow_internet_access: Optional[bool],
    project: Optional[str],
) -> Dict[str, Any]:
    """The body of ``POST /v1/sandboxes``, validated."""
    body: Dict[str, Any] = {}
    opt_str("template", template)
    opt_str("name", name)
    if template:
        body["template"] = template
    if runtime:
        if runtime not in ("vm", "ns"):
            raise ValueError(f"runtime {runtime!r}: want 'vm' or 'ns' (or None for the server's default)")
        body["runtime"] = runtime
    if name:
        body["name"] = name
    for key, val in (("cpus", cpus), ("memory_mib", memory_mib), ("disk_mib", disk_mib)):
        n = _count(key, val)
        if n:
            body[key] = n
    e = _str_map("env", env, env=True)
    if e:
        body["env"] = e
    t = duration("timeout", timeout)
    if t not in ("", "0"):
        body["timeout"] = t
    md = _str_map("metadata", metadata)
    if md:
        body["metadata"] = md
    it = duration("idle_timeout", idle_timeout)
    if it not in ("", "0"):
        body["idle_timeout"] = it
    if idle_action:
        if idle_action not in ("pause", "hibernate"):
            raise ValueError(f"idle_action {idle_action!r}: want 'pause' or 'hibernate'")
        body["idle_action"] = idle_action
    if egress is not None:
        body["egress"] = egress_body(egress)
    if allow_internet_access is not None:
        if not isinstance(allow_internet_access, bool):
            raise ValueError("allow_internet_access: want True or False")
        body["allow_internet_access"] = allow_internet_access
    if project:
        if not re.match(r"^[A-Za-z0-9._-]+$", project):
            raise ValueError(f"project {project!r}: letters, digits, '.', '_' and '-' only")
        body["project"] = project
    return body


def egress_body(egress: Union[EgressPolicy, Mapping[str, Any]]) -> Dict[str, Any]:
    if isinstance(egress, EgressPolicy):
        return egress.to_dict()
    if isinstance(egress, Mapping):
        if not isinstance(egress.get("allow_internet", False), bool):
            raise ValueError("egress.allow_internet: want True or False")
        return dict(egress)
    raise ValueError("egress: want an EgressPolicy or a mapping like {'allow_internet': False}")


def exec_body(
    cmd: Union[str, Sequence[str]],
    *,
    env: Optional[Mapping[str, str]],
    cwd: Optional[str],
    user: Optional[str],
    stdin: Union[str, bytes, None],
    timeout: Union[str, int, float, None],
) -> Dict[str, Any]:
    """The body of ``POST /v1/sandboxes/{id}/exec``. A string command runs with ``/bin/sh -c``."""
    if isinstance(cmd, str):
        if cmd == "":
            raise ValueError("cmd is empty")
        argv: List[str] = ["/bin/sh", "-c", cmd]
    else:
        argv = list(cmd)
        if not argv:
            raise ValueError("cmd is empty: want a program and its arguments, e.g. ['ls', '-l']")
        for i, a in enumerate(argv):
            if not isinstance(a, str):
                raise ValueError(f"cmd[{i}]: want a string, got {type(a).__name__}")
        if argv[0] == "":
            raise ValueError("cmd[0] is empty: want the program to run")
    body: Dict[str, Any] = {"cmd": argv}
    e = _str_map("env", env, env=True)
    if e:
        body["env"] = e
    if cwd:
        body["cwd"] = cwd
    if user:
        body["user"] = user
    if stdin is not None:
        if isinstance(stdin, bytes):
            try:
                stdin = stdin.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError("stdin: run-to-completion exec takes text (UTF-8) input only") from exc
        if stdin:
            body["stdin"] = stdin
    t = duration("timeout", timeout)
    if t:
        body["timeout"] = t
    return body


def opt_str(name: str, v: Optional[str]) -> Optional[str]:
    """v when it is None or a string; a ValueError naming the field otherwise."""
    if v is not None and not isinstance(v, str):
        raise ValueError(f"{name}: want a string, got {type(v).__name__}")
    return v


def path_arg(name: str, path: str) -> str:
    """A path for the file API: a non-empty string of at most 4096 bytes
    without NUL (the guest resolves it, relative ones against the user's home)."""
    if not isinstance(path, str):
        raise ValueError(f"{name}: want a string, got {type(path).__name__}")
    if path == "":
        raise ValueError(f"{name} is empty")
    if "\x00" in path:
        raise ValueError(f"{name} {path!r}: must not contain NUL")
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH:
        raise ValueError(f"{name}: longer than {MAX_PATH} bytes")
    return path


def state_arg(state: str) -> str:
    """A sandbox state to wait for or filter by, one the server knows."""
    if state not in STATES:
        raise ValueError(f"state {state!r}: want one of {', '.join(STATES)}")
    return state


def client_timeout(timeout: float) -> float:
    """The client's HTTP timeout: seconds, more than 0."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout {timeout!r}: want a number of seconds more than 0")
    return float(timeout)


def local_port_arg(port: int) -> int:
    """A local port to listen on: 0 (any free one) to 65535."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"local_port {port!r}: want 0 (any free port) to 65535")
    return port


def move_params(source: str, destination: str, user: Optional[str]) -> Dict[str, str]:
    p = {"from": path_arg("source", source), "to": path_arg("destination", destination)}
    if user:
        p["user"] = user
    return p


def file_params(path: str, user: Optional[str] = None) -> Dict[str, str]:
    p = {"path": path_arg("path", path)}
    if user:
        p["user"] = user
    return p


def list_params(path: str, depth: Optional[int], limit: Optional[int], page_token: Optional[str], user: Optional[str]) -> Dict[str, str]:
    p = file_params(path, user)
    if depth is not None:
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 32:
            raise ValueError(f"depth {depth!r}: want 1..32")
        p["depth"] = str(depth)
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_FILE_PAGE:
            raise ValueError(f"limit {limit!r}: want 1..{MAX_FILE_PAGE}")
        p["limit"] = str(limit)
    if page_token:
        p["page_token"] = page_token
    return p


def write_content(data: Body, encoding: str = "utf-8") -> Any:
    """The body of a file upload: bytes and text are sent whole, a binary file
    object or an iterable of bytes is streamed as it is read."""
    if isinstance(data, str):
        return data.encode(encoding)
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if data is None:
        raise ValueError("data is None: want bytes, str, a binary file or an iterable of bytes")
    if isinstance(data, io.TextIOBase):
        raise ValueError("data is a text file: open it in binary mode ('rb')")
    if not isinstance(data, io.IOBase) and not hasattr(data, "read") and not hasattr(data, "__iter__") and not hasattr(data, "__aiter__"):
        raise ValueError(f"data: want bytes, str, a binary file or an iterable of bytes, got {type(data).__name__}")
    return data


def kind_of(kind: str) -> str:
    if kind not in ("disk", "full"):
        raise ValueError(f"kind {kind!r}: want 'disk' or 'full'")
    return kind


def port_body(port: int, protocol: str, public: bool) -> Dict[str, Any]:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port {port!r}: want 1..65535")
    if protocol not in ("http", "tcp"):
        raise ValueError(f"protocol {protocol!r}: want 'http' or 'tcp'")
    body: Dict[str, Any] = {"port": port, "protocol": protocol}
    if public:
        body["public"] = True
    return body


def matches(info: Any, state: Optional[str], template: Optional[str], name: Optional[str], metadata: Optional[Mapping[str, str]]) -> bool:
    """Whether a sandbox passes the list filters."""
    if state is not None and info.state != state:
        return False
    if template is not None and info.template != template:
        return False
    if name is not None and info.name != name:
        return False
    if metadata:
        for k, v in metadata.items():
            if info.metadata.get(k) != v:
                return False
    return True


def api_error(status: int, body: bytes) -> errors.APIError:
    return errors.from_response(status, body)


_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def seconds_of(d: str) -> float:
    """The length of a duration string as :func:`duration` returns it."""
    if d in ("", "0"):
        return 0.0
    total = 0.0
    for num, _, unit in re.findall(r"([0-9]+(\.[0-9]+)?)(ns|us|µs|ms|s|m|h)", d):
        total += float(num) * _UNIT[unit]
    return total


def credential_body(
    name: str,
    secret: str,
    injection: Mapping[str, str],
    allowed_hosts: Sequence[str],
    expires_at: Optional[datetime],
    rate_limit: Optional[int],
    project: Optional[str],
    sandbox: Optional[str],
    tenant: Optional[str],
) -> Dict[str, Any]:
    """The body of ``POST /v1/credentials``, validated."""
    if not isinstance(name, str) or not 1 <= len(name.encode()) <= 128 or not name.isprintable() or not name.isascii():
        raise ValueError(f"name {name!r}: want 1 to 128 bytes of printable ASCII")
    if not isinstance(secret, str) or secret == "":
        raise ValueError("secret is empty")
    if not isinstance(injection, Mapping) or injection.get("method") not in ("header", "basic", "query"):
        raise ValueError("injection: want {'method': 'header', 'name': 'Authorization'}, {'method': 'basic'} or {'method': 'query', 'name': 'key'}")
    if injection.get("method") in ("header", "query") and not injection.get("name"):
        raise ValueError(f"injection.name: a {injection.get('method')} injection names the {injection.get('method')} to set")
    if isinstance(allowed_hosts, str) or not allowed_hosts or not all(isinstance(h, str) and h for h in allowed_hosts):
        raise ValueError("allowed_hosts: want a non-empty list of host names ('api.github.com', '*.example.com')")
    body: Dict[str, Any] = {"name": name, "secret": secret, "injection": dict(injection), "allowed_hosts": list(allowed_hosts)}
    if expires_at is not None:
        if not isinstance(expires_at, datetime) or expires_at.tzinfo is None:
            raise ValueError("expires_at: want a timezone-aware datetime")
        body["expires_at"] = expires_at.isoformat()
    if rate_limit:
        body["rate_limit"] = _count("rate_limit", rate_limit)
    if project:
        body["project"] = project
    if sandbox:
        body["sandbox"] = sandbox
    if tenant:
        body["tenant"] = tenant
    return body


def quota_body(max_sandboxes: int, max_memory_mib: int, max_cpus: int) -> Dict[str, int]:
    """A tenant quota as PUT /v1/tenants/{id}/quota takes it; 0 is unlimited."""
    out: Dict[str, int] = {}
    for name, v in (("max_sandboxes", max_sandboxes), ("max_memory_mib", max_memory_mib), ("max_cpus", max_cpus)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} {v!r}: want a whole number, 0 (unlimited) or more")
        out[name] = v
    return out


def audit_params(tenant: Optional[str], sandbox: Optional[str], credential: Optional[str], limit: Optional[int]) -> Dict[str, str]:
    """The query of GET /v1/credentials/audit."""
    params: Dict[str, str] = {}
    for name, v in (("tenant", tenant), ("sandbox", sandbox), ("credential", credential)):
        if v is not None:
            if not isinstance(v, str) or v == "":
                raise ValueError(f"{name} {v!r}: want a non-empty id, or leave it out")
            params[name] = v
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise ValueError(f"limit {limit!r}: want a whole number from 1 to 1000")
        params["limit"] = str(limit)
    return params


def sandbox_list_params(
    state: Optional[str],
    template: Optional[str],
    name: Optional[str],
    metadata: Optional[Mapping[str, str]],
    limit: Optional[int] = None,
    page_token: Optional[str] = None,
) -> Tuple[Tuple[str, str], ...]:
    """The query of GET /v1/sandboxes: filters the server applies (each
    metadata pair as ``metadata=key=value``) and the page."""
    params: List[Tuple[str, str]] = []
    for what, v in (("state", state), ("template", template), ("name", name)):
        if v is not None:
            if not isinstance(v, str) or v == "":
                raise ValueError(f"{what} {v!r}: want a non-empty string, or leave it out")
            params.append((what, v))
    for k, v in (_str_map("metadata", metadata) or {}).items():
        if "=" in k:
            raise ValueError(f"metadata[{k!r}]: a key may not hold '='")
        params.append(("metadata", k + "=" + v))
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise ValueError(f"limit {limit!r}: want a whole number from 1 to 1000")
        params.append(("limit", str(limit)))
    if page_token:
        params.append(("page_token", page_token))
    return tuple(params)


#: The largest one event of a run_code stream may be (a result with a large PNG is one event).
MAX_CODE_EVENT = 64 << 20

CodeCallback = Callable[[str], None]


def code_body(
    code: str,
    language: Optional[str],
    context: Optional[str],
    env: Optional[Mapping[str, str]],
    timeout: Union[str, int, float, None],
) -> Dict[str, Any]:
    """The body of POST /v1/sandboxes/{id}/code."""
    if not isinstance(code, str):
        raise ValueError(f"code {type(code).__name__}: want a str")
    if language is not None and context is not None:
        raise ValueError("language and context: give one (a context has its own language)")
    body: Dict[str, Any] = {"code": code}
    for what, v in (("language", language), ("context", context)):
        if v is not None:
            if not isinstance(v, str) or v == "":
                raise ValueError(f"{what} {v!r}: want a non-empty string, or leave it out")
            body[what] = v
    e = _str_map("env", env, env=True)
    if e:
        body["env"] = e
    t = duration("timeout", timeout)
    if t:
        body["timeout"] = t
    return body


def context_body(language: Optional[str], cwd: Optional[str]) -> Dict[str, Any]:
    """The body of POST /v1/sandboxes/{id}/code/contexts."""
    body: Dict[str, Any] = {}
    for what, v in (("language", language), ("cwd", cwd)):
        if v is not None:
            if not isinstance(v, str) or v == "":
                raise ValueError(f"{what} {v!r}: want a non-empty string, or leave it out")
            body[what] = v
    return body


def context_path(sandbox_id: str, context_id: str, suffix: str = "") -> str:
    return sandbox_path(sandbox_id, "/code/contexts/" + segment("context_id", context_id) + suffix)


class CodeDecoder:
    """Reads the NDJSON stream of run_code chunk by chunk, in memory bounded
    by the largest event, into an Execution, calling the callbacks as the
    events arrive. Without ``keep_logs`` the output goes to the callbacks
    alone: the Execution then grows only by results and the error."""

    def __init__(
        self,
        on_stdout: Optional[CodeCallback],
        on_stderr: Optional[CodeCallback],
        on_result: Optional[Callable[[CodeResult], None]],
        on_error: Optional[Callable[[CodeError], None]],
        *,
        keep_logs: bool = True,
    ) -> None:
        if not isinstance(keep_logs, bool):
            raise ValueError(f"keep_logs {keep_logs!r}: want True or False")
        self.execution = Execution()
        self._keep_logs = keep_logs
        self.done = False
        self._buf = bytearray()
        self._cb = (on_stdout, on_stderr, on_result, on_error)

    def feed(self, chunk: bytes) -> None:
        """Takes the next bytes of the stream; sets ``done`` at the end event."""
        self._buf += chunk
        while not self.done:
            i = self._buf.find(b"\n")
            if i < 0:
                if len(self._buf) > MAX_CODE_EVENT:
                    raise errors.SpaceError(f"run code: an event of the stream is over {MAX_CODE_EVENT} bytes")
                return
            line = bytes(self._buf[:i])
            del self._buf[: i + 1]
            if len(line) > MAX_CODE_EVENT:
                raise errors.SpaceError(f"run code: an event of the stream is over {MAX_CODE_EVENT} bytes")
            self._event(line)

    def finish(self) -> Execution:
        """The execution, once the stream ended; an error if it ended before its end event."""
        if not self.done and self._buf.strip():
            self._event(bytes(self._buf))
            self._buf.clear()
        if not self.done:
            raise errors.SpaceError("run code: the stream ended before the execution's end event")
        return self.execution

    def _event(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            ev = json.loads(line)
        except ValueError as exc:
            raise errors.SpaceError(f"run code: an event of the stream is not JSON: {exc}") from exc
        if not isinstance(ev, dict):
            raise errors.SpaceError("run code: an event of the stream is not a JSON object")
        on_stdout, on_stderr, on_result, on_error = self._cb
        ex = self.execution
        t = ev.get("type")
        if t == "stdout" or t == "stderr":
            text = ev.get("text")
            text = text if isinstance(text, str) else ""
            if self._keep_logs:
                (ex.logs.stdout if t == "stdout" else ex.logs.stderr).append(text)
            cb = on_stdout if t == "stdout" else on_stderr
            if cb is not None:
                cb(text)
        elif t == "result" and isinstance(ev.get("result"), dict):
            r = CodeResult.from_dict(ev["result"])
            ex.results.append(r)
            if on_result is not None:
                on_result(r)
        elif t == "error" and isinstance(ev.get("error"), dict):
            e = CodeError.from_dict(ev["error"])
            ex.error = e
            if on_error is not None:
                on_error(e)
        elif t == "execution_count":
            n = ev.get("execution_count")
            ex.execution_count = n if isinstance(n, int) and not isinstance(n, bool) else 0
        elif t == "end":
            self.done = True
