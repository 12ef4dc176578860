"""The API's wire types as dataclasses.

Dataclasses rather than pydantic: they cost no dependency, type-check
strictly, and the SDK only reads what the server sends (fields it does not
know are ignored, so a newer server does not break an older SDK).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional

__all__ = [
    "SandboxInfo",
    "ExecResult",
    "FileEntry",
    "FileList",
    "Snapshot",
    "Event",
    "ServicePort",
    "EgressRules",
    "EgressPolicy",
    "FileEvent",
    "Template",
    "Tenant",
    "APIKey",
    "Credential",
    "CredentialAuditEntry",
    "Node",
    "SigningKey",
    "SigningKeyList",
    "EncryptionKey",
    "CodeResult",
    "CodeError",
    "CodeLogs",
    "Execution",
    "CodeContext",
]


def parse_time(v: Any) -> Optional[datetime]:
    """Parses an RFC 3339 time as Go writes it (nanoseconds, ``Z``)."""
    if not isinstance(v, str) or not v:
        return None
    s = v.replace("Z", "+00:00")
    # Python before 3.11 takes at most 6 fraction digits.
    if "." in s:
        head, _, rest = s.partition(".")
        digits = ""
        i = 0
        while i < len(rest) and rest[i].isdigit():
            digits += rest[i]
            i += 1
        s = head + "." + (digits[:6].ljust(6, "0")) + rest[i:]
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t


def _str(d: Mapping[str, Any], k: str) -> str:
    v = d.get(k)
    return v if isinstance(v, str) else ""


def _int(d: Mapping[str, Any], k: str) -> int:
    v = d.get(k)
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _strmap(d: Mapping[str, Any], k: str) -> Dict[str, str]:
    v = d.get(k)
    if not isinstance(v, dict):
        return {}
    return {str(a): str(b) for a, b in v.items()}


def _strlist(d: Mapping[str, Any], k: str) -> List[str]:
    v = d.get(k)
    if not isinstance(v, list):
        return []
    return [str(x) for x in v]


@dataclass
class EgressRules:
    """One list of rules of an :class:`EgressPolicy` (docs/network.md)."""

    domains: List[str] = field(default_factory=list)
    cidrs: List[str] = field(default_factory=list)
    ports: List[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EgressRules":
        """A EgressRules from the server's JSON; fields it does not know are ignored."""
        return cls(domains=_strlist(d, "domains"), cidrs=_strlist(d, "cidrs"), ports=_strlist(d, "ports"))

    def to_dict(self) -> Dict[str, Any]:
        """The JSON the server takes (empty fields left out)."""
        out: Dict[str, Any] = {}
        if self.domains:
            out["domains"] = list(self.domains)
        if self.cidrs:
            out["cidrs"] = list(self.cidrs)
        if self.ports:
            out["ports"] = list(self.ports)
        return out


@dataclass
class EgressPolicy:
    """What a sandbox's network may reach: ``allow_internet`` decides what no rule does."""

    allow_internet: bool = True
    allow: EgressRules = field(default_factory=EgressRules)
    deny: EgressRules = field(default_factory=EgressRules)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EgressPolicy":
        """A EgressPolicy from the server's JSON; fields it does not know are ignored."""
        allow = d.get("allow")
        deny = d.get("deny")
        return cls(
            allow_internet=bool(d.get("allow_internet")),
            allow=EgressRules.from_dict(allow if isinstance(allow, dict) else {}),
            deny=EgressRules.from_dict(deny if isinstance(deny, dict) else {}),
        )

    def to_dict(self) -> Dict[str, Any]:
        """The JSON the server takes (empty fields left out)."""
        out: Dict[str, Any] = {"allow_internet": self.allow_internet}
        if self.allow.to_dict():
            out["allow"] = self.allow.to_dict()
        if self.deny.to_dict():
            out["deny"] = self.deny.to_dict()
        return out


