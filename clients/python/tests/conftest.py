"""Fixtures for the client's tests against a real Baton.

`go test ./clients/python/` (run by `make test`) starts a Baton in keys mode on
its own redis-server, a fault-injecting proxy in front of it, a second Baton in
protected mode and a restart control, and hands their addresses over in the
environment read here.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple
from urllib.parse import urlencode

import pytest

from baton import Client


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(
            "%s is not set: these tests need the Baton that `go test ./clients/python/` starts "
            "(`make test` runs it)" % name,
            pytrace=False,
        )
    return value


class Proxy:
    """The harness's fault proxy (internal/batontest/proxy.go), driven over HTTP."""

    def __init__(self, url: str, control: str) -> None:
        self.url = url
        self.control = control

    def _ctl(self, what: str, **params: Any) -> None:
        query = urlencode({k: v for k, v in params.items() if v is not None})
        req = urllib.request.Request(self.control + "/" + what + ("?" + query if query else ""), data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            resp.read()

    def cut(self, n: int = 1, path: Optional[str] = None, method: Optional[str] = None) -> None:
        """The next n matching requests reach Baton; their answers are lost."""
        self._ctl("cut", n=n, path=path, method=method)

    def timeout(self, ms: int, path: Optional[str] = None, n: Optional[int] = None) -> None:
        """Matching requests not answered within ms get a 504, as from nginx."""
        self._ctl("timeout", ms=ms, path=path, n=n)

    def status(
        self,
        code: int,
        n: int = 1,
        path: Optional[str] = None,
        retry_after: Optional[int] = None,
        kind: Optional[str] = None,
    ) -> None:
        """The next n matching requests are answered code without reaching Baton
        (a problem of type /problems/<kind>, store-unavailable by default)."""
        self._ctl("status", code=code, n=n, path=path, retry_after=retry_after, type=kind)

    def down(self, on: bool) -> None:
        self._ctl("down", on=1 if on else 0)

    def reset(self) -> None:
        self._ctl("reset")

    def count(self, path: str = "") -> int:
        with urllib.request.urlopen(self.control + "/count?" + urlencode({"path": path}), timeout=5) as resp:
            return int(json.loads(resp.read())["requests"])


@pytest.fixture(scope="session")
def server_url() -> str:
    return _env("BATON_URL")


@pytest.fixture(scope="session")
def full_key() -> str:
    """Every action on every lock."""
    return _env("BATON_TEST_KEY_FULL")


@pytest.fixture(scope="session")
def limited_key() -> str:
    """lock and read on client:* and cli:*."""
    return _env("BATON_TEST_KEY_LIMITED")


@pytest.fixture(scope="session")
def reader_key() -> str:
    """read on every lock."""
    return _env("BATON_TEST_KEY_READER")


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    p = Proxy(_env("BATON_PROXY_URL"), _env("BATON_PROXY_CONTROL"))
    p.reset()
    yield p
    p.reset()


@pytest.fixture
def client(server_url: str, full_key: str) -> Iterator[Client]:
    """A client straight to the server, with the full key."""
    c = Client(server_url, full_key, timeout=5.0)
    yield c
    c.close()


@pytest.fixture
def via_proxy(proxy: Proxy, full_key: str) -> Iterator[Client]:
    """A client through the fault proxy, with the full key."""
    c = Client(proxy.url, full_key, timeout=5.0)
    yield c
    c.close()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A lock name of this test's own (the limited key may use client:*)."""
    base = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:80]
    return "client:py-%s-%s" % (base, uuid.uuid4().hex[:8])


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests say which key they use; the harness's BATON_URL stays."""
    monkeypatch.delenv("BATON_API_KEY", raising=False)


def wait_until(pred: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Polls pred until it holds (for state that has no event to wait on)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


def raw(method: str, url: str, key: Optional[str], body: Optional[Dict[str, Any]] = None) -> Tuple[int, Dict[str, Any]]:
    """A request without the client, for acting behind its back."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else {}
    except urllib.error.HTTPError as err:
        text = err.read()
        return err.code, json.loads(text) if text else {}


class Recorded:
    def __init__(self, method: str, path: str, headers: Dict[str, str], body: bytes) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class FakeServer:
    """A scripted HTTP server that records what the client sends. Each script
    entry is (status, headers, body), "drop" (close without answering), or
    ("sleep", seconds); when the script runs out, every request gets
    default."""

    LEASE = {
        "name": "x", "lease": "L1", "url": "/v1/locks/x/leases/L1", "fence": 7, "count": 1,
        "ttl_ms": 30000, "expires_at": "2030-01-01T00:00:00.000Z", "owner": "",
        "acquired_at": "2030-01-01T00:00:00.000Z", "shared": False,
    }

    def __init__(self) -> None:
        self.requests: List[Recorded] = []
        self.script: List[Any] = []
        self.default: Any = (201, {}, self.LEASE)
        self._mu = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                with fake._mu:
                    fake.requests.append(Recorded(self.command, self.path, dict(self.headers.items()), body))
                    step = fake.script.pop(0) if fake.script else fake.default
                if step == "drop":
                    self.close_connection = True
                    self.connection.close()
                    return
                if isinstance(step, tuple) and step[0] == "sleep":
                    time.sleep(step[1])
                    step = fake.default
                status, headers, doc = step
                data = json.dumps(doc).encode()
                self.send_response(status)
                ctype = "application/problem+json" if status >= 400 else "application/json"
                self.send_header("Content-Type", ctype)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    f = FakeServer()
    yield f
    f.close()
