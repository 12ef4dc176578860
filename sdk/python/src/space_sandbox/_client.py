"""The synchronous client."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from datetime import datetime
from typing import IO, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import urlencode

import httpx

from . import _core, errors
from ._core import Req
from ._ports import PortForward, dial
from ._stream import ExecStream, FileWatch, OutputCallback, open_sync, start_message
from .models import (
    APIKey,
    CodeContext,
    CodeError,
    CodeResult,
    Credential,
    CredentialAuditEntry,
    EgressPolicy,
    EncryptionKey,
    Event,
    ExecResult,
    Execution,
    FileEntry,
    FileList,
    Node,
    Process,
    SandboxInfo,
    ServicePort,
    SigningKey,
    SigningKeyList,
    Snapshot,
    Template,
    Tenant,
)

__all__ = ["Client", "Sandbox", "Files"]

Duration = Union[str, int, float, None]


class Client:
    """A client of one SPACE server.

    ``api_url`` and ``api_key`` default to ``SPACE_API_URL`` and
    ``SPACE_API_KEY``, as the CLI's do. ``timeout`` bounds each HTTP request
    in seconds (a command run to completion gets its own timeout plus a
    margin). Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = 300.0,
        http_client: Optional[httpx.Client] = None,
        user_agent: str = "space-python-sdk",
    ) -> None:
        self.api_url, self._key = _core.resolve_config(api_url, api_key)
        self._timeout = _core.client_timeout(timeout)
        self._own = http_client is None
        self._http = http_client or httpx.Client(timeout=httpx.Timeout(self._timeout, connect=10.0))
        self._headers = {"User-Agent": user_agent}
        if self._key:
            self._headers["Authorization"] = "Bearer " + self._key

    def close(self) -> None:
        """Closes the connections the client opened itself."""
        if self._own:
            self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ---------------------------------------------------------

    def _send_once(self, req: Req, timeout: Optional[float]) -> httpx.Response:
        headers = dict(self._headers)
        headers.update(req.headers())
        kwargs: Dict[str, Any] = {}
        if req.json is not None:
            kwargs["content"] = json.dumps(req.json).encode()
        elif isinstance(req.content, (bytes, str)):
            kwargs["content"] = req.content
        elif req.content is not None:
            kwargs["content"] = _chunks(req.content)
        if timeout is not None:
            kwargs["timeout"] = httpx.Timeout(timeout, connect=10.0)
        request = self._http.build_request(req.method, self.api_url + req.path, params=req.params or None, headers=headers, **kwargs)
        try:
            resp = self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise errors.TransportError(f"{req.method} {req.path}: {exc} (is SPACE_API_URL {self.api_url!r} right?)") from exc
        if 200 <= resp.status_code <= 299:
            return resp
        try:
            body = _read_bounded(resp, _core.MAX_ERROR_BODY, truncate=True)
        finally:
            resp.close()
        raise _core.api_error(resp.status_code, body)

    def _send(self, req: Req, timeout: Optional[float] = None) -> httpx.Response:
        """Sends req; the caller closes the answer. On ``refresh_route`` a
        replayable request (a read, or one with an Idempotency-Key, whose body
        can be sent again) is sent once more; nothing else is retried."""
        req.mark()
        try:
            return self._send_once(req, timeout)
        except errors.RefreshRoute:
            if not req.replayable():
                raise
            req.rewind()
            return self._send_once(req, timeout)

    def _call(self, req: Req, timeout: Optional[float] = None) -> Any:
        resp = self._send(req, timeout)
        try:
            body = _read_bounded(resp, req.limit)
        finally:
            resp.close()
        if not body.strip():
            return None
        try:
            return json.loads(body)
        except ValueError as exc:
            raise errors.SpaceError(f"{req.method} {req.path}: the answer is not JSON: {exc}") from exc

    # -- sandboxes ---------------------------------------------------------

    def create_sandbox(
        self,
        template: Optional[str] = None,
        *,
        runtime: Optional[str] = None,
        name: Optional[str] = None,
        cpus: Optional[int] = None,
        memory_mib: Optional[int] = None,
        disk_mib: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Duration = None,
        metadata: Optional[Mapping[str, str]] = None,
        idle_timeout: Duration = None,
        idle_action: Optional[str] = None,
        egress: Union[EgressPolicy, Mapping[str, Any], None] = None,
        allow_internet_access: Optional[bool] = None,
        project: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> "Sandbox":
        """Creates a sandbox and returns it once it is running.

        ``template`` defaults to the server's (``base``; ``minimal`` is
        busybox). ``timeout`` and ``idle_timeout`` are durations (``"30m"``)
        or seconds. With ``idempotency_key`` a retried create makes one
        sandbox, and the call is retried once on ``refresh_route``.
        """
        body = _core.create_body(
            template=template, runtime=runtime, name=name, cpus=cpus, memory_mib=memory_mib, disk_mib=disk_mib,
            env=env, timeout=timeout, metadata=metadata, idle_timeout=idle_timeout, idle_action=idle_action,
            egress=egress, allow_internet_access=allow_internet_access, project=project,
        )
        d = self._call(Req("POST", "/v1/sandboxes", json=body, idempotency_key=idempotency_key or ""))
        return Sandbox(self, SandboxInfo.from_dict(d or {}))

    def get_sandbox(self, sandbox_id: str) -> "Sandbox":
        """Reads one sandbox; :class:`~space_sandbox.NotFound` when it does not exist."""
        return Sandbox(self, self._get_info(sandbox_id))

    def _get_info(self, sandbox_id: str) -> SandboxInfo:
        d = self._call(Req("GET", _core.sandbox_path(sandbox_id)))
        return SandboxInfo.from_dict(d or {})

    def list_sandboxes(
        self,
        *,
        state: Optional[str] = None,
        template: Optional[str] = None,
        name: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
    ) -> List["Sandbox"]:
        """Lists the caller's tenant's sandboxes that match every filter given
        (``metadata``: each key with that value); the server filters, and
        the list is fetched by pages."""
        return list(self.iter_sandboxes(state=state, template=template, name=name, metadata=metadata))

    def list_sandboxes_page(
        self,
        *,
        state: Optional[str] = None,
        template: Optional[str] = None,
        name: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        limit: int = 100,
        page_token: Optional[str] = None,
    ) -> Tuple[List["Sandbox"], str]:
        """One page of the matching sandboxes, at most ``limit`` (1..1000),
        ordered by creation time then id, from where ``page_token`` left
        off; with the token of the next page, "" after the last."""
        params = _core.sandbox_list_params(state, template, name, metadata, limit, page_token)
        d = self._call(Req("GET", "/v1/sandboxes", params=params)) or {}
        out: List["Sandbox"] = []
        for raw in d.get("sandboxes") or []:
            if isinstance(raw, dict):
                info = SandboxInfo.from_dict(raw)
                # A server older than the filters answers them all: keep the matches.
                if _core.matches(info, state, template, name, metadata):
                    out.append(Sandbox(self, info))
        token = d.get("next_page_token")
        return out, token if isinstance(token, str) else ""

    def iter_sandboxes(
        self,
        *,
        state: Optional[str] = None,
        template: Optional[str] = None,
        name: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        page_size: int = 100,
    ) -> Iterator["Sandbox"]:
        """Like :meth:`list_sandboxes`, one sandbox at a time, fetching a page
        of ``page_size`` at a time."""
        token: Optional[str] = None
        while True:
            page, token = self.list_sandboxes_page(
                state=state, template=template, name=name, metadata=metadata, limit=page_size, page_token=token,
            )
            yield from page
            if not token:
                return

    def delete_sandbox(self, sandbox_id: str, *, wait: bool = True, wait_timeout: float = 300.0) -> None:
        """Deletes a sandbox; with ``wait`` returns once the server no longer has it."""
        self._call(Req("DELETE", _core.sandbox_path(sandbox_id)))
        if wait:
            self.wait_deleted(sandbox_id, timeout=wait_timeout)

    def wait_for_state(self, sandbox_id: str, state: str, *, timeout: float = 300.0) -> "Sandbox":
        """Polls a sandbox until it is in ``state``; raises
        :class:`~space_sandbox.WaitTimeout` after ``timeout`` seconds and
        :class:`~space_sandbox.SpaceError` when it failed or is being deleted."""
        _core.state_arg(state)
        deadline = time.monotonic() + timeout
        pause = 0.1
        while True:
            info = self._get_info(sandbox_id)
            if info.state == state:
                return Sandbox(self, info)
            if info.state in _core.TERMINAL_STATES:
                why = f": {info.reason}" if info.reason else ""
                raise errors.SpaceError(f"sandbox {sandbox_id} is {info.state}{why}; it will not become {state}")
            if time.monotonic() + pause > deadline:
                raise errors.WaitTimeout(f"sandbox {sandbox_id} is still {info.state} after {timeout:g}s (waiting for {state})")
            time.sleep(pause)
            pause = min(pause * 1.5, 1.0)

    def wait_deleted(self, sandbox_id: str, *, timeout: float = 300.0) -> None:
        """Polls a sandbox until the server no longer knows it."""
        deadline = time.monotonic() + timeout
        pause = 0.1
        while True:
            try:
                info = self._get_info(sandbox_id)
            except errors.NotFound:
                return
            if info.state == "deleted":
                return
            if info.state == "failed":
                raise errors.SpaceError(f"sandbox {sandbox_id} failed while being deleted: {info.reason}")
            if time.monotonic() + pause > deadline:
                raise errors.WaitTimeout(f"sandbox {sandbox_id} is still {info.state} after {timeout:g}s (waiting for its deletion)")
            time.sleep(pause)
            pause = min(pause * 1.5, 1.0)

    # -- templates, tenants, keys -----------------------------------------

    def list_templates(self) -> List[Template]:
        """The templates sandboxes can be made from."""
        d = self._call(Req("GET", "/v1/templates")) or {}
        return [Template.from_dict(t) for t in d.get("templates") or [] if isinstance(t, dict)]

    def build_template(
        self,
        name: str,
        source: str,
        *,
        egress: Union[EgressPolicy, Mapping[str, Any], None] = None,
        wait: bool = True,
        wait_timeout: float = 1800.0,
        idempotency_key: Optional[str] = None,
    ) -> Template:
        """Builds a template (admin keys) from ``source``: ``"dir:/path"``,
        ``"tar:/path.tar[.gz]"`` (paths on the server's machine) or
        ``"debootstrap:SUITE[+pkg,...]"``, or the name of one of the server's
        built-in templates (``"minimal"``, ``"base"``, ``"code-interpreter"``);
        with ``wait`` returns once it is ready."""
        _core.segment("name", name)
        if not isinstance(source, str) or (":" not in source and not _core.BUILTIN_NAME.match(source)):
            raise ValueError(f"source {source!r}: want dir:/path, tar:/path.tar[.gz], debootstrap:SUITE[+pkg,...] or a built-in template's name")
        body: Dict[str, Any] = {"name": name, "from": source}
        if egress is not None:
            body["egress"] = _core.egress_body(egress)
        d = self._call(Req("POST", "/v1/templates", json=body, idempotency_key=idempotency_key or ""))
        t = Template.from_dict(d or {})
        deadline = time.monotonic() + wait_timeout
        pause = 0.2
        while wait and t.state != "ready":
            if t.state == "failed":
                raise errors.SpaceError(f"template {name} failed to build: {t.reason}")
            if time.monotonic() + pause > deadline:
                raise errors.WaitTimeout(f"template {name} is still {t.state} after {wait_timeout:g}s")
            time.sleep(pause)
            pause = min(pause * 1.5, 2.0)
            t = next((x for x in self.list_templates() if x.name == name), t)
        return t

    def delete_template(self, name: str) -> None:
        """Deletes a template (admin keys)."""
        self._call(Req("DELETE", "/v1/templates/" + _core.segment("name", name)))

    def list_tenants(self) -> List[Tenant]:
        """Every tenant (admin keys)."""
        d = self._call(Req("GET", "/v1/tenants")) or {}
        return [Tenant.from_dict(t) for t in d.get("tenants") or [] if isinstance(t, dict)]

    def create_tenant(self, name: str, *, idempotency_key: Optional[str] = None) -> Tuple[Tenant, str]:
        """Creates a tenant (admin keys) and returns it with its first API key (shown once)."""
        if not isinstance(name, str) or not name:
            raise ValueError("name is empty")
        d = self._call(Req("POST", "/v1/tenants", json={"name": name}, idempotency_key=idempotency_key or "")) or {}
        t = d.get("tenant")
        key = d.get("key")
        return Tenant.from_dict(t if isinstance(t, dict) else {}), key if isinstance(key, str) else ""

    def delete_tenant(self, tenant_id: str) -> None:
        """Deletes a tenant (admin keys)."""
        self._call(Req("DELETE", "/v1/tenants/" + _core.segment("tenant_id", tenant_id)))

    def list_keys(self, *, tenant: Optional[str] = None) -> List[APIKey]:
        """The API keys of the caller's tenant (an admin key may name another)."""
        params = {"tenant": tenant} if tenant else {}
        d = self._call(Req("GET", "/v1/keys", params=params)) or {}
        return [APIKey.from_dict(k) for k in d.get("keys") or [] if isinstance(k, dict)]

    def create_key(self, *, tenant: Optional[str] = None, e2b: bool = False, idempotency_key: Optional[str] = None) -> Tuple[APIKey, str]:
        """Creates an API key (for ``tenant``, admin keys only; else the caller's)
        and returns it with its secret, shown once. ``e2b`` makes a key in E2B's shape."""
        body: Dict[str, Any] = {}
        if tenant:
            body["tenant"] = tenant
        if e2b:
            body["e2b"] = True
        d = self._call(Req("POST", "/v1/keys", json=body, idempotency_key=idempotency_key or "")) or {}
        k = d.get("key")
        secret = d.get("secret")
        return APIKey.from_dict(k if isinstance(k, dict) else {}), secret if isinstance(secret, str) else ""

    def revoke_key(self, key_id: str) -> None:
        """Revokes an API key: it is refused at once."""
        self._call(Req("DELETE", "/v1/keys/" + _core.segment("key_id", key_id)))

    def set_quota(self, tenant_id: str, *, max_sandboxes: int = 0, max_memory_mib: int = 0, max_cpus: int = 0) -> Tenant:
        """Replaces a tenant's quota (admin keys; 0: unlimited) and returns the
        tenant with its usage."""
        path = "/v1/tenants/" + _core.segment("tenant_id", tenant_id) + "/quota"
        d = self._call(Req("PUT", path, json=_core.quota_body(max_sandboxes, max_memory_mib, max_cpus)))
        return Tenant.from_dict(d or {})

    def set_template_egress(self, name: str, egress: Union[EgressPolicy, Mapping[str, Any], None]) -> Template:
        """Sets the egress policy sandboxes made from template ``name`` start
        with (admin keys); ``None`` removes it (the server's default applies)."""
        # None is sent as JSON null, the body that clears the policy.
        body = _core.egress_body(egress) if egress is not None else None
        d = self._call(Req("PUT", "/v1/templates/" + _core.segment("name", name) + "/egress", json=body, content=b"null" if body is None else None, content_type="application/json"))
        return Template.from_dict(d or {})

    # -- nodes, signing and encryption keys (admin) -------------------------

    def list_nodes(self) -> List[Node]:
        """The nodes of the cluster, with their state, capacity and load (admin keys)."""
        d = self._call(Req("GET", "/v1/nodes")) or {}
        return [Node.from_dict(n) for n in d.get("nodes") or [] if isinstance(n, dict)]

    def drain_node(self, node_id: str) -> Node:
        """Marks a node draining (admin keys): nothing new is placed there and
        its sandboxes are moved off it; returns the node."""
        d = self._call(Req("POST", "/v1/nodes/" + _core.segment("node_id", node_id) + "/drain"))
        return Node.from_dict(d or {})

    def undrain_node(self, node_id: str) -> Node:
        """Puts a drained node back in service (admin keys); returns the node."""
        d = self._call(Req("POST", "/v1/nodes/" + _core.segment("node_id", node_id) + "/undrain"))
        return Node.from_dict(d or {})

    def list_signing_keys(self) -> SigningKeyList:
        """The control plane's capability signing keys (admin keys);
        :class:`~space_sandbox.FailedPrecondition` when it has a fixed key."""
        return SigningKeyList.from_dict(self._call(Req("GET", "/v1/signing-keys")) or {})

    def rotate_signing_key(self) -> SigningKey:
        """Makes a new capability signing key (admin keys): published to the
        nodes at once, it signs from its ``active_at``; the old key verifies
        what it signed until that expires."""
        return SigningKey.from_dict(self._call(Req("POST", "/v1/signing-keys/rotate")) or {})

    def list_encryption_keys(self, tenant_id: str) -> List[EncryptionKey]:
        """A tenant's disk encryption keys in the KMS (admin keys);
        :class:`~space_sandbox.FailedPrecondition` when no KMS is configured."""
        path = "/v1/tenants/" + _core.segment("tenant_id", tenant_id) + "/encryption-keys"
        d = self._call(Req("GET", path)) or {}
        return [EncryptionKey.from_dict(k) for k in d.get("keys") or [] if isinstance(k, dict)]

    def revoke_encryption_key(self, tenant_id: str, key_id: str) -> None:
        """Revokes a tenant's encryption key (admin keys): what it wraps
        (hibernated sandboxes' artifacts) is refused from then on, so their
        restore fails with "revoked"."""
        path = "/v1/tenants/" + _core.segment("tenant_id", tenant_id) + "/encryption-keys/" + _core.segment("key_id", key_id)
        self._call(Req("DELETE", path))

    # -- credentials -------------------------------------------------------


    def create_credential(
        self,
        name: str,
        secret: str,
        *,
        injection: Mapping[str, str],
        allowed_hosts: Sequence[str],
        expires_at: Optional[datetime] = None,
        rate_limit: Optional[int] = None,
        project: Optional[str] = None,
        sandbox: Optional[str] = None,
        tenant: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Credential:
        """Stores a credential the gateway injects into requests to
        ``allowed_hosts`` (the secret never enters a sandbox): for every
        sandbox of the tenant, or those of ``project``, or one ``sandbox``."""
        body = _core.credential_body(name, secret, injection, allowed_hosts, expires_at, rate_limit, project, sandbox, tenant)
        d = self._call(Req("POST", "/v1/credentials", json=body, idempotency_key=idempotency_key or ""))
        return Credential.from_dict(d or {})

    def list_credentials(self, *, tenant: Optional[str] = None) -> List[Credential]:
        """The tenant's credentials (an admin key may name another tenant)."""
        d = self._call(Req("GET", "/v1/credentials", params={"tenant": tenant} if tenant else {})) or {}
        return [Credential.from_dict(c) for c in d.get("credentials") or [] if isinstance(c, dict)]

    def get_credential(self, credential_id: str, *, tenant: Optional[str] = None) -> Credential:
        """One credential."""
        path = "/v1/credentials/" + _core.segment("credential_id", credential_id)
        d = self._call(Req("GET", path, params={"tenant": tenant} if tenant else {}))
        return Credential.from_dict(d or {})

    def delete_credential(self, credential_id: str, *, tenant: Optional[str] = None) -> None:
        """Deletes a credential: it is injected no more."""
        path = "/v1/credentials/" + _core.segment("credential_id", credential_id)
        self._call(Req("DELETE", path, params={"tenant": tenant} if tenant else {}))

    def credential_audit(
        self,
        *,
        tenant: Optional[str] = None,
        sandbox: Optional[str] = None,
        credential: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> List[CredentialAuditEntry]:
        """The newest decisions of the credential gateway and egress proxy for
        the tenant (an admin key may name another), newest first: of one
        ``sandbox`` or ``credential`` if given, at most ``limit`` (1..1000,
        the server's default 100)."""
        d = self._call(Req("GET", "/v1/credentials/audit", params=_core.audit_params(tenant, sandbox, credential, limit))) or {}
        return [CredentialAuditEntry.from_dict(e) for e in d.get("entries") or [] if isinstance(e, dict)]


def _chunks(src: Any, chunk_size: int = 1 << 20) -> Iterator[bytes]:
    """A binary file (read a chunk at a time) or an iterable of bytes as the
    stream httpx sends."""
    if hasattr(src, "read"):
        while True:
            chunk = src.read(chunk_size)
            if not chunk:
                return
            yield bytes(chunk)
    else:
        for chunk in src:
            yield bytes(chunk)


def _read_bounded(resp: httpx.Response, limit: int, truncate: bool = False) -> bytes:
    """Reads at most limit bytes of an answer; more is an error unless truncate."""
    buf = bytearray()
    try:
        for chunk in resp.iter_bytes():
            buf += chunk
            if len(buf) > limit:
                if truncate:
                    return bytes(buf[:limit])
                raise errors.SpaceError(f"the answer is larger than {limit} bytes")
    except httpx.TransportError as exc:
        raise errors.TransportError(f"reading the answer: {exc}") from exc
    return bytes(buf)


class Sandbox:
    """One sandbox. ``info`` is what the server last reported; :meth:`refresh`
    reads it again. As a context manager it deletes the sandbox on exit."""

    def __init__(self, client: Client, info: SandboxInfo) -> None:
        self.client = client
        self.info = info
        self.files = Files(self)

    @property
    def id(self) -> str:
        """The sandbox's id (``sb-…``)."""
        return self.info.id

    @property
    def state(self) -> str:
        """Its state when last read from the server (:meth:`refresh` reads it again)."""
        return self.info.state

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, state={self.state!r}, template={self.info.template!r})"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(errors.NotFound):
            self.delete()

    def _path(self, suffix: str = "") -> str:
        return _core.sandbox_path(self.id, suffix)

    def refresh(self) -> "Sandbox":
        """Reads the sandbox again from the server."""
        self.info = self.client._get_info(self.id)
        return self

    def delete(self, *, wait: bool = True) -> None:
        """Deletes the sandbox (and waits until it is gone unless ``wait`` is False)."""
        self.client.delete_sandbox(self.id, wait=wait)

    # -- exec --------------------------------------------------------------

    def exec(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Duration = None,
    ) -> ExecResult:
        """Runs a command to completion: a list is a program and its arguments,
        a string runs with ``/bin/sh -c``. ``timeout`` (default 60 s on the
        server) kills the command when it passes. A failing command is not an
        exception: check ``exit_code``. Never retried: a command may have run."""
        body = _core.exec_body(cmd, env=env, cwd=cwd, user=user, stdin=stdin, timeout=timeout)
        secs = _core.seconds_of(body.get("timeout", "")) or 60.0
        d = self.client._call(Req("POST", self._path("/exec"), json=body, limit=_core.MAX_EXEC_BODY), timeout=max(self.client._timeout, secs + 30.0))
        return ExecResult.from_dict(d or {})

    def exec_stream(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        tty: bool = False,
        cols: Optional[int] = None,
        rows: Optional[int] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> ExecStream:
        """Starts a command over a WebSocket and returns the running stream:
        its output arrives as it is produced (iterate the stream, or pass
        callbacks and call ``wait``), it takes stdin, signals and, with
        ``tty=True``, a terminal of ``cols`` x ``rows`` that ``resize`` changes.
        Closing the stream kills a command still running."""
        body = _core.exec_body(cmd, env=env, cwd=cwd, user=user, stdin=None, timeout=None)
        start = start_message(body, tty, cols, rows)
        conn = open_sync(self.client.api_url, self._path("/exec"), self.client._headers, "exec")
        stream = ExecStream(conn, on_stdout, on_stderr)
        try:
            stream._send(json.dumps(start), "send start")
        except BaseException:
            stream.close()
            raise
        return stream

    # -- code interpreter ---------------------------------------------------

    def run_code(
        self,
        code: str,
        *,
        language: Optional[str] = None,
        context: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Duration = None,
        on_stdout: Optional[Callable[[str], None]] = None,
        on_stderr: Optional[Callable[[str], None]] = None,
        on_result: Optional[Callable[[CodeResult], None]] = None,
        on_error: Optional[Callable[[CodeError], None]] = None,
        keep_logs: bool = True,
    ) -> Execution:
        """Runs ``code`` in the sandbox's code interpreter (a sandbox of the
        code-interpreter template; another answers :class:`~space_sandbox.errors.FailedPrecondition`),
        in the default context of ``language`` (``"python"``, the default, or
        ``"bash"``) or in ``context`` (made by :meth:`create_code_context`).
        The callbacks are called as the events stream in; the stream is read
        in memory bounded by its largest event, and with ``keep_logs=False``
        the output reaches only ``on_stdout``/``on_stderr`` (``Execution.logs``
        stays empty), so code that prints far more than the client can hold
        runs in constant memory. ``timeout`` (default 60 s on the server) interrupts the code,
        the execution then has a ``TimeoutError``. An error in the code is not
        an exception: check ``Execution.error``. Never retried."""
        body = _core.code_body(code, language, context, env, timeout)
        secs = _core.seconds_of(body.get("timeout", "")) or 60.0
        dec = _core.CodeDecoder(on_stdout, on_stderr, on_result, on_error, keep_logs=keep_logs)
        resp = self.client._send(Req("POST", self._path("/code"), json=body), timeout=max(self.client._timeout, secs + 30.0))
        try:
            for chunk in resp.iter_bytes(64 << 10):
                dec.feed(chunk)
                if dec.done:
                    break
        except httpx.TransportError as exc:
            raise errors.TransportError(f"run code in sandbox {self.id}: {exc}") from exc
        finally:
            resp.close()
        return dec.finish()

    def create_code_context(self, *, language: Optional[str] = None, cwd: Optional[str] = None) -> CodeContext:
        """Makes a code interpreter context: its own state, ``language``
        (``"python"`` or ``"bash"``) and working directory ``cwd``."""
        d = self.client._call(Req("POST", self._path("/code/contexts"), json=_core.context_body(language, cwd)))
        return CodeContext.from_dict(d or {})

    def list_code_contexts(self) -> List[CodeContext]:
        """The code interpreter's contexts."""
        d = self.client._call(Req("GET", self._path("/code/contexts"))) or {}
        return [CodeContext.from_dict(c) for c in d.get("contexts") or []]

    def restart_code_context(self, context_id: str) -> None:
        """Gives context ``context_id`` a fresh kernel (same id, its state lost)."""
        self.client._call(Req("POST", _core.context_path(self.id, context_id, "/restart")))

    def delete_code_context(self, context_id: str) -> None:
        """Removes context ``context_id``."""
        self.client._call(Req("DELETE", _core.context_path(self.id, context_id)))

    # -- lifecycle ---------------------------------------------------------

    def _lifecycle(self, verb: str, body: Optional[Dict[str, Any]], wait: bool, wait_timeout: float) -> "Sandbox":
        d = self.client._call(Req("POST", self._path("/" + verb), json=body))
        self.info = SandboxInfo.from_dict(d or {})
        target = _core.TARGET_STATE[verb]
        if wait and self.info.state != target:
            self.info = self.client.wait_for_state(self.id, target, timeout=wait_timeout).info
        return self

    def pause(self, *, wait: bool = True, wait_timeout: float = 300.0) -> "Sandbox":
        """Pauses a running sandbox (state ``paused``)."""
        return self._lifecycle("pause", None, wait, wait_timeout)

    def resume(self, *, wait: bool = True, wait_timeout: float = 300.0) -> "Sandbox":
        """Resumes a paused sandbox (state ``running``)."""
        return self._lifecycle("resume", None, wait, wait_timeout)

    def stop(self, *, wait: bool = True, wait_timeout: float = 300.0) -> "Sandbox":
        """Stops the sandbox, keeping its filesystem (state ``stopped``)."""
        return self._lifecycle("stop", None, wait, wait_timeout)

    def start(self, *, wait: bool = True, wait_timeout: float = 300.0) -> "Sandbox":
        """Starts a stopped sandbox (state ``running``)."""
        return self._lifecycle("start", None, wait, wait_timeout)

    def hibernate(self, *, wait: bool = True, wait_timeout: float = 300.0) -> "Sandbox":
        """Snapshots the sandbox to object storage and frees its node (state ``hibernated``)."""
        return self._lifecycle("hibernate", None, wait, wait_timeout)

    def restore(self, *, node: Optional[str] = None, wait: bool = True, wait_timeout: float = 300.0) -> "Sandbox":
        """Brings a hibernated sandbox back (state ``running``); ``node`` (admin keys) picks where."""
        return self._lifecycle("restore", {"node": node} if node else None, wait, wait_timeout)

    def rollback(self, snapshot: str, *, wait: bool = True, wait_timeout: float = 300.0) -> "Sandbox":
        """Puts the filesystem back to ``snapshot`` and starts a new execution from it."""
        if not snapshot:
            raise ValueError("snapshot is empty: want a snapshot id (see list_snapshots)")
        return self._lifecycle("rollback", {"snapshot": snapshot}, wait, wait_timeout)

    def fork(self, *, snapshot: Optional[str] = None, name: Optional[str] = None, idempotency_key: Optional[str] = None) -> "Sandbox":
        """Creates a new sandbox from this one's filesystem, or from one of its
        snapshots, and returns it."""
        body: Dict[str, Any] = {}
        _core.opt_str("snapshot", snapshot)
        _core.opt_str("name", name)
        if snapshot:
            body["snapshot"] = snapshot
        if name:
            body["name"] = name
        d = self.client._call(Req("POST", self._path("/fork"), json=body, idempotency_key=idempotency_key or ""))
        return Sandbox(self.client, SandboxInfo.from_dict(d or {}))

    def set_timeout(self, timeout: Union[str, int, float]) -> "Sandbox":
        """Makes the sandbox live ``timeout`` (a duration or seconds) from now; 0 removes its timeout."""
        t = _core.duration("timeout", timeout)
        if t == "":
            raise ValueError("timeout is empty: want a duration such as '30m', seconds, or 0 for none")
        d = self.client._call(Req("POST", self._path("/timeout"), json={"timeout": t}))
        self.info = SandboxInfo.from_dict(d or {})
        return self

    # -- snapshots ---------------------------------------------------------

    def create_snapshot(self, kind: str = "disk", *, wait: bool = True, wait_timeout: float = 300.0, idempotency_key: Optional[str] = None) -> Snapshot:
        """Takes a snapshot (``"disk"``, or ``"full"`` of a paused sandbox); with
        ``wait`` returns once it is ready."""
        body = {"kind": _core.kind_of(kind)}
        d = self.client._call(Req("POST", self._path("/snapshots"), json=body, idempotency_key=idempotency_key or ""))
        snap = Snapshot.from_dict(d or {})
        deadline = time.monotonic() + wait_timeout
        pause = 0.1
        while wait and snap.state != "ready":
            if snap.state == "failed":
                raise errors.SpaceError(f"snapshot {snap.id} of sandbox {self.id} failed: {snap.reason}")
            if time.monotonic() + pause > deadline:
                raise errors.WaitTimeout(f"snapshot {snap.id} of sandbox {self.id} is still {snap.state} after {wait_timeout:g}s")
            time.sleep(pause)
            pause = min(pause * 1.5, 1.0)
            snap = next((s for s in self.list_snapshots() if s.id == snap.id), snap)
        return snap

    def list_snapshots(self) -> List[Snapshot]:
        """The sandbox's snapshots."""
        d = self.client._call(Req("GET", self._path("/snapshots"))) or {}
        return [Snapshot.from_dict(s) for s in d.get("snapshots") or [] if isinstance(s, dict)]

    def delete_snapshot(self, snapshot: str) -> None:
        """Deletes one of the sandbox's snapshots."""
        self.client._call(Req("DELETE", self._path("/snapshots/" + _core.segment("snapshot", snapshot))))

    def ca_certificate(self) -> str:
        """The PEM certificate of the CA the sandbox's egress proxy signs
        intercepted TLS with (install it in the sandbox's trust store to let
        credentials be injected into HTTPS); :class:`~space_sandbox.NotFound`
        until the sandbox has one (it gets one when it starts)."""
        resp = self.client._send(Req("GET", self._path("/ca.pem")))
        try:
            return (_read_bounded(resp, _core.MAX_JSON_BODY)).decode("ascii", "replace")
        finally:
            resp.close()

    # -- events, ports, egress --------------------------------------------

    def list_processes(self) -> List[Process]:
        """The processes the sandbox's guest daemon started and that still
        run (streamed execs, terminals, code kernels), by pid; a command run
        with :meth:`exec` is among them while it runs."""
        d = self.client._call(Req("GET", self._path("/processes"))) or {}
        return [Process.from_dict(p) for p in d.get("processes") or [] if isinstance(p, dict)]

    def events(self) -> List[Event]:
        """The sandbox's history, oldest first."""
        d = self.client._call(Req("GET", self._path("/events"))) or {}
        return [Event.from_dict(e) for e in d.get("events") or [] if isinstance(e, dict)]

    def expose_port(self, port: int, *, protocol: str = "http", public: bool = False) -> ServicePort:
        """Makes a port of the sandbox reachable through the gateway."""
        d = self.client._call(Req("POST", self._path("/ports"), json=_core.port_body(port, protocol, public)))
        return ServicePort.from_dict(d or {})

    def list_ports(self) -> List[ServicePort]:
        """The sandbox's exposed ports (without tokens)."""
        d = self.client._call(Req("GET", self._path("/ports"))) or {}
        return [ServicePort.from_dict(p) for p in d.get("ports") or [] if isinstance(p, dict)]

    def unexpose_port(self, port: int) -> None:
        """Stops exposing a port."""
        _core.port_body(port, "http", False)
        self.client._call(Req("DELETE", self._path(f"/ports/{port}")))

    def dial_port(self, port: int) -> socket.socket:
        """Opens a raw TCP connection to a port of the sandbox through the
        server, authenticated with the client's key; ``shutdown(SHUT_WR)``
        half-closes it."""
        _core.port_body(port, "tcp", False)
        return dial(self.client.api_url, self._path(f"/ports/{port}/tcp"), self.client._headers, f"dial port {port} of sandbox {self.id}")

    def forward(self, port: int, *, local_port: int = 0, host: str = "127.0.0.1") -> PortForward:
        """Listens on ``host:local_port`` (0: any free port; see ``address``)
        and forwards each connection to ``port`` of the sandbox, until closed."""
        _core.port_body(port, "tcp", False)
        _core.local_port_arg(local_port)
        path = self._path(f"/ports/{port}/tcp")
        what = f"forward port {port} of sandbox {self.id}"
        return PortForward(lambda: dial(self.client.api_url, path, self.client._headers, what), host, local_port)

    def get_egress(self) -> EgressPolicy:
        """The sandbox's egress policy."""
        return EgressPolicy.from_dict(self.client._call(Req("GET", self._path("/egress"))) or {})

    def set_egress(self, policy: Union[EgressPolicy, Mapping[str, Any]]) -> EgressPolicy:
        """Replaces the sandbox's egress policy; applies to new connections at once."""
        d = self.client._call(Req("PUT", self._path("/egress"), json=_core.egress_body(policy)))
        return EgressPolicy.from_dict(d or {})


class Files:
    """A sandbox's files: ``sandbox.files.read("/etc/hostname")``."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def _path(self, suffix: str = "") -> str:
        return _core.sandbox_path(self._sb.id, "/files" + suffix)

    def read(self, path: str, *, user: Optional[str] = None) -> bytes:
        """The content of a file."""
        resp = self._sb.client._send(Req("GET", self._path(), params=_core.file_params(path, user)))
        try:
            return resp.read()
        except httpx.TransportError as exc:
            raise errors.TransportError(f"read {path}: {exc}") from exc
        finally:
            resp.close()

    def read_text(self, path: str, *, encoding: str = "utf-8", user: Optional[str] = None) -> str:
        """The content of a file, decoded."""
        return self.read(path, user=user).decode(encoding)

    def download(self, path: str, dest: IO[bytes], *, user: Optional[str] = None, chunk_size: int = 1 << 20) -> int:
        """Copies a file into the binary file ``dest`` as it arrives, in
        constant memory, and returns the number of bytes."""
        n = 0
        resp = self._sb.client._send(Req("GET", self._path(), params=_core.file_params(path, user)))
        try:
            for chunk in resp.iter_bytes(chunk_size):
                dest.write(chunk)
                n += len(chunk)
        except httpx.TransportError as exc:
            raise errors.TransportError(f"read {path}: {exc}") from exc
        finally:
            resp.close()
        return n

    def write(self, path: str, data: _core.Body, *, user: Optional[str] = None) -> None:
        """Creates or replaces a file with ``data``: bytes, text (UTF-8), a binary
        file object or an iterable of bytes (both streamed as read, in constant
        memory). The file keeps its old content if the upload is cut short."""
        content = _core.write_content(data)
        self._sb.client._call(Req("PUT", self._path(), params=_core.file_params(path, user), content=content))

    def list(self, path: str, *, depth: Optional[int] = None, user: Optional[str] = None) -> List[FileEntry]:
        """The entries of a directory, ``depth`` levels down (1..32, default 1)."""
        d = self._sb.client._call(Req("GET", self._path("/list"), params=_core.list_params(path, depth, None, None, user)))
        return FileList.from_dict(d or {}).entries

    def list_page(self, path: str, *, limit: int = 1000, page_token: Optional[str] = None, user: Optional[str] = None) -> FileList:
        """One page of a directory's own entries, at most ``limit`` (1..10000),
        from where ``page_token`` left off. ``next_page_token`` of the answer
        is "" once the listing is complete."""
        d = self._sb.client._call(Req("GET", self._path("/list"), params=_core.list_params(path, None, limit, page_token, user)))
        return FileList.from_dict(d or {})

    def iter(self, path: str, *, page_size: int = 1000, user: Optional[str] = None) -> Iterator[FileEntry]:
        """Every entry of a directory, fetched page by page."""
        token: Optional[str] = None
        while True:
            page = self.list_page(path, limit=page_size, page_token=token, user=user)
            yield from page.entries
            if not page.next_page_token:
                return
            token = page.next_page_token

    def stat(self, path: str, *, user: Optional[str] = None) -> FileEntry:
        """What a file is: its entry as a listing shows it.
        :class:`~space_sandbox.NotFound` when absent."""
        d = self._sb.client._call(Req("GET", self._path("/stat"), params=_core.file_params(path, user)))
        return FileEntry.from_dict(d or {})

    def exists(self, path: str, *, user: Optional[str] = None) -> bool:
        """Whether a file exists."""
        try:
            self.stat(path, user=user)
        except errors.NotFound:
            return False
        return True

    def watch(self, path: str, *, recursive: bool = False, user: Optional[str] = None) -> FileWatch:
        """Watches ``path`` (and everything below it with ``recursive``) for
        changes; iterate the watch for :class:`~space_sandbox.FileEvent` s and
        close it when done."""
        params = _core.file_params(path, user)
        if recursive:
            params["recursive"] = "true"
        conn = open_sync(self._sb.client.api_url, self._path("/watch") + "?" + urlencode(params), self._sb.client._headers, "watch " + path)
        return FileWatch(conn)

    def mkdir(self, path: str, *, user: Optional[str] = None) -> FileEntry:
        """Creates a directory and its missing parents."""
        d = self._sb.client._call(Req("POST", self._path("/mkdir"), params=_core.file_params(path, user)))
        return FileEntry.from_dict(d or {})

    def remove(self, path: str, *, user: Optional[str] = None) -> None:
        """Removes a file or a directory tree."""
        self._sb.client._call(Req("DELETE", self._path(), params=_core.file_params(path, user)))

    def move(self, source: str, destination: str, *, user: Optional[str] = None) -> FileEntry:
        """Renames ``source`` to ``destination``."""
        params = _core.move_params(source, destination, user)
        d = self._sb.client._call(Req("POST", self._path("/move"), params=params))
        return FileEntry.from_dict(d or {})
