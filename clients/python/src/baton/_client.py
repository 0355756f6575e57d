"""Client: the calls, their retries, and the waiting."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import ssl
import time
import uuid
from types import TracebackType
from typing import Any, Callable, Dict, Optional, Tuple, Type
from urllib.parse import quote

from ._errors import BatonError, LockHeld, Unavailable, from_answer
from ._keeper import backoff
from ._lease import Lease, LostCallback
from ._session import Session
from ._transport import TRANSPORT_ERRORS, Answer, Endpoint, Pool, Secret, lock_path, millis

log = logging.getLogger("baton")

DEFAULT_URL = "http://localhost:8080"
USER_AGENT = "baton-python/0.1"

# The longest a single request waits on the server. Long waits are cut into
# such pieces, so that no proxy in between (nginx: 60 s) times them out, and
# they stay below the server's maximum (BATON_MAX_WAIT, 60 s by default).
LONG_POLL = 20.0

# A Retry-After longer than this is not waited out: the error is raised, with
# retry_after telling the caller.
MAX_RETRY_AFTER = 30.0

_VISIBLE_ASCII = re.compile(r"[!-~]+\Z")

_SECRET_SEGMENT = re.compile(r"/(leases|tickets|sessions)/[^/?]+")


def _route(target: str) -> str:
    """A request target with its secret ids and query left out, for logs."""
    return _SECRET_SEGMENT.sub(lambda m: "/%s/{%s}" % (m.group(1), m.group(1)[:-1]), target.split("?", 1)[0])


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return "%s: %s" % (type(exc).__name__, text) if text else type(exc).__name__


class Client:
    """A client of one Baton server; share one per process (it is thread-safe).

    ``url`` defaults to ``BATON_URL``, else ``http://localhost:8080``;
    ``api_key`` to ``BATON_API_KEY`` (sent as ``Authorization: Bearer``; never
    shown by ``repr``, logs or errors). ``timeout`` (seconds) bounds every call,
    a long-poll by its wait plus ``timeout``. A call that got no answer (a
    transport error, or a 502/503/504) is retried up to ``retries`` times with
    backoff, honouring ``Retry-After``; a POST is retried with the same
    ``Idempotency-Key`` and body, so a lost answer never leaves a second hold.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: float = 10.0,
        *,
        retries: int = 5,
        ssl_context: Optional[ssl.SSLContext] = None,
        user_agent: str = USER_AGENT,
    ) -> None:
        if url is None:
            url = os.environ.get("BATON_URL") or DEFAULT_URL
        if api_key is None:
            api_key = os.environ.get("BATON_API_KEY") or None
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError("timeout must be a number of seconds > 0, got %r" % (timeout,))
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError("retries must be an int >= 0, got %r" % (retries,))
        if api_key and not _VISIBLE_ASCII.match(api_key):
            # Never echo it: http.client would, in the error of the first call.
            raise ValueError("api_key must be visible ASCII characters (no spaces or newlines)")
        self._endpoint = Endpoint(url)
        self._key = Secret(api_key) if api_key else None
        self.timeout = float(timeout)
        self.retries = retries
        self._ua = user_agent
        self._pool = Pool(self._endpoint, ssl_context)

    @property
    def url(self) -> str:
        """The server's base URL."""
        return self._endpoint.base

    def __repr__(self) -> str:
        return "Client(url=%r, api_key=%s, timeout=%r)" % (
            self.url,
            "'***'" if self._key is not None else "None",
            self.timeout,
        )

    def close(self) -> None:
        """Closes the idle connections."""
        self._pool.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    # -- locks -----------------------------------------------------------------

    def acquire(
        self,
        name: str,
        ttl: float = 30.0,
        wait: Optional[float] = 0.0,
        fair: bool = False,
        shared: bool = False,
        limit: Optional[int] = None,
        owner: Optional[str] = None,
        auto_renew: bool = False,
        on_lost: Optional[LostCallback] = None,
    ) -> Lease:
        """Takes the lock ``name`` for ``ttl`` seconds, waiting up to ``wait``
        seconds for it (None: no limit), and returns its Lease.

        ``fair``: wait in the lock's FIFO queue (a ticket, polled until granted
        or the wait runs out, and deleted when giving up). ``shared``: a shared
        hold, up to ``limit`` at once. ``owner``: a label shown in the lock's
        state. ``auto_renew``: renew in a background thread at a third of the
        ttl until released or lost; ``on_lost(lease)`` is called when it is lost.

        Raises LockHeld when not granted in time, or any BatonError of the call.
        """
        return self._acquire(
            name, ttl=ttl, wait=wait, fair=fair, shared=shared, limit=limit, owner=owner,
            auto_renew=auto_renew, on_lost=on_lost, session=None,
        )

    def lock(
        self,
        name: str,
        ttl: float = 30.0,
        wait: Optional[float] = 10.0,
        fair: bool = False,
        shared: bool = False,
        limit: Optional[int] = None,
        owner: Optional[str] = None,
        auto_renew: bool = True,
        on_lost: Optional[LostCallback] = None,
    ) -> _LockContext:
        """A context manager that takes the lock when entered (as ``acquire``,
        but renewed in the background unless ``auto_renew=False``), gives the
        Lease to the block, and releases it when the block ends, however it
        ends. If the hold was lost meanwhile and the block raised nothing,
        leaving it raises LeaseLost.
        """
        return _LockContext(
            self,
            dict(name=name, ttl=ttl, wait=wait, fair=fair, shared=shared, limit=limit, owner=owner,
                 auto_renew=auto_renew, on_lost=on_lost),
        )

    def state(self, name: str, wait: Optional[float] = None, fence: Optional[int] = None) -> Dict[str, Any]:
        """The lock's state as the server tells it: ``held``, ``mode``,
        ``holders``, ``fence``, ``owner``, ``count``, ``ttl_ms``, ``waiters``,
        ``limit``, ``holds``... With ``wait`` (seconds), waits up to that long
        for it to change from ``fence`` (default: its fence now)."""
        query = []
        if wait:
            query.append("wait_ms=%d" % millis(wait, "wait"))
        if fence is not None:
            query.append("fence=%d" % int(fence))
        target = lock_path(name) + ("?" + "&".join(query) if query else "")
        ans = self._call("GET", target, lock=name, timeout=(wait or 0.0) + self.timeout)
        return self._doc(ans)

    def force_release(self, name: str) -> bool:
        """Ends every hold of the lock, whoever holds it (the key needs the
        ``admin`` action); True when there was one."""
        ans = self._call("DELETE", lock_path(name) + "?force=true", lock=name)
        return bool(self._doc(ans).get("released"))

    # -- sessions --------------------------------------------------------------

    def open_session(
        self,
        ttl: float = 30.0,
        owner: Optional[str] = None,
        auto_renew: bool = True,
        on_lost: Optional[Callable[[Session], None]] = None,
    ) -> Session:
        """Creates a session of ``ttl`` seconds, renewed in the background
        unless ``auto_renew=False``. Close it (or use ``session()``)."""
        ttl_ms = millis(ttl, "ttl")
        body: Dict[str, Any] = {"ttl_ms": ttl_ms}
        if owner is not None:
            body["owner"] = owner
        since = time.monotonic()
        ans = self._call("POST", "/v1/sessions", body)
        s = Session(self, self._doc(ans), ttl_ms=ttl_ms, since=since, on_lost=on_lost)
        if auto_renew:
            s._start_keeper()
        return s

    def session(
        self,
        ttl: float = 30.0,
        owner: Optional[str] = None,
        auto_renew: bool = True,
        on_lost: Optional[Callable[[Session], None]] = None,
    ) -> _SessionContext:
        """A context manager: a session (see ``open_session``) for the block,
        closed when it ends, which releases every hold taken with ``s.lock``."""
        return _SessionContext(self, dict(ttl=ttl, owner=owner, auto_renew=auto_renew, on_lost=on_lost))

    # -- internals -------------------------------------------------------------

    def _acquire(
        self,
        name: str,
        *,
        ttl: Optional[float],
        wait: Optional[float],
        fair: bool,
        shared: bool,
        limit: Optional[int],
        owner: Optional[str],
        auto_renew: bool,
        on_lost: Optional[LostCallback],
        session: Optional[Session],
    ) -> Lease:
        if not isinstance(name, str) or not name:
            raise ValueError("a lock name must be a non-empty str, got %r" % (name,))
        body: Dict[str, Any] = {}
        ttl_ms: Optional[int] = None
        if session is not None:
            body["session"] = session.session
        else:
            ttl_ms = millis(ttl if ttl is not None else 30.0, "ttl")
            body["ttl_ms"] = ttl_ms
        if shared:
            body["shared"] = True
            if limit is not None:
                body["limit"] = int(limit)
        elif limit is not None:
            raise ValueError("limit is for shared holds: pass shared=True")
        if owner is not None:
            body["owner"] = owner
        waited = wait is None or wait > 0
        deadline = math.inf if wait is None else time.monotonic() + millis(wait, "wait") / 1000.0
        if fair:
            # Ask without waiting, then wait on the ticket: a ticket poll cut by a
            # proxy is simply polled again, a POST would have to be replayed.
            body["fair"] = True
            since = time.monotonic()
            ans = self._call("POST", lock_path(name), body, lock=name)
            if ans.status == 202:
                ans, since = self._await_ticket(name, self._doc(ans), deadline, wait)
                waited = True
        else:
            ans, since = self._post_waiting(name, body, deadline)
        if waited:
            # The grant came at some point of a long wait: the answer's ttl_ms
            # counts from about when it arrived, less its way back.
            since = max(since, time.monotonic() - 0.05)
        lease = Lease(self, self._doc(ans), ttl_ms=ttl_ms, since=since, session=session, on_lost=on_lost)
        if session is not None:
            session._adopt(lease)
        elif auto_renew:
            lease._start_keeper()
        return lease

    def _post_waiting(self, name: str, body: Dict[str, Any], deadline: float) -> Tuple[Answer, float]:
        """POSTs until granted or the deadline passes, in pieces of LONG_POLL."""
        while True:
            left = max(0.0, deadline - time.monotonic())
            piece = min(left, LONG_POLL)
            b = dict(body)
            if piece > 0:
                b["wait_ms"] = millis(piece, "wait")
            since = time.monotonic()
            try:
                ans = self._call("POST", lock_path(name), b, lock=name, timeout=piece + self.timeout)
            except LockHeld:
                if deadline - time.monotonic() <= 0:
                    raise
                if time.monotonic() - since < piece / 2:
                    time.sleep(0.05)  # answered early (a server shutting down): do not spin
                continue
            return ans, since

    def _await_ticket(
        self, name: str, ticket: Dict[str, Any], deadline: float, wait: Optional[float]
    ) -> Tuple[Answer, float]:
        """Polls a fair-queue ticket until granted; deletes it when giving up."""
        path = "%s/tickets/%s" % (lock_path(name), quote(str(ticket["ticket"]), safe=""))
        failures = 0
        longest = LONG_POLL
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                piece = min(left, longest)
                since = time.monotonic()
                try:
                    ans = self._call(
                        "GET", "%s?wait_ms=%d" % (path, millis(piece, "wait")), lock=name,
                        timeout=piece + self.timeout, retries=0,
                    )
                except Unavailable as exc:
                    # The poll's answer was lost: the ticket lives on for
                    # ticket_ttl_ms after its last poll, so poll again.
                    took = time.monotonic() - since
                    if exc.status in (502, 504) and took >= 0.1:
                        # A proxy in front gave up on the poll after `took`: the
                        # server is there; poll again at once, and for less: less
                        # than the proxy waited, and less than the poll it cut (a
                        # loaded server or proxy can take a fifth of a short poll
                        # on top of it, and a poll cut again must not be asked
                        # for as long again).
                        longest = max(0.1, min(longest, piece, took) * 0.8)
                        failures = 0
                        log.debug("baton: a proxy cut a ticket poll for %r after %.2fs", name, took)
                        continue
                    failures += 1
                    delay = max(backoff(failures), exc.retry_after or 0.0)
                    log.debug("baton: ticket poll for %r failed (%s); polling again", name, exc.kind)
                    time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
                    continue
                failures = 0
                if ans.status == 200:
                    return ans, since
        except BaseException:
            self._cancel_ticket(name, path)
            raise
        self._cancel_ticket(name, path)
        raise LockHeld(
            "not granted within %gs; its place in the fair queue was given up" % (wait or 0.0),
            type="/problems/lock-held",
            status=423,
            lock=name,
        )

    def _cancel_ticket(self, name: str, path: str) -> None:
        try:
            self._call("DELETE", path, lock=name, retries=2, gone_ok_on_retry=True)
        except BatonError as exc:
            # The ticket ends by itself ticket_ttl_ms after its last poll.
            log.debug("baton: could not delete the ticket for %r: %s", name, exc)

    def _doc(self, ans: Answer) -> Dict[str, Any]:
        try:
            return ans.json()
        except ValueError as exc:
            raise BatonError(str(exc), status=ans.status) from None

    def _call(
        self,
        method: str,
        target: str,
        body: Optional[Dict[str, Any]] = None,
        *,
        lock: Optional[str] = None,
        timeout: Optional[float] = None,
        retries: Optional[int] = None,
        gone_ok_on_retry: bool = False,
    ) -> Answer:
        """Sends a request, retrying one whose answer was lost (a transport
        error, 502, 503 or 504) up to ``retries`` times with backoff; a POST
        keeps its Idempotency-Key and body across retries. Returns an answer
        below 400, or raises the BatonError of the last one.

        ``gone_ok_on_retry``: a 404 or 410 after an earlier answer was lost
        means that earlier attempt did the job (a DELETE); return it.
        """
        data = None
        headers = {"Accept": "application/json, application/problem+json", "User-Agent": self._ua}
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self._key is not None:
            headers["Authorization"] = "Bearer " + self._key.reveal()
        if method == "POST":
            headers["Idempotency-Key"] = uuid.uuid4().hex
        attempts = 1 + (self.retries if retries is None else retries)
        per_call = self.timeout if timeout is None else timeout
        lost_answer = False
        failures = 0
        while True:
            cause: Optional[BaseException] = None
            try:
                ans = self._pool.request(method, target, data, headers, per_call)
            except TRANSPORT_ERRORS as exc:
                cause = exc
                err: BatonError = Unavailable(
                    "no answer from Baton at %s: %s" % (self.url, _describe(exc)), lock=lock
                )
                lost_answer = True
            else:
                if ans.status < 400:
                    return ans
                if gone_ok_on_retry and lost_answer and ans.status in (404, 410):
                    return ans
                err = from_answer(ans.status, ans.headers, ans.body, lock)
                if ans.status not in (502, 503, 504):
                    raise err
                lost_answer = True
            failures += 1
            if failures >= attempts or (err.retry_after or 0.0) > MAX_RETRY_AFTER:
                if failures > 1:
                    err.detail += " (%d attempts)" % failures
                raise err from cause
            delay = max(backoff(failures), err.retry_after or 0.0)
            log.debug(
                "baton: %s %s: %s; retry %d of %d in %.2fs",
                method, _route(target), err.kind, failures, attempts - 1, delay,
            )
            time.sleep(delay)


class _LockContext:
    """What ``Client.lock`` returns: acquires on enter, releases on exit."""

    def __init__(self, client: Client, kwargs: Dict[str, Any]) -> None:
        self._client = client
        self._kwargs = kwargs
        self._lease: Optional[Lease] = None

    def __enter__(self) -> Lease:
        self._lease = self._client._acquire(session=None, **self._kwargs)
        return self._lease

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.__exit__(exc_type, exc, tb)


class _SessionContext:
    """What ``Client.session`` returns: opens on enter, closes on exit."""

    def __init__(self, client: Client, kwargs: Dict[str, Any]) -> None:
        self._client = client
        self._kwargs = kwargs
        self._session: Optional[Session] = None

    def __enter__(self) -> Session:
        self._session = self._client.open_session(**self._kwargs)
        return self._session

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        s, self._session = self._session, None
        if s is not None:
            s.__exit__(exc_type, exc, tb)
