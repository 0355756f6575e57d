"""The exception tree: every error the client raises is a BatonError.

Problem answers (RFC 9457 ``application/problem+json``) become the subclass of
their kind, carrying the problem's fields; an answer that is not a problem (a
proxy's HTML 502, say) is classified by its status alone, and a server that
cannot be reached at all is an ``Unavailable`` with ``status`` 0.
"""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any, Dict, Mapping, Optional, Type, TypeVar

__all__ = [
    "BatonError",
    "LockHeld",
    "LeaseLost",
    "SessionLost",
    "TicketGone",
    "AccessDenied",
    "Unauthorized",
    "Forbidden",
    "LimitMismatch",
    "IdempotencyError",
    "IdempotencyKeyUsed",
    "IdempotencyKeyMismatch",
    "InvalidRequest",
    "TooManyRequests",
    "Unavailable",
    "Overloaded",
]

# RFC 9457: a problem without a type is "about:blank"; so is an answer that is
# not a problem document, and a failure that never got an answer.
BLANK = "about:blank"


class BatonError(Exception):
    """An error from Baton, or from reaching it.

    Attributes:
        type: the problem's type, ``/problems/<kind>`` (``about:blank`` when the
            answer was not a problem document or there was no answer).
        status: the HTTP status; 0 when no answer arrived (connection refused,
            reset, timed out).
        title: the problem's short summary.
        detail: what went wrong, for humans.
        lock: the lock name the call was about, when it was about one.
        retry_after: the ``Retry-After`` header in seconds, when given.
        owner: on ``lock-held``, the holder's owner label.
        ttl: on ``lock-held``, the holder's remaining time in seconds.
        waiters: on ``lock-held``, how many tickets are queued.
        limit: on ``limit-mismatch``, the lock's limit (None for none).
        errors: on ``invalid-request``, a message per offending field.
        request_id: the answer's ``X-Request-Id``, to find it in the server's log.
    """

    def __init__(
        self,
        detail: str = "",
        *,
        type: str = BLANK,
        status: int = 0,
        title: str = "",
        lock: Optional[str] = None,
        retry_after: Optional[float] = None,
        owner: Optional[str] = None,
        ttl: Optional[float] = None,
        waiters: Optional[int] = None,
        limit: Optional[int] = None,
        errors: Optional[Dict[str, str]] = None,
        request_id: Optional[str] = None,
    ) -> None:
        super().__init__(detail)
        self.type = type
        self.status = status
        self.title = title
        self.detail = detail
        self.lock = lock
        self.retry_after = retry_after
        self.owner = owner
        self.ttl = ttl
        self.waiters = waiters
        self.limit = limit
        self.errors: Dict[str, str] = dict(errors or {})
        self.request_id = request_id

    @property
    def kind(self) -> str:
        """The problem kind: the last part of ``type`` (``lock-held``), or a
        word for the status when there is no type."""
        if "/problems/" in self.type:
            return self.type.rsplit("/problems/", 1)[1]
        if self.status == 0:
            return "unreachable"
        return _STATUS_WORDS.get(self.status, "http-%d" % self.status)

    def __str__(self) -> str:
        text = self.kind
        if self.status:
            text += " (%d)" % self.status
        if self.lock is not None:
            text += " for lock %r" % self.lock
        if self.detail:
            text += ": " + self.detail
        extra = []
        if self.owner:
            extra.append("owner %r" % self.owner)
        if self.ttl is not None:
            extra.append("ttl %.3gs" % self.ttl)
        if self.retry_after is not None:
            extra.append("retry after %.3gs" % self.retry_after)
        if self.errors:
            extra.append(", ".join("%s: %s" % kv for kv in sorted(self.errors.items())))
        if extra:
            text += " [" + "; ".join(extra) + "]"
        return text

    def __repr__(self) -> str:
        return "%s(%r)" % (self.__class__.__name__, str(self))

    def __reduce__(self) -> Any:
        return (_rebuild, (self.__class__, self.detail, self.__dict__.copy()))


def _rebuild(cls: Type[BatonError], detail: str, state: Dict[str, Any]) -> BatonError:
    err = cls(detail)
    err.__dict__.update(state)
    return err


class LockHeld(BatonError):
    """``423 lock-held``: someone else holds the lock and the wait ran out
    (``retry_after``, ``owner``, ``ttl`` and ``waiters`` tell about the holder),
    or a fair wait ran out and its ticket was given up."""


class LeaseLost(BatonError):
    """The hold is gone: ``404 lease-not-held`` (it ran out, was released by
    force, or never existed), or the client saw its lease run out while it
    could not renew it."""


