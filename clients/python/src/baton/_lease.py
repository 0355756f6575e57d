"""Lease: one hold on a lock, as the client sees it."""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any, Callable, Dict, Optional, Protocol, Type
from urllib.parse import quote

from ._errors import BatonError, LeaseLost
from ._keeper import KeptAlive
from ._transport import Transport, lock_path


class Holder(Protocol):
    """What a lease needs of the session it belongs to (a ``Session``): this
    module stays below ``_session``, which imports it, and never imports it
    back."""

    def renew(self, ttl: Optional[float] = None) -> Any: ...

    def _forget(self, lease: "Lease") -> None: ...

    def _keeper_deadline(self) -> float: ...

log = logging.getLogger("baton")

LostCallback = Callable[["Lease"], None]


class Lease(KeptAlive):
    """A hold on a lock: its fence, its state, and the calls that act on it.

    ``fence`` is the lock's fencing token for this hold: pass it to whatever the
    lock protects, and have that refuse writes with a lower fence than one it has
    seen. ``lost`` turns True as soon as the client knows the hold is gone (a
    renewal answered 404, or the lease ran out while it could not be renewed);
    ``lost_event`` is set at the same moment, and every later call on the lease
    raises ``LeaseLost``. Used as a context manager, the lease is released when
    the block ends, however it ends.

    The lease id (``lease``) and ``url`` are bearer secrets: whoever has them can
    renew or release the hold. ``repr`` shows neither.
    """

    _RAN_OUT = "its lease ran out without a renewal"

    def __init__(
        self,
        transport: Transport,
        doc: Dict[str, Any],
        *,
        ttl_ms: Optional[int],
        since: float,
        session: Optional[Holder] = None,
        on_lost: Optional[LostCallback] = None,
    ) -> None:
        self._id = str(doc["lease"])
        self.name: str = str(doc["name"])
        super().__init__(
            transport,
            "%s/leases/%s" % (lock_path(self.name), quote(self._id, safe="")),
            ttl_ms=ttl_ms if ttl_ms is not None else int(doc.get("ttl_ms", 0)),
            lock=self.name,
            label=repr(self.name),
        )
        self._session = session
        self._on_lost = on_lost
        self._apply(doc, since)

    def _apply(self, doc: Dict[str, Any], since: float) -> None:
        self.fence: int = int(doc["fence"])
        self.count: int = int(doc.get("count", 1))
        self.owner: str = str(doc.get("owner") or "")
        self.shared: bool = bool(doc.get("shared", False))
        limit = doc.get("limit")
        self.limit: Optional[int] = int(limit) if isinstance(limit, int) else None
        self.expires_at: Optional[str] = doc.get("expires_at")
        self.acquired_at: Optional[str] = doc.get("acquired_at")
        super()._apply(doc, since)

    # -- what the user reads ---------------------------------------------------

    @property
    def lease(self) -> str:
        """The lease id (a bearer secret)."""
        return self._id

    @property
    def url(self) -> str:
        """The lease's absolute URL (a bearer secret)."""
        return self._transport.url + self._path

    @property
    def path(self) -> str:
        """The lease's path on the server, ``/v1/locks/{name}/leases/{lease}``."""
        return self._path

    @property
    def session(self) -> Optional[Holder]:
        """The session this hold belongs to, if any."""
        return self._session

    @property
    def released(self) -> bool:
        return self._ended

    @property
    def auto_renew(self) -> bool:
        """True while a background thread renews this lease."""
        return self._keeper_alive

    def __repr__(self) -> str:
        state = "released" if self._ended else "lost" if self._lost else "held"
        extra = " shared" if self.shared else ""
        return "<baton.Lease %r fence=%d%s %s>" % (self.name, self.fence, extra, state)

    # -- calls -----------------------------------------------------------------

    def renew(self, ttl: Optional[float] = None) -> Lease:
        """Renews the lease to ``ttl`` seconds (default: its last ttl) and
        returns it. A hold in a session lives as long as its session: renewing
        it renews the session, and every hold in it.

        Raises LeaseLost when the hold is gone (and marks it lost), or any
        BatonError of the call.
        """
        if self._session is not None:
            self._session.renew(ttl)
            return self
        self._renew(ttl)
        return self

    def release(self) -> None:
        """Releases the hold. Renewal stops first, whatever happens next.

        Does nothing when already released. Raises LeaseLost when the hold was
        lost before it was released (your work may have run without the lock),
        or any BatonError of the call (then the hold ends with its ttl).
        """
        self._end("it was not held any more when released")

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except BatonError as err:
            if exc_type is None:
                raise
            # The block's own exception is the one to see; the loss stays on the lease.
            log.debug("baton: releasing %r after an exception failed: %s", self.name, err)

    # -- internals -------------------------------------------------------------

    def _lost_error(self) -> LeaseLost:
        return LeaseLost(
            "the hold was lost: %s" % self._lost_reason, type="/problems/lease-not-held", status=404, lock=self.name
        )

    def _ended_error(self) -> LeaseLost:
        return LeaseLost("this lease was released", type="/problems/lease-not-held", status=404, lock=self.name)

    def _fire_lost(self) -> None:
        log.warning("baton: hold on lock %r (fence %d) lost: %s", self.name, self.fence, self._lost_reason)
        if self._on_lost is not None:
            try:
                self._on_lost(self)
            except Exception:
                log.exception("baton: on_lost callback for lock %r failed", self.name)

    def _after_end(self) -> None:
        if self._session is not None:
            self._session._forget(self)

    def _keeper_deadline(self) -> float:
        if self._session is not None:
            return self._session._keeper_deadline()
        return self._deadline
