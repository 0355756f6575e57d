"""HTTP plumbing: one pool of keep-alive connections to the server's host.

http.client connections are not thread-safe, and a lease's renewal thread, a
session's and the user's own calls run at once; so each request takes an idle
connection from the pool (or opens one), and gives it back once the answer has
been read in full, unless the server said it would close it.
"""

from __future__ import annotations

import http.client
import json
import math
import ssl
import threading
from typing import Any, Dict, List, Mapping, Optional, Union
from urllib.parse import quote, urlsplit

# Errors that mean the request got no (complete) answer: refused, reset, cut,
# timed out, or a garbled response.
TRANSPORT_ERRORS = (OSError, http.client.HTTPException)

_MAX_IDLE = 16


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
