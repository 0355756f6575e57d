"""The renewal thread of a lease or a session (Redisson's watchdog, minus its bugs).

It renews at a third of the ttl. A renewal answered 404 means the hold is gone:
the target is marked lost at once and the thread ends. Any other failure
(transport error, 503, ...) is retried with backoff while the lease lasts; if
the lease runs out first, the hold is lost. The thread ends the moment its
target is released or lost, and holds only a weak reference to it, so that a
lease the program dropped without releasing is not renewed forever (it runs
out after its ttl).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import weakref
from typing import Optional, Protocol

from ._errors import BatonError

log = logging.getLogger("baton")

# The last renewal is tried this long before the lease ends, so that it can
# still arrive in time.
_LAST_TRY = 0.05


class Renewable(Protocol):
    def _keeper_due(self) -> float:
        """Monotonic time of the next renewal."""

    def _keeper_deadline(self) -> float:
        """Monotonic time by which the hold has surely run out if not renewed."""

    def _keeper_done(self) -> bool:
        """True once released or lost."""

    def _keeper_renew(self, timeout: float, stop: threading.Event) -> Optional[BatonError]:
        """Renews once; returns the error of a passing failure, None otherwise
        (renewed, stopped, or found lost, which it marks itself)."""

    def _keeper_lost(self, reason: str, cause: Optional[BatonError]) -> None:
        """Marks the hold lost."""


def backoff(failures: int) -> float:
    """0.1 s doubling up to 2 s, with jitter, for the n-th failure in a row."""
    base = min(2.0, 0.1 * float(2 ** min(max(0, failures - 1), 10)))
    return base * (0.5 + random.random() / 2)


class Keeper:
    """Renews its target in a daemon thread until it is released or lost."""

    def __init__(self, target: Renewable, label: str, timeout: float) -> None:
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
