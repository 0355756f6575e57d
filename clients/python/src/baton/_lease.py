"""Lease: one hold on a lock, as the client sees it."""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Type
from urllib.parse import quote

from ._errors import BatonError, LeaseLost
from ._keeper import Keeper
from ._transport import lock_path, millis

if TYPE_CHECKING:
    from ._client import Client
    from ._session import Session

log = logging.getLogger("baton")

LostCallback = Callable[["Lease"], None]


class Lease:
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

    def __init__(
        self,
        client: Client,
        doc: Dict[str, Any],
        *,
        ttl_ms: Optional[int],
        since: float,
        session: Optional[Session] = None,
        on_lost: Optional[LostCallback] = None,
    ) -> None:
        self._client = client
        self._id = str(doc["lease"])
        self.name: str = str(doc["name"])
        self._path = "%s/leases/%s" % (lock_path(self.name), quote(self._id, safe=""))
        self._session = session
        self._on_lost = on_lost
        self._mu = threading.Lock()  # guards the flags
        self._ops = threading.RLock()  # one renewal or release of this lease at a time
        self._lost = False
        self._released = False
        self._lost_reason = ""
        self._keeper: Optional[Keeper] = None
        #: Set the moment the hold is known lost.
        self.lost_event = threading.Event()
        self._ttl_ms = ttl_ms if ttl_ms is not None else int(doc.get("ttl_ms", 0))
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
        # Monotonic times: when the server's lease clock started at the earliest,
        # and so by when it has surely run out.
        self._renewed_at = since
        self._deadline = since + int(doc.get("ttl_ms", 0)) / 1000.0

    # -- what the user reads ---------------------------------------------------

    @property
    def lease(self) -> str:
        """The lease id (a bearer secret)."""
        return self._id

    @property
    def url(self) -> str:
        """The lease's absolute URL (a bearer secret)."""
        return self._client.url + self._path

    @property
    def path(self) -> str:
        """The lease's path on the server, ``/v1/locks/{name}/leases/{lease}``."""
        return self._path

    @property
    def session(self) -> Optional[Session]:
        """The session this hold belongs to, if any."""
        return self._session

    @property
    def ttl(self) -> float:
        """Seconds the hold surely lasts without a renewal (0 once lost or released)."""
        if self.lost or self._released:
            return 0.0
        return max(0.0, self._keeper_deadline() - time.monotonic())

    @property
    def lost(self) -> bool:
        """True once the hold is known lost."""
        if not self._lost and not self._released and time.monotonic() >= self._keeper_deadline():
            if self._mark_lost("its lease ran out without a renewal"):
                self._fire_lost()
        return self._lost

    @property
    def lost_reason(self) -> str:
        """Why the hold was lost, or "" while it is not."""
        return self._lost_reason

    @property
    def released(self) -> bool:
        return self._released

    @property
    def auto_renew(self) -> bool:
        """True while a background thread renews this lease."""
        k = self._keeper
        return k is not None and k.alive

    def __repr__(self) -> str:
        state = "released" if self._released else "lost" if self._lost else "held"
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
        ttl_ms = millis(ttl, "ttl") if ttl is not None else self._ttl_ms
        fire = False
        err: Optional[LeaseLost] = None
        with self._ops:
            self._check()
            since = time.monotonic()
            try:
                ans = self._client._call("PATCH", self._path, {"ttl_ms": ttl_ms}, lock=self.name)
            except LeaseLost as exc:
                fire = self._mark_lost("a renewal answered 404: %s" % exc.detail)
                err = self._lost_error()
                err.__cause__ = exc
            else:
                self._ttl_ms = ttl_ms
                self._apply(self._client._doc(ans), since)
        if fire:
            self._fire_lost()
        if err is not None:
            raise err
        return self

    def release(self) -> None:
        """Releases the hold. Renewal stops first, whatever happens next.

        Does nothing when already released. Raises LeaseLost when the hold was
        lost before it was released (your work may have run without the lock),
        or any BatonError of the call (then the hold ends with its ttl).
        """
        keeper = self._keeper
        if keeper is not None:
            keeper.stop()
        fire = False
        err: Optional[BaseException] = None
        with self._ops:  # waits for a renewal in flight; none starts after this
            if self._released:
                return
            if self.lost:
                raise self._lost_error()
            try:
                self._client._call("DELETE", self._path, lock=self.name, gone_ok_on_retry=True)
            except LeaseLost as exc:
                fire = self._mark_lost("it was not held any more when released: %s" % exc.detail)
                err = self._lost_error()
                err.__cause__ = exc
            else:
                with self._mu:
                    self._released = True
        if keeper is not None:
            keeper.join(1.0)
        if self._session is not None:
            self._session._forget(self)
        if fire:
            self._fire_lost()
        if err is not None:
            raise err

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

    def _check(self) -> None:
        if self.lost:
            raise self._lost_error()
        if self._released:
            raise LeaseLost("this lease was released", type="/problems/lease-not-held", status=404, lock=self.name)

    def _lost_error(self) -> LeaseLost:
        return LeaseLost(
            "the hold was lost: %s" % self._lost_reason, type="/problems/lease-not-held", status=404, lock=self.name
        )

    def _mark_lost(self, reason: str) -> bool:
        """Marks the hold lost; True if it was not already (then call _fire_lost
        once no lock is held)."""
        with self._mu:
            if self._lost or self._released:
                return False
            self._lost = True
            self._lost_reason = reason
        if self._keeper is not None:
            self._keeper.stop()
        self.lost_event.set()
        log.warning("baton: hold on lock %r (fence %d) lost: %s", self.name, self.fence, reason)
        return True

    def _fire_lost(self) -> None:
        if self._on_lost is not None:
            try:
                self._on_lost(self)
            except Exception:
                log.exception("baton: on_lost callback for lock %r failed", self.name)

    def _start_keeper(self) -> None:
        self._keeper = Keeper(self, repr(self.name), self._client.timeout)
        self._keeper.start()

    # Keeper protocol.

    def _keeper_due(self) -> float:
        return self._renewed_at + self._ttl_ms / 3000.0

    def _keeper_deadline(self) -> float:
        if self._session is not None:
            return self._session._keeper_deadline()
        return self._deadline

    def _keeper_done(self) -> bool:
        return self._lost or self._released

    def _keeper_renew(self, timeout: float, stop: threading.Event) -> Optional[BatonError]:
        fire = False
        try:
            with self._ops:
                if stop.is_set() or self._lost or self._released:
                    return None
                since = time.monotonic()
                try:
                    ans = self._client._call(
                        "PATCH", self._path, {"ttl_ms": self._ttl_ms}, lock=self.name, timeout=timeout, retries=0
                    )
                    self._apply(self._client._doc(ans), since)
                except LeaseLost as exc:
                    fire = self._mark_lost("a renewal answered 404: %s" % exc.detail)
                except BatonError as exc:
                    return exc
                return None
        finally:
            if fire:
                self._fire_lost()

    def _keeper_lost(self, reason: str, cause: Optional[BatonError]) -> None:
        if self._mark_lost(reason):
            self._fire_lost()
