"""Session: many holds, one heartbeat, released together."""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Type
from urllib.parse import quote

from ._errors import BatonError, SessionLost
from ._keeper import KeptAlive
from ._lease import Lease
from ._transport import Transport, json_doc

log = logging.getLogger("baton")

# How a session takes a lock into itself: the Client's acquire, called with
# ``session`` set (the waiting, the fair queue and the retries are the Client's).
Acquire = Callable[..., Lease]


class Session(KeptAlive):
    """A session on the server: holds taken with ``lock`` join it, last as long
    as it does, are renewed with it (in a background thread, at a third of its
    ttl) and are all released when it is closed, which leaving a ``with`` block
    does, however the block ends.

    If the session is lost (a renewal answered 404, or it ran out while it could
    not be renewed), ``lost`` turns True, ``lost_event`` is set, every hold in it
    is marked lost, and later calls raise ``SessionLost``.
    """

    def __init__(
        self,
        transport: Transport,
        doc: Dict[str, Any],
        *,
        ttl_ms: int,
        since: float,
        acquire: Acquire,
        on_lost: Optional[Callable[[Session], None]] = None,
    ) -> None:
        self._id = str(doc["session"])
        super().__init__(
            transport, "/v1/sessions/" + quote(self._id, safe=""), ttl_ms=ttl_ms, lock=None, label="session"
        )
        self._acquire = acquire
        self._on_lost = on_lost
        self._leases: List[Lease] = []
        self._apply(doc, since)

    def _apply(self, doc: Dict[str, Any], since: float) -> None:
        self.owner: str = str(doc.get("owner") or "")
        self.expires_at: Optional[str] = doc.get("expires_at")
        super()._apply(doc, since)

    @property
    def session(self) -> str:
        """The session id (a bearer secret)."""
        return self._id

    @property
    def url(self) -> str:
        """The session's absolute URL (a bearer secret)."""
        return self._transport.url + self._path

    @property
    def leases(self) -> List[Lease]:
        """The holds taken in this session and not released one by one."""
        with self._mu:
            return list(self._leases)

    @property
    def closed(self) -> bool:
        return self._ended

    def __repr__(self) -> str:
        state = "closed" if self._ended else "lost" if self._lost else "open"
        return "<baton.Session owner=%r holds=%d %s>" % (self.owner, len(self._leases), state)

    def lock(
        self,
        name: str,
        wait: Optional[float] = 10.0,
        fair: bool = False,
        shared: bool = False,
        limit: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> Lease:
        """Takes the lock ``name`` into this session, waiting up to ``wait``
        seconds (None: no limit), and returns its Lease. The hold lasts as long
        as the session; release it alone with ``lease.release()``, or with all
        the others when the session ends.

        Raises LockHeld, SessionLost, or any BatonError of the call.
        """
        self._check()
        return self._acquire(
            name, ttl=None, wait=wait, fair=fair, shared=shared, limit=limit, owner=owner,
            auto_renew=False, on_lost=None, session=self,
        )

    def renew(self, ttl: Optional[float] = None) -> Session:
        """Renews the session and every hold in it to ``ttl`` seconds (default:
        its last ttl). Raises SessionLost (and marks it lost), or any BatonError."""
        self._renew(ttl)
        return self

    def holds(self) -> List[Dict[str, Any]]:
        """The server's list of this session's holds: ``name``, ``fence``,
        ``count``, ``shared`` (and ``url``, a bearer secret)."""
        fire = False
        err: Optional[SessionLost] = None
        with self._ops:
            self._check()
            try:
                ans = self._transport.call("GET", self._path)
            except SessionLost as exc:
                fire = self._mark_lost("it was not there: %s" % exc.detail)
                err = self._lost_error()
                err.__cause__ = exc
        if fire:
            self._fire_lost()
        if err is not None:
            raise err
        holds = json_doc(ans).get("holds") or []
        return [dict(h) for h in holds if isinstance(h, dict)]

    def close(self) -> int:
        """Ends the session, releasing every hold in it, and returns how many.
        Renewal stops first. Does nothing (0) when already closed. Raises
        SessionLost when the session was lost before (its holds ended with it),
        or any BatonError of the call (then the holds end with the session's ttl).
        """
        ans = self._end("it was not there any more when closed")
        if ans is None:
            return 0
        with self._mu:
            leases, self._leases = self._leases, []
        for lease in leases:
            lease._mark_ended()
        if ans.status != 200:
            return 0  # a retry found it gone: the first attempt ended it
        released = json_doc(ans).get("released", 0)
        return int(released) if isinstance(released, int) else 0

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.close()
        except BatonError as err:
            if exc_type is None:
                raise
            log.debug("baton: closing a session after an exception failed: %s", err)

    # -- internals -------------------------------------------------------------

    def _lost_error(self) -> SessionLost:
        return SessionLost(
            "the session was lost, and its holds with it: %s" % self._lost_reason,
            type="/problems/session-not-found",
            status=404,
        )

    def _ended_error(self) -> SessionLost:
        return SessionLost("this session was closed", type="/problems/session-not-found", status=404)

    def _adopt(self, lease: Lease) -> None:
        with self._mu:
            self._leases.append(lease)

    def _forget(self, lease: Lease) -> None:
        with self._mu:
            if lease in self._leases:
                self._leases.remove(lease)

    def _fire_lost(self) -> None:
        reason = self._lost_reason
        leases = self.leases
        log.warning("baton: session lost with %d holds: %s", len(leases), reason)
        for lease in leases:
            lease._lose("its session was lost: " + reason)
        if self._on_lost is not None:
            try:
                self._on_lost(self)
            except Exception:
                log.exception("baton: on_lost callback of a session failed")