@dataclass
class SandboxInfo:
    """What the server reports of one sandbox (``GET /v1/sandboxes/{id}``)."""

    id: str
    state: str
    template: str = ""
    runtime: str = ""
    name: str = ""
    tenant: str = ""
    reason: str = ""
    generation: int = 0
    node: str = ""
    cpus: int = 0
    memory_mib: int = 0
    disk_mib: int = 0
    env: Dict[str, str] = field(default_factory=dict)
    metadata: Dict[str, str] = field(default_factory=dict)
    created_at: Optional[datetime] = None
    expires_at: Optional[datetime] = None
    idle_timeout: str = ""
    idle_action: str = ""
    egress: Optional[EgressPolicy] = None
    project: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SandboxInfo":
        """A SandboxInfo from the server's JSON; fields it does not know are ignored."""
        eg = d.get("egress")
        return cls(
            id=_str(d, "id"),
            state=_str(d, "state"),
            template=_str(d, "template"),
            runtime=_str(d, "runtime"),
            name=_str(d, "name"),
            tenant=_str(d, "tenant"),
            reason=_str(d, "reason"),
            generation=_int(d, "generation"),
            node=_str(d, "node"),
            cpus=_int(d, "cpus"),
            memory_mib=_int(d, "memory_mib"),
            disk_mib=_int(d, "disk_mib"),
            env=_strmap(d, "env"),
            metadata=_strmap(d, "metadata"),
            created_at=parse_time(d.get("created_at")),
            expires_at=parse_time(d.get("expires_at")),
            idle_timeout=_str(d, "idle_timeout"),
            idle_action=_str(d, "idle_action"),
            egress=EgressPolicy.from_dict(eg) if isinstance(eg, dict) else None,
            project=_str(d, "project"),
        )


@dataclass
class ExecResult:
    """The outcome of a command run to completion. A command that fails is not
    an exception: check ``exit_code``."""

    exit_code: int
    stdout: str
    stderr: str
    #: True when stdout or stderr passed the server's 16 MiB capture limit.
    truncated: bool = False

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ExecResult":
        """A ExecResult from the server's JSON; fields it does not know are ignored."""
        return cls(
            exit_code=_int(d, "exit_code"),
            stdout=_str(d, "stdout"),
            stderr=_str(d, "stderr"),
            truncated=bool(d.get("truncated")),
        )


@dataclass
class FileEntry:
    """One file in a sandbox: ``type`` is ``"file"``, ``"dir"`` or ``"symlink"``."""

    name: str
    path: str
    type: str
    size: int = 0
    mode: int = 0
    owner: str = ""
    group: str = ""
    modified_at: Optional[datetime] = None
    symlink_target: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FileEntry":
        """A FileEntry from the server's JSON; fields it does not know are ignored."""
        return cls(
            name=_str(d, "name"),
            path=_str(d, "path"),
            type=_str(d, "type"),
            size=_int(d, "size"),
            mode=_int(d, "mode"),
            owner=_str(d, "owner"),
            group=_str(d, "group"),
            modified_at=parse_time(d.get("modified_at")),
            symlink_target=_str(d, "symlink_target"),
        )


@dataclass
class FileList:
    """One page of a directory listing; ``next_page_token`` is "" once complete."""

    entries: List[FileEntry]
    next_page_token: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FileList":
        """A FileList from the server's JSON; fields it does not know are ignored."""
        raw = d.get("entries")
        entries = [FileEntry.from_dict(e) for e in raw if isinstance(e, dict)] if isinstance(raw, list) else []
        return cls(entries=entries, next_page_token=_str(d, "next_page_token"))


@dataclass
class Snapshot:
    """A snapshot of a sandbox: ``kind`` ``"disk"`` or ``"full"``, ``state``
    ``"creating"``, ``"ready"`` or ``"failed"``."""

    id: str
    sandbox: str
    kind: str
    tier: str
    state: str
    reason: str = ""
    size_bytes: int = 0
    created_at: Optional[datetime] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Snapshot":
        """A Snapshot from the server's JSON; fields it does not know are ignored."""
        return cls(
            id=_str(d, "id"),
            sandbox=_str(d, "sandbox"),
            kind=_str(d, "kind"),
            tier=_str(d, "tier"),
            state=_str(d, "state"),
            reason=_str(d, "reason"),
            size_bytes=_int(d, "size_bytes"),
            created_at=parse_time(d.get("created_at")),
        )


