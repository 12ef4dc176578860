"""The Python SDK of SPACE, the self-hosted sandbox platform.

>>> from space_sandbox import Client
>>> with Client() as client:                      # SPACE_API_URL, SPACE_API_KEY
...     with client.create_sandbox("minimal") as sb:
...         print(sb.exec(["echo", "hello"]).stdout)
"""

from ._async_client import AsyncClient, AsyncFiles, AsyncSandbox
from ._client import Client, Files, Sandbox
from ._ports import AsyncPortForward, PortForward
from ._stream import AsyncExecStream, AsyncFileWatch, ExecStream, FileWatch, Output, StreamError
from .errors import (
    APIError,
    Conflict,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    NotImplemented,
    PermissionDenied,
    RateLimited,
    RefreshRoute,
    ResourceExhausted,
    SpaceError,
    TooLarge,
    TransportError,
    Unauthenticated,
    Unavailable,
    WaitTimeout,
)
from .models import (
    APIKey,
    Credential,
    CredentialAuditEntry,
    EgressPolicy,
    EgressRules,
    EncryptionKey,
    Event,
    ExecResult,
    FileEntry,
    FileEvent,
    FileList,
    Node,
    SandboxInfo,
    ServicePort,
    SigningKey,
    SigningKeyList,
    Snapshot,
    Template,
    Tenant,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Sandbox",
    "Files",
    "AsyncClient",
    "AsyncSandbox",
    "AsyncFiles",
    "ExecStream",
    "AsyncExecStream",
    "FileWatch",
    "AsyncFileWatch",
    "PortForward",
    "AsyncPortForward",
    "Output",
    "StreamError",
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
    "SpaceError",
    "TransportError",
    "WaitTimeout",
    "APIError",
    "InvalidArgument",
    "Unauthenticated",
    "PermissionDenied",
    "NotFound",
    "Conflict",
    "FailedPrecondition",
    "TooLarge",
    "RateLimited",
    "ResourceExhausted",
    "Unavailable",
    "RefreshRoute",
    "NotImplemented",
    "Internal",
    "SandboxInfo",
    "ExecResult",
    "FileEntry",
    "FileList",
    "Snapshot",
    "Event",
    "ServicePort",
    "EgressPolicy",
    "EgressRules",
]
