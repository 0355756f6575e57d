"""Session: many holds, one heartbeat, released together."""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Type
from urllib.parse import quote

from ._errors import BatonError, LeaseLost, SessionLost
from ._keeper import Keeper
from ._lease import Lease
from ._transport import millis

if TYPE_CHECKING:
    from ._client import Client

log = logging.getLogger("baton")


class Session:
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
        client: Client,
        doc: Dict[str, Any],
        *,
        ttl_ms: int,
        since: float,
        on_lost: Optional[Callable[[Session], None]] = None,
    ) -> None:
        self._client = client
        self._id = str(doc["session"])
        self._path = "/v1/sessions/" + quote(self._id, safe="")
        self._ttl_ms = ttl_ms
        self._on_lost = on_lost
        self._mu = threading.Lock()
        self._ops = threading.RLock()
        self._leases: List[Lease] = []
        self._lost = False
        self._closed = False
        self._lost_reason = ""
        self._keeper: Optional[Keeper] = None
        #: Set the moment the session is known lost.
        self.lost_event = threading.Event()
        self._apply(doc, since)

    def _apply(self, doc: Dict[str, Any], since: float) -> None:
        self.owner: str = str(doc.get("owner") or "")
        self.expires_at: Optional[str] = doc.get("expires_at")
        self._renewed_at = since
        self._deadline = since + int(doc.get("ttl_ms", 0)) / 1000.0

    @property
    def session(self) -> str:
        """The session id (a bearer secret)."""
        return self._id

    @property
    def url(self) -> str:
        """The session's absolute URL (a bearer secret)."""
        return self._client.url + self._path

    @property
    def leases(self) -> List[Lease]:
        """The holds taken in this session and not released one by one."""
        with self._mu:
            return list(self._leases)

    @property
    def ttl(self) -> float:
        """Seconds the session surely lasts without a renewal."""
        if self.lost or self._closed:
            return 0.0
        return max(0.0, self._deadline - time.monotonic())

    @property
    def lost(self) -> bool:
        if not self._lost and not self._closed and time.monotonic() >= self._deadline:
            self._lose("it ran out without a renewal")
        return self._lost

    @property
    def lost_reason(self) -> str:
        return self._lost_reason

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else "lost" if self._lost else "open"
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
        return self._client._acquire(
            name, ttl=None, wait=wait, fair=fair, shared=shared, limit=limit, owner=owner,
            auto_renew=False, on_lost=None, session=self,
        )

    def renew(self, ttl: Optional[float] = None) -> Session:
        """Renews the session and every hold in it to ``ttl`` seconds (default:
        its last ttl). Raises SessionLost (and marks it lost), or any BatonError."""
        ttl_ms = millis(ttl, "ttl") if ttl is not None else self._ttl_ms
        with self._ops:
            self._check()
            since = time.monotonic()
            try:
                ans = self._client._call("PATCH", self._path, {"ttl_ms": ttl_ms})
            except SessionLost as exc:
                self._lose("a renewal answered 404: %s" % exc.detail)
                raise self._lost_error() from exc
            self._ttl_ms = ttl_ms
            self._apply(self._client._doc(ans), since)
        return self

    def holds(self) -> List[Dict[str, Any]]:
        """The server's list of this session's holds: ``name``, ``fence``,
        ``count``, ``shared`` (and ``url``, a bearer secret)."""
        with self._ops:
            self._check()
            try:
                ans = self._client._call("GET", self._path)
            except SessionLost as exc:
                self._lose("it was not there: %s" % exc.detail)
                raise self._lost_error() from exc
        holds = self._client._doc(ans).get("holds") or []
        return [dict(h) for h in holds if isinstance(h, dict)]

    def close(self) -> int:
        """Ends the session, releasing every hold in it, and returns how many.
        Renewal stops first. Does nothing (0) when already closed. Raises
        SessionLost when the session was lost before (its holds ended with it),
        or any BatonError of the call (then the holds end with the session's ttl).
        """
        if self._keeper is not None:
            self._keeper.stop()
        with self._ops:
            if self._closed:
                return 0
            if self.lost:
                raise self._lost_error()
            try:
                ans = self._client._call("DELETE", self._path, gone_ok_on_retry=True)
            except SessionLost as exc:
                self._lose("it was not there any more when closed: %s" % exc.detail)
                raise self._lost_error() from exc
            with self._mu:
                self._closed = True
                leases, self._leases = self._leases, []
        for lease in leases:
            with lease._mu:
                lease._released = True
        if self._keeper is not None:
            self._keeper.join(1.0)
        if ans.status != 200:
            return 0  # a retry found it gone: the first attempt ended it
        released = self._client._doc(ans).get("released", 0)
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

    def _check(self) -> None:
        if self.lost:
            raise self._lost_error()
        if self._closed:
            raise SessionLost("this session was closed", type="/problems/session-not-found", status=404)

    def _lost_error(self) -> SessionLost:
        return SessionLost(
            "the session was lost, and its holds with it: %s" % self._lost_reason,
            type="/problems/session-not-found",
            status=404,
        )

    def _adopt(self, lease: Lease) -> None:
        with self._mu:
            self._leases.append(lease)

    def _forget(self, lease: Lease) -> None:
        with self._mu:
            if lease in self._leases:
                self._leases.remove(lease)

    def _lose(self, reason: str) -> None:
        with self._mu:
            if self._lost or self._closed:
                return
            self._lost = True
            self._lost_reason = reason
            leases = list(self._leases)
        if self._keeper is not None:
            self._keeper.stop()
        self.lost_event.set()
        log.warning("baton: session lost with %d holds: %s", len(leases), reason)
        for lease in leases:
            if lease._mark_lost("its session was lost: " + reason):
                lease._fire_lost()
        if self._on_lost is not None:
            try:
                self._on_lost(self)
            except Exception:
                log.exception("baton: on_lost callback of a session failed")

    def _start_keeper(self) -> None:
        self._keeper = Keeper(self, "session", self._client.timeout)
        self._keeper.start()

    # Keeper protocol.

    def _keeper_due(self) -> float:
        return self._renewed_at + self._ttl_ms / 3000.0

    def _keeper_deadline(self) -> float:
        return self._deadline

    def _keeper_done(self) -> bool:
        return self._lost or self._closed

    def _keeper_renew(self, timeout: float, stop: threading.Event) -> Optional[BatonError]:
        with self._ops:
            if stop.is_set() or self._lost or self._closed:
                return None
            since = time.monotonic()
            try:
                ans = self._client._call("PATCH", self._path, {"ttl_ms": self._ttl_ms}, timeout=timeout, retries=0)
                self._apply(self._client._doc(ans), since)
            except LeaseLost as exc:  # SessionLost
                lost_exc: Optional[BatonError] = exc
            except BatonError as exc:
                return exc
            else:
                return None
        if lost_exc is not None:
            self._lose("a renewal answered 404: %s" % lost_exc.detail)
        return None

    def _keeper_lost(self, reason: str, cause: Optional[BatonError]) -> None:
        self._lose(reason)
