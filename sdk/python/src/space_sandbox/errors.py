"""Exceptions raised by the SPACE SDK.

Every non-2xx answer of the server becomes an :class:`APIError` subclass named
after SPACE's error code (``docs/api-errors.md``): ``not_found`` is
:class:`NotFound`, ``conflict`` is :class:`Conflict`, ``refresh_route`` is
:class:`RefreshRoute`, and so on. Each carries the HTTP status, the code, the
optional reason (``"no_capacity"``, ``"quota_exceeded"``, ...) and the server's
message, unchanged but for control characters.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Dict, List, Optional, Type

__all__ = [
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
]


class SpaceError(Exception):
    """The base of every exception the SDK raises on purpose."""


class TransportError(SpaceError):
    """The server could not be reached, or the connection broke mid-answer."""


class WaitTimeout(SpaceError):
    """A wait for a sandbox or snapshot state did not end in time."""


class APIError(SpaceError):
    """A non-2xx answer of the server: ``{"code", "message", "reason"}``."""

    #: The error code this class stands for ("" on the base class).
    CODE = ""

    def __init__(self, status: int, code: str, message: str, reason: str = "") -> None:
        super().__init__(f"space api: {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.reason = reason


class InvalidArgument(APIError):
    """400: the request was malformed; the message says which field."""

    CODE = "invalid_argument"


class Unauthenticated(APIError):
    """401: no API key, or one the server does not know (or revoked)."""

    CODE = "unauthenticated"


class PermissionDenied(APIError):
    """403: the key may not do this (an admin-only call, another tenant's object)."""

    CODE = "permission_denied"


class NotFound(APIError):
    """404: the sandbox, file or object does not exist, or belongs to another tenant."""

    CODE = "not_found"


class Conflict(APIError):
    """409: an illegal transition; the message names the current state."""

    CODE = "conflict"


class FailedPrecondition(APIError):
    """409: the system is not in a state that allows the call."""

    CODE = "failed_precondition"


class TooLarge(APIError):
    """413: a body, a file or a value is over its limit; the message names it."""

    CODE = "too_large"


class RateLimited(APIError):
    """429: too many requests in a short time; retry later."""

    CODE = "rate_limited"


class ResourceExhausted(APIError):
    """429 or 503: a quota or another limit (reason ``quota_exceeded``, ``too_many_streams``)."""

    CODE = "resource_exhausted"


class Unavailable(APIError):
    """503: no capacity (reason ``no_capacity``) or a part of the system is down."""

    CODE = "unavailable"


class RefreshRoute(APIError):
    """503: the sandbox moved to a new execution while the request was on its way.

    The route is repaired; sending the request again reaches the new execution.
    The client does so once by itself for reads and idempotent requests.
    """

    CODE = "refresh_route"


class NotImplemented(APIError):  # named after the server's code (it shadows the builtin constant)
    """501: this server does not offer the operation."""

    CODE = "not_implemented"


class Internal(APIError):
    """500, or a code this SDK does not know (treated as ``internal``)."""

    CODE = "internal"


_BY_CODE: Dict[str, Type[APIError]] = {
    c.CODE: c
    for c in (
        InvalidArgument,
        Unauthenticated,
        PermissionDenied,
        NotFound,
        Conflict,
        FailedPrecondition,
        TooLarge,
        RateLimited,
        ResourceExhausted,
        Unavailable,
        RefreshRoute,
        NotImplemented,
        Internal,
    )
}

_BY_STATUS = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "conflict",
    412: "failed_precondition",
    413: "too_large",
    429: "rate_limited",
    501: "not_implemented",
    503: "unavailable",
}

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    412: "Precondition Failed",
    413: "Request Entity Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def clean_text(s: str, limit: int) -> str:
    """Makes server-supplied text safe to print: control and format characters
    become ``?``, runs of white space one space, cut to ``limit`` characters."""
    out: List[str] = []
    space = False
    for ch in s:
        if len(out) >= limit:
            break
        if ch.isspace():
            if space or not out:
                continue
            space = True
            out.append(" ")
            continue
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs"):
            ch = "?"
        space = False
        out.append(ch)
    return "".join(out).rstrip(" ")


def from_response(status: int, body: bytes) -> APIError:
    """Builds the exception for a non-2xx answer. A body that is not a SPACE
    error keeps a short cleaned excerpt, and the code comes from the status."""
    code = message = reason = ""
    wire: Optional[object] = None
    try:
        wire = json.loads(body.decode("utf-8", errors="replace"))
    except ValueError:
        wire = None
    if isinstance(wire, dict):
        if isinstance(wire.get("code"), str):
            code = clean_text(wire["code"], 64)
        if isinstance(wire.get("message"), str):
            message = clean_text(wire["message"], 1024)
        if isinstance(wire.get("reason"), str):
            reason = clean_text(wire["reason"], 64)
    if not code:
        code = _BY_STATUS.get(status, "internal")
    if not message:
        message = _REASONS.get(status, f"HTTP status {status}")
        excerpt = clean_text(body.decode("utf-8", errors="replace"), 200)
        if excerpt:
            message += f" ({excerpt})"
    cls = _BY_CODE.get(code, Internal)
    return cls(status, code, message, reason)
