"""HTTP plumbing: the Transport that Client, Lease and Session share.

A Transport is the server's URL, the API key, the timeout and retry policy and
one pool of keep-alive connections to the server's host; its ``call`` sends one
request, retries it when its answer was lost, and turns a problem answer into
its BatonError.

http.client connections are not thread-safe, and a lease's renewal thread, a
session's and the user's own calls run at once; so each request takes an idle
connection from the pool (or opens one), and gives it back once the answer has
been read in full, unless the server said it would close it.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import random
import re
import ssl
import threading
import time
import uuid
from typing import Any, Dict, List, Mapping, Optional, Union
from urllib.parse import quote, urlsplit

from ._errors import BatonError, Unavailable, from_answer

log = logging.getLogger("baton")

# Errors that mean the request got no (complete) answer: refused, reset, cut,
# timed out, or a garbled response.
TRANSPORT_ERRORS = (OSError, http.client.HTTPException)

_MAX_IDLE = 16

# A Retry-After longer than this is not waited out: the error is raised, with
# retry_after telling the caller.
MAX_RETRY_AFTER = 30.0

_SECRET_SEGMENT = re.compile(r"/(leases|tickets|sessions)/[^/?]+")


class Secret:
    """A string that never shows itself in a repr or str (API keys)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__


# What an answer's headers offer: a case-insensitive get (http.client's
# HTTPMessage; a plain dict in tests).
Headers = Mapping[str, str]


class Answer:
    """A complete HTTP answer."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Headers, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Dict[str, Any]:
        try:
            doc = json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError("Baton answered %d with a body that is not JSON" % self.status) from exc
        if not isinstance(doc, dict):
            raise ValueError("Baton answered %d with JSON that is not an object" % self.status)
        return doc


class Endpoint:
    """The parts of the server URL: scheme, host, port and a path prefix."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError("Baton URL must start with http:// or https://, got %r" % _safe_url(url))
        if not parts.hostname:
            raise ValueError("Baton URL has no host: %r" % _safe_url(url))
        if parts.username is not None or parts.password is not None:
            raise ValueError("put the API key in api_key or BATON_API_KEY, not in the URL")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        host = "[%s]" % self.host if ":" in self.host else self.host
        default = (self.scheme == "http" and self.port == 80) or (self.scheme == "https" and self.port == 443)
        self.base = "%s://%s%s%s" % (self.scheme, host, "" if default else ":%d" % self.port, self.prefix)


def _safe_url(url: str) -> str:
    """The URL without any user:password part, for messages."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        return parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()
    return url


class Pool:
    """Keep-alive connections to one host, shared by every thread of a Client."""

    def __init__(self, endpoint: Endpoint, ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self._endpoint = endpoint
        self._ssl = ssl_context
        self._idle: List[http.client.HTTPConnection] = []
        self._mu = threading.Lock()
        self._closed = False

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        with self._mu:
            if self._idle:
                conn = self._idle.pop()
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                return conn
        ep = self._endpoint
        if ep.scheme == "https":
            ctx = self._ssl or ssl.create_default_context()
            return http.client.HTTPSConnection(ep.host, ep.port, timeout=timeout, context=ctx)
        return http.client.HTTPConnection(ep.host, ep.port, timeout=timeout)

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._mu:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def request(
        self,
        method: str,
        target: str,
        body: Optional[bytes],
        headers: Dict[str, str],
        timeout: float,
    ) -> Answer:
        """Sends one request and reads its whole answer. Raises one of
        TRANSPORT_ERRORS when no complete answer arrived within timeout (per
        socket operation)."""
        conn = self._connection(timeout)
        try:
            conn.request(method, self._endpoint.prefix + target, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except BaseException:
            conn.close()
            raise
        if resp.will_close:
            conn.close()
        else:
            self._release(conn)
        return Answer(resp.status, resp.headers, data)  # type: ignore[arg-type]

    def close(self) -> None:
        with self._mu:
            idle, self._idle = self._idle, []
            self._closed = True
        for conn in idle:
            conn.close()


def millis(seconds: Union[float, int], what: str) -> int:
    """Seconds as whole milliseconds, rounded up so that a positive duration is
    never sent as 0 (which means "none" or "the default")."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError("%s must be a number of seconds, got %r" % (what, seconds))
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise ValueError("%s must be a finite number of seconds >= 0, got %r" % (what, seconds))
    return int(math.ceil(seconds * 1000 - 1e-9))


def lock_path(name: str) -> str:
    """``/v1/locks/{name}``. Only characters outside the lock-name alphabet
    are escaped: Baton matches the name on the raw path, and answers a valid
    name with an escaped ``:`` (``%3A``) ``400 invalid-name``."""
    if not isinstance(name, str) or not name:
        raise ValueError("a lock name must be a non-empty str, got %r" % (name,))
    return "/v1/locks/" + quote(name, safe=":")


def backoff(failures: int) -> float:
    """0.1 s doubling up to 2 s, with jitter, for the n-th failure in a row."""
    base = min(2.0, 0.1 * float(2 ** min(max(0, failures - 1), 10)))
    return base * (0.5 + random.random() / 2)


def json_doc(ans: Answer) -> Dict[str, Any]:
    """The answer's JSON object; a BatonError when it is not one."""
    try:
        return ans.json()
    except ValueError as exc:
        raise BatonError(str(exc), status=ans.status) from None


def _route(target: str) -> str:
    """A request target with its secret ids and query left out, for logs."""
    return _SECRET_SEGMENT.sub(lambda m: "/%s/{%s}" % (m.group(1), m.group(1)[:-1]), target.split("?", 1)[0])


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return "%s: %s" % (type(exc).__name__, text) if text else type(exc).__name__


class Transport:
    """How to talk to one server, shared by a Client and its leases and
    sessions: where (the endpoint), as whom (the API key), how long to wait
    (``timeout``), how often to retry (``retries``), over which connections
    (the pool). Thread-safe; ``timeout`` and ``retries`` may be changed while
    it is in use (the Client's attributes of these names are these)."""

    def __init__(
        self,
        endpoint: Endpoint,
        key: Optional[Secret],
        *,
        timeout: float,
        retries: int,
        user_agent: str,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        self.endpoint = endpoint
        self.key = key
        self.timeout = timeout
        self.retries = retries
        self.user_agent = user_agent
        self.pool = Pool(endpoint, ssl_context)

    @property
    def url(self) -> str:
        """The server's base URL."""
        return self.endpoint.base

    def close(self) -> None:
        """Closes the idle connections."""
        self.pool.close()

    def call(
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
        headers = {"Accept": "application/json, application/problem+json", "User-Agent": self.user_agent}
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.key is not None:
            headers["Authorization"] = "Bearer " + self.key.reveal()
        if method == "POST":
            headers["Idempotency-Key"] = uuid.uuid4().hex
        attempts = 1 + (self.retries if retries is None else retries)
        per_call = self.timeout if timeout is None else timeout
        lost_answer = False
        failures = 0
        while True:
            cause: Optional[BaseException] = None
            try:
                ans = self.pool.request(method, target, data, headers, per_call)
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