class SessionLost(LeaseLost):
    """``404 session-not-found``: the session expired, was ended or is another
    key's; the holds in it are gone with it."""


class TicketGone(BatonError):
    """``410 ticket-gone``: the fair-queue ticket expired (it was not polled for
    ``ticket_ttl_ms``), was cancelled, or is unknown."""


class AccessDenied(BatonError):
    """The server refused the key: ``Unauthorized`` or ``Forbidden``. Never
    retried."""


class Unauthorized(AccessDenied):
    """``401 unauthorized``: no key, or one the server does not know."""


class Forbidden(AccessDenied):
    """``403 forbidden``: the key's grants do not cover this action on this lock."""


class LimitMismatch(BatonError):
    """``409 limit-mismatch``: a shared hold asked for another ``limit`` than
    the lock's shared holds have (``limit`` is theirs)."""


class IdempotencyError(BatonError):
    """An ``Idempotency-Key`` the server could not honour."""


class IdempotencyKeyUsed(IdempotencyError):
    """``409 idempotency-key-used``: what the key's first request made has ended."""


class IdempotencyKeyMismatch(IdempotencyError):
    """``422 idempotency-key-mismatch``: the key was used with another body."""


class InvalidRequest(BatonError):
    """``400``: ``invalid-request`` (``errors`` names each field) or ``invalid-name``."""


class TooManyRequests(BatonError):
    """``429``: ``rate-limited`` or ``too-many-waiters`` (see ``retry_after``)."""


class Unavailable(BatonError):
    """Baton could not serve the call: ``503 store-unavailable`` or
    ``overloaded``, a ``502`` or ``504`` from a proxy in front of it, or no
    answer at all (``status`` 0: connection refused, reset or timed out), after
    the client's retries."""


class Overloaded(Unavailable):
    """``503 overloaded``: Redis answers, but the server has more calls to it
    waiting than its bounds allow, and did nothing; retried as any ``503``."""


_BY_KIND: Dict[str, Type[BatonError]] = {
    "lock-held": LockHeld,
    "lease-not-held": LeaseLost,
    "session-not-found": SessionLost,
    "ticket-gone": TicketGone,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "limit-mismatch": LimitMismatch,
    "idempotency-key-used": IdempotencyKeyUsed,
    "idempotency-key-mismatch": IdempotencyKeyMismatch,
    "invalid-request": InvalidRequest,
    "invalid-name": InvalidRequest,
    "rate-limited": TooManyRequests,
    "too-many-waiters": TooManyRequests,
    "store-unavailable": Unavailable,
    "overloaded": Overloaded,
}

# Used when an answer is not a problem document (a proxy's page, say).
_BY_STATUS: Dict[int, Type[BatonError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    410: TicketGone,
    423: LockHeld,
    429: TooManyRequests,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}

_STATUS_WORDS = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    410: "gone",
    423: "locked",
    429: "too-many-requests",
    500: "internal",
    502: "bad-gateway",
    503: "service-unavailable",
    504: "gateway-timeout",
}


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Reads a Retry-After header (delay-seconds or an HTTP date) as seconds."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def from_answer(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    lock: Optional[str] = None,
) -> BatonError:
    """Builds the error for an answer with a status of 400 or more."""
    ctype = (headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
    doc: Dict[str, Any] = {}
    if ctype == "application/json" or ctype.endswith("+json"):
        try:
            parsed = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            parsed = None
        if isinstance(parsed, dict):
            doc = parsed
    ptype = _field(doc, "type", str) or BLANK
    kind = ptype.rsplit("/problems/", 1)[1] if "/problems/" in ptype else ""
    cls = _BY_KIND.get(kind) or _BY_STATUS.get(status) or BatonError
    detail = _field(doc, "detail", str) or ""
    if not doc:
        detail = "the server answered %d without a problem document" % status
    ttl_ms = _field(doc, "ttl_ms", int)
    errors = _field(doc, "errors", dict)
    return cls(
        detail,
        type=ptype,
        status=status,
        title=_field(doc, "title", str) or "",
        lock=lock,
        retry_after=parse_retry_after(headers.get("Retry-After")),
        owner=_field(doc, "owner", str),
        ttl=ttl_ms / 1000.0 if ttl_ms is not None else None,
        waiters=_field(doc, "waiters", int),
        limit=_field(doc, "limit", int),
        errors={str(k): str(v) for k, v in errors.items()} if errors is not None else None,
        request_id=headers.get("X-Request-Id"),
    )


_T = TypeVar("_T")


def _field(doc: Dict[str, Any], key: str, kind: Type[_T]) -> Optional[_T]:
    """doc[key] when it is of that kind (a bool is no int here), else None."""
    value = doc.get(key)
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    return None
