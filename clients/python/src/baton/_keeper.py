"""Keeping a hold alive: what a Lease and a Session share.

KeptAlive is the base of both: a hold on the server at a path, renewed with a
PATCH of its ttl, ended with a DELETE, known lost once a call on it answers 404
or once it ran out, with the Keeper thread that renews it in the background.
Subclasses say what they are (their errors, their callbacks) and what an
answer tells about them; the calls, the flags and their locking are here once.

The Keeper (Redisson's watchdog, minus its bugs) renews at a third of the ttl.
A renewal answered 404 means the hold is gone: the target is marked lost at
once and the thread ends. Any other failure (transport error, 503, ...) is
retried with backoff while the lease lasts; if the lease runs out first, the
hold is lost. The thread ends the moment its target is released or lost, and
holds only a weak reference to it, so that a lease the program dropped without
releasing is not renewed forever (it runs out after its ttl).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any, Dict, Optional

from ._errors import BatonError, LeaseLost
from ._transport import Answer, Transport, backoff, json_doc, millis

log = logging.getLogger("baton")

# The last renewal is tried this long before the lease ends, so that it can
# still arrive in time.
_LAST_TRY = 0.05


class KeptAlive:
    """A hold on the server at ``path``: a lease, or a session.

    ``_mu`` guards the flags (lost, ended); ``_ops`` lets one renewal or end of
    it run at a time. A loss is marked (``_mark_lost``) under whatever lock the
    caller holds, and told (``_fire_lost``: the log line, the callbacks) once no
    lock is held.
    """

    #: Why it is lost when it ran out with nobody renewing it.
    _RAN_OUT = "it ran out without a renewal"

    def __init__(
        self,
        transport: Transport,
        path: str,
        *,
        ttl_ms: int,
        lock: Optional[str],
        label: str,
    ) -> None:
        self._transport = transport
        self._path = path
        self._ttl_ms = ttl_ms
        self._lock_name = lock  # named in the errors of its calls
        self._label = label  # names its renewal thread
        self._mu = threading.Lock()
        self._ops = threading.RLock()
        self._lost = False
        self._ended = False  # released, or closed
        self._lost_reason = ""
        self._keeper: Optional[Keeper] = None
        self._renewed_at = 0.0
        self._deadline = 0.0
        #: Set the moment it is known lost.
        self.lost_event = threading.Event()

    # -- what subclasses say ---------------------------------------------------

    def _apply(self, doc: Dict[str, Any], since: float) -> None:
        """Takes in the server's description of it, sent at ``since``: the
        lease clock started then at the earliest, and so by ``since + ttl`` it
        has surely run out. Subclasses read their own fields too."""
        self._renewed_at = since
        self._deadline = since + int(doc.get("ttl_ms", 0)) / 1000.0

    def _lost_error(self) -> LeaseLost:
        raise NotImplementedError

    def _ended_error(self) -> LeaseLost:
        raise NotImplementedError

    def _fire_lost(self) -> None:
        """Tells of the loss (the log line, the callbacks), once."""

    def _after_end(self) -> None:
        """Called once the DELETE has been answered (ended, or found gone)."""

    # -- what the user reads ---------------------------------------------------

    @property
    def ttl(self) -> float:
        """Seconds it surely lasts without a renewal (0 once lost or ended)."""
        if self.lost or self._ended:
            return 0.0
        return max(0.0, self._keeper_deadline() - time.monotonic())

    @property
    def lost(self) -> bool:
        """True once it is known lost."""
        if not self._lost and not self._ended and time.monotonic() >= self._keeper_deadline():
            self._lose(self._RAN_OUT)
        return self._lost

    @property
    def lost_reason(self) -> str:
        """Why it was lost, or "" while it is not."""
        return self._lost_reason

    # -- the calls -------------------------------------------------------------

    def _renew(self, ttl: Optional[float]) -> None:
        """Renews it to ``ttl`` seconds (default: its last ttl). Raises the
        lost error when it is gone (and marks it lost), or any BatonError."""
        ttl_ms = millis(ttl, "ttl") if ttl is not None else self._ttl_ms
        fire = False
        err: Optional[LeaseLost] = None
        with self._ops:
            self._check()
            since = time.monotonic()
            try:
                ans = self._transport.call("PATCH", self._path, {"ttl_ms": ttl_ms}, lock=self._lock_name)
            except LeaseLost as exc:  # or SessionLost
                fire = self._mark_lost("a renewal answered 404: %s" % exc.detail)
                err = self._lost_error()
                err.__cause__ = exc
            else:
                self._ttl_ms = ttl_ms
                self._apply(json_doc(ans), since)
        if fire:
            self._fire_lost()
        if err is not None:
            raise err

    def _end(self, gone: str) -> Optional[Answer]:
        """Ends it on the server (renewal stops first, whatever happens next)
        and returns the answer; None when it had ended already. Raises the lost
        error when it was lost before, or found gone (``gone`` says how), or
        any BatonError of the call (then it ends with its ttl)."""
        keeper = self._keeper
        if keeper is not None:
            keeper.stop()
        fire = False
        err: Optional[LeaseLost] = None
        with self._ops:  # waits for a renewal in flight; none starts after this
            if self._ended:
                return None
            if self.lost:
                raise self._lost_error()
            ans: Optional[Answer] = None
            try:
                ans = self._transport.call("DELETE", self._path, lock=self._lock_name, gone_ok_on_retry=True)
            except LeaseLost as exc:
                fire = self._mark_lost("%s: %s" % (gone, exc.detail))
                err = self._lost_error()
                err.__cause__ = exc
            else:
                with self._mu:
                    self._ended = True
        if keeper is not None:
            keeper.join(1.0)
        self._after_end()
        if fire:
            self._fire_lost()
        if err is not None:
            raise err
        return ans

    def _check(self) -> None:
        if self.lost:
            raise self._lost_error()
        if self._ended:
            raise self._ended_error()

    def _mark_ended(self) -> None:
        """Marks it ended by someone else (its session was closed)."""
        with self._mu:
            self._ended = True

    def _mark_lost(self, reason: str) -> bool:
        """Marks it lost; True if it was not already (then call _fire_lost
        once no lock is held)."""
        with self._mu:
            if self._lost or self._ended:
                return False
            self._lost = True
            self._lost_reason = reason
        if self._keeper is not None:
            self._keeper.stop()
        self.lost_event.set()
        return True

    def _lose(self, reason: str) -> None:
        if self._mark_lost(reason):
            self._fire_lost()

    # -- renewal in the background ---------------------------------------------

    def _start_keeper(self) -> None:
        self._keeper = Keeper(self, self._label, self._transport.timeout)
        self._keeper.start()

    @property
    def _keeper_alive(self) -> bool:
        k = self._keeper
        return k is not None and k.alive

    def _keeper_due(self) -> float:
        """Monotonic time of the next renewal."""
        return self._renewed_at + self._ttl_ms / 3000.0

    def _keeper_deadline(self) -> float:
        """Monotonic time by which the hold has surely run out if not renewed."""
        return self._deadline

    def _keeper_done(self) -> bool:
        """True once ended or lost."""
        return self._lost or self._ended

    def _keeper_renew(self, timeout: float, stop: threading.Event) -> Optional[BatonError]:
        """Renews once; returns the error of a passing failure, None otherwise
        (renewed, stopped, or found lost, which it marks itself)."""
        fire = False
        with self._ops:
            if stop.is_set() or self._lost or self._ended:
                return None
            since = time.monotonic()
            try:
                ans = self._transport.call(
                    "PATCH", self._path, {"ttl_ms": self._ttl_ms}, lock=self._lock_name, timeout=timeout, retries=0
                )
                self._apply(json_doc(ans), since)
            except LeaseLost as exc:  # or SessionLost
                fire = self._mark_lost("a renewal answered 404: %s" % exc.detail)
            except BatonError as exc:
                return exc
        if fire:
            self._fire_lost()
        return None

    def _keeper_lost(self, reason: str, cause: Optional[BatonError]) -> None:
        """Marks the hold lost."""
        self._lose(reason)


class Keeper:
    """Renews its target in a daemon thread until it is released or lost."""

    def __init__(self, target: KeptAlive, label: str, timeout: float) -> None:
        self._target = weakref.ref(target)
        self._timeout = timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="baton-renew " + label, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Asks the thread to end; it renews nothing more once a renewal in
        flight, if any, has returned."""
        self._stop.set()

    def join(self, timeout: Optional[float] = None) -> None:
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # a bug here must not pass silently, nor kill the program
            log.exception("baton: renewal thread failed")

    def _loop(self) -> None:
        failures = 0
        delay = 0.0
        while True:
            target = self._target()
            if target is None or target._keeper_done():
                return
            due = target._keeper_due() if failures == 0 else time.monotonic() + delay
            del target
            if self._stop.wait(max(0.0, due - time.monotonic())):
                return
            target = self._target()
            if target is None or target._keeper_done():
                return
            remaining = target._keeper_deadline() - time.monotonic()
            # An answer that comes after the lease ran out is of no use; waiting
            # for it longer only delays telling the user.
            err = target._keeper_renew(max(0.05, min(self._timeout, remaining)), self._stop)
            if err is None:
                failures = 0
                continue
            failures += 1
            remaining = target._keeper_deadline() - time.monotonic()
            if remaining <= _LAST_TRY:
                # No time for another try: the hold is lost when its lease ends,
                # unless it is released before.
                del target
                if self._stop.wait(max(0.0, remaining)):
                    return
                target = self._target()
                if target is not None:
                    target._keeper_lost("its lease ran out while renewals failed (last: %s)" % err, err)
                return
            delay = max(backoff(failures), err.retry_after or 0.0)
            # Try once more just before the end rather than not at all.
            delay = min(delay, remaining - _LAST_TRY)
            log.debug("baton: renewal failed (%s); retrying in %.2fs, %.2fs of lease left", err.kind, delay, remaining)