@dataclass
class Event:
    """One entry of a sandbox's history."""

    seq: int
    time: Optional[datetime]
    type: str
    message: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Event":
        """A Event from the server's JSON; fields it does not know are ignored."""
        return cls(seq=_int(d, "seq"), time=parse_time(d.get("time")), type=_str(d, "type"), message=_str(d, "message"))


@dataclass
class Process:
    """A process the sandbox's guest daemon started (a streamed exec, a
    terminal, a code context's kernel), as the processes list shows it. Its
    environment is not shown: it may hold secrets."""

    pid: int
    cmd: str
    args: List[str] = field(default_factory=list)
    cwd: str = ""
    tag: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Process":
        """A Process from the server's JSON; fields it does not know are ignored."""
        return cls(pid=_int(d, "pid"), cmd=_str(d, "cmd"), args=_strlist(d, "args"), cwd=_str(d, "cwd"), tag=_str(d, "tag"))


@dataclass
class ServicePort:
    """A sandbox port exposed through the gateway. ``token`` (private ports,
    only in the answer of an expose) goes in the ``X-Space-Port-Token`` header."""

    port: int
    protocol: str
    public: bool
    url: str
    proxy_url: str = ""
    token: str = ""
    created_at: Optional[datetime] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ServicePort":
        """A ServicePort from the server's JSON; fields it does not know are ignored."""
        return cls(
            port=_int(d, "port"),
            protocol=_str(d, "protocol"),
            public=bool(d.get("public")),
            url=_str(d, "url"),
            proxy_url=_str(d, "proxy_url"),
            token=_str(d, "token"),
            created_at=parse_time(d.get("created_at")),
        )


@dataclass
class FileEvent:
    """One change under a watched path: ``type`` is ``"create"``, ``"write"``,
    ``"remove"``, ``"rename"`` or ``"chmod"``."""

    name: str
    type: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FileEvent":
        """A FileEvent from the server's JSON; fields it does not know are ignored."""
        return cls(name=_str(d, "name"), type=_str(d, "type"))


@dataclass
class Template:
    """A template sandboxes are made from: ``state`` ``"building"``, ``"ready"`` or ``"failed"``."""

    name: str
    source: str
    state: str
    reason: str = ""
    size_bytes: int = 0
    created_at: Optional[datetime] = None
    egress: Optional[EgressPolicy] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Template":
        """A Template from the server's JSON; fields it does not know are ignored."""
        eg = d.get("egress")
        return cls(
            name=_str(d, "name"),
            source=_str(d, "source"),
            state=_str(d, "state"),
            reason=_str(d, "reason"),
            size_bytes=_int(d, "size_bytes"),
            created_at=parse_time(d.get("created_at")),
            egress=EgressPolicy.from_dict(eg) if isinstance(eg, dict) else None,
        )


@dataclass
class Tenant:
    """A tenant, with its quota (0: unlimited) and what its sandboxes use."""

    id: str
    name: str
    created_at: Optional[datetime] = None
    quota: Dict[str, int] = field(default_factory=dict)
    usage: Dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Tenant":
        """A Tenant from the server's JSON; fields it does not know are ignored."""
        def ints(k: str) -> Dict[str, int]:
            v = d.get(k)
            return {str(a): b for a, b in v.items() if isinstance(b, int)} if isinstance(v, dict) else {}

        return cls(id=_str(d, "id"), name=_str(d, "name"), created_at=parse_time(d.get("created_at")), quota=ints("quota"), usage=ints("usage"))


@dataclass
class APIKey:
    """An API key; its secret is only ever in the answer that created it."""

    id: str
    tenant: str
    prefix: str
    admin: bool = False
    created_at: Optional[datetime] = None
    revoked_at: Optional[datetime] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "APIKey":
        """A APIKey from the server's JSON; fields it does not know are ignored."""
        return cls(
            id=_str(d, "id"),
            tenant=_str(d, "tenant"),
            prefix=_str(d, "prefix"),
            admin=bool(d.get("admin")),
            created_at=parse_time(d.get("created_at")),
            revoked_at=parse_time(d.get("revoked_at")),
        )


@dataclass
class Credential:
    """A credential the gateway injects into a sandbox's outgoing requests to
    ``allowed_hosts`` (docs/credentials.md); its secret is never reported."""

    id: str
    name: str
    scope: Dict[str, str] = field(default_factory=dict)
    injection: Dict[str, str] = field(default_factory=dict)
    allowed_hosts: List[str] = field(default_factory=list)
    expires_at: Optional[datetime] = None
    rate_limit: int = 0
    created_at: Optional[datetime] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Credential":
        """A Credential from the server's JSON; fields it does not know are ignored."""
        return cls(
            id=_str(d, "id"),
            name=_str(d, "name"),
            scope=_strmap(d, "scope"),
            injection=_strmap(d, "injection"),
            allowed_hosts=_strlist(d, "allowed_hosts"),
            expires_at=parse_time(d.get("expires_at")),
            rate_limit=_int(d, "rate_limit"),
            created_at=parse_time(d.get("created_at")),
        )


@dataclass
class CredentialAuditEntry:
    """One decision of the credential gateway or egress proxy: a request to
    ``host`` allowed or refused, and why (docs/credentials.md)."""

    time: Optional[datetime]
    tenant: str
    host: str
    allowed: bool
    reason: str
    kind: str = ""
    project: str = ""
    sandbox: str = ""
    execution_id: str = ""
    credential_id: str = ""
    where: str = ""
    count: int = 0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CredentialAuditEntry":
        """A CredentialAuditEntry from the server's JSON; fields it does not know are ignored."""
        return cls(
            time=parse_time(d.get("time")),
            tenant=_str(d, "tenant"),
            host=_str(d, "host"),
            allowed=bool(d.get("allowed")),
            reason=_str(d, "reason"),
            kind=_str(d, "kind"),
            project=_str(d, "project"),
            sandbox=_str(d, "sandbox"),
            execution_id=_str(d, "execution_id"),
            credential_id=_str(d, "credential_id"),
            where=_str(d, "where"),
            count=_int(d, "count"),
        )


@dataclass
class Node:
    """A node of the cluster as the control plane sees it (admin keys)."""

    id: str
    state: str
    runtimes: List[str] = field(default_factory=list)
    cpus: int = 0
    memory_mib: int = 0
    last_heartbeat: Optional[datetime] = None
    live: bool = False
    sandboxes: int = 0
    stopped_on_node: List[str] = field(default_factory=list)
    runtime_status: Dict[str, str] = field(default_factory=dict)
    committed_mib: int = 0
    memory_limit_mib: int = 0
    memory_pressure: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Node":
        """A Node from the server's JSON; fields it does not know are ignored."""
        return cls(
            id=_str(d, "id"),
            state=_str(d, "state"),
            runtimes=_strlist(d, "runtimes"),
            cpus=_int(d, "cpus"),
            memory_mib=_int(d, "memory_mib"),
            last_heartbeat=parse_time(d.get("last_heartbeat")),
            live=bool(d.get("live")),
            sandboxes=_int(d, "sandboxes"),
            stopped_on_node=_strlist(d, "stopped_on_node"),
            runtime_status=_strmap(d, "runtime_status"),
            committed_mib=_int(d, "committed_mib"),
            memory_limit_mib=_int(d, "memory_limit_mib"),
            memory_pressure=_str(d, "memory_pressure"),
        )


@dataclass
class SigningKey:
    """A capability signing key of the control plane (admin keys): it signs
    from ``active_at`` while ``signing``; a retired key verifies until
    ``dropped_at``."""

    id: str
    created_at: Optional[datetime] = None
    active_at: Optional[datetime] = None
    signing: bool = False
    retired_at: Optional[datetime] = None
    dropped_at: Optional[datetime] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SigningKey":
        """A SigningKey from the server's JSON; fields it does not know are ignored."""
        return cls(
            id=_str(d, "id"),
            created_at=parse_time(d.get("created_at")),
            active_at=parse_time(d.get("active_at")),
            signing=bool(d.get("signing")),
            retired_at=parse_time(d.get("retired_at")),
            dropped_at=parse_time(d.get("dropped_at")),
        )


@dataclass
class SigningKeyList:
    """The signing keys with the version of the key set the nodes hold."""

    version: int
    keys: List[SigningKey] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SigningKeyList":
        """A SigningKeyList from the server's JSON; fields it does not know are ignored."""
        keys = d.get("keys")
        return cls(version=_int(d, "version"), keys=[SigningKey.from_dict(k) for k in keys or [] if isinstance(k, dict)] if isinstance(keys, list) else [])


@dataclass
class EncryptionKey:
    """A tenant's disk encryption key in the KMS (admin keys); a revoked key
    unlocks nothing more."""

    id: str
    tenant: str
    created_at: Optional[datetime] = None
    revoked_at: Optional[datetime] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EncryptionKey":
        """A EncryptionKey from the server's JSON; fields it does not know are ignored."""
        return cls(id=_str(d, "id"), tenant=_str(d, "tenant"), created_at=parse_time(d.get("created_at")), revoked_at=parse_time(d.get("revoked_at")))


@dataclass
class CodeResult:
    """A display, or the value of the last expression (``main``), of code run
    by :meth:`space_sandbox.Sandbox.run_code`, in the formats the kernel gave:
    ``png``, ``jpeg`` and ``pdf`` are base64; ``json`` is the decoded value."""

    main: bool = False
    text: str = ""
    html: str = ""
    markdown: str = ""
    svg: str = ""
    png: str = ""
    jpeg: str = ""
    pdf: str = ""
    latex: str = ""
    javascript: str = ""
    json: Any = None
    #: Formats without a field of their own, by MIME type.
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CodeResult":
        """A CodeResult from the server's JSON; fields it does not know are ignored."""
        extra = d.get("extra")
        return cls(
            main=bool(d.get("main")),
            text=_str(d, "text"),
            html=_str(d, "html"),
            markdown=_str(d, "markdown"),
            svg=_str(d, "svg"),
            png=_str(d, "png"),
            jpeg=_str(d, "jpeg"),
            pdf=_str(d, "pdf"),
            latex=_str(d, "latex"),
            javascript=_str(d, "javascript"),
            json=d.get("json"),
            extra=dict(extra) if isinstance(extra, dict) else {},
        )

    def formats(self) -> List[str]:
        """The names of the formats this result has (``"text"``, ``"png"``, ...)."""
        names = [n for n in ("text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "javascript") if getattr(self, n)]
        if self.json is not None:
            names.append("json")
        return names + sorted(self.extra)


@dataclass
class CodeError:
    """The error of code run by :meth:`space_sandbox.Sandbox.run_code`: an
    exception's ``name``, ``value`` and ``traceback``; ``ExitCodeError`` for a
    Bash context's non-zero status, ``KernelDied``, ``TimeoutError``."""

    name: str
    value: str
    traceback: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CodeError":
        """A CodeError from the server's JSON; fields it does not know are ignored."""
        return cls(name=_str(d, "name"), value=_str(d, "value"), traceback=_str(d, "traceback"))


@dataclass
class CodeLogs:
    """What the code wrote, in the chunks it arrived in."""

    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


@dataclass
class Execution:
    """The outcome of :meth:`space_sandbox.Sandbox.run_code`. An error in the
    code is not an exception: check ``error``."""

    results: List[CodeResult] = field(default_factory=list)
    logs: CodeLogs = field(default_factory=CodeLogs)
    error: Optional[CodeError] = None
    execution_count: int = 0

    @property
    def text(self) -> str:
        """The main result's text (the value of the last expression), ``""`` when there is none."""
        for r in self.results:
            if r.main:
                return r.text
        return ""


@dataclass
class CodeContext:
    """A code interpreter context: its own state, ``language`` and working directory."""

    id: str
    language: str = ""
    cwd: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CodeContext":
        """A CodeContext from the server's JSON; fields it does not know are ignored."""
        return cls(id=_str(d, "id"), language=_str(d, "language"), cwd=_str(d, "cwd"))
