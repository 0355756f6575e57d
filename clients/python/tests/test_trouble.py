"""Behaviour under trouble: no server, a restart, 503s, lost answers, timeouts."""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.request
from typing import Any, List

import pytest

from baton import BatonError, Client, LockHeld, Overloaded, Unavailable
from conftest import FakeServer, Proxy, wait_until


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_server_is_a_typed_error_after_bounded_retries(full_key: str, name: str) -> None:
    c = Client("http://127.0.0.1:%d" % closed_port(), full_key, timeout=1.0, retries=3)
    started = time.monotonic()
    with pytest.raises(Unavailable) as info:
        c.acquire(name)
    took = time.monotonic() - started
    assert 0.1 < took < 10.0  # three backoffs, bounded
    err = info.value
    assert err.status == 0 and err.kind == "unreachable" and err.lock == name
    assert "(4 attempts)" in str(err) and "refused" in str(err).lower()
    assert isinstance(err.__cause__, ConnectionRefusedError)


def test_a_proxy_dropping_every_connection(via_proxy: Client, proxy: Proxy, name: str) -> None:
    proxy.down(True)
    c = Client(proxy.url, via_proxy._key.reveal() if via_proxy._key else None, retries=2)
    with pytest.raises(Unavailable) as info:
        c.state(name)
    assert info.value.status == 0 and "(3 attempts)" in str(info.value)
    # Back up within the retries: the call goes through.
    threading.Timer(0.2, proxy.down, args=(False,)).start()
    lease = via_proxy.acquire(name)
    assert via_proxy.state(name)["holders"] == 1
    lease.release()


def test_a_server_restart_is_ridden_out(client: Client, name: str) -> None:
    """The server is stopped (SIGTERM) and started again on the same port and
    Redis: pooled connections die, new ones are refused for a while. Calls made
    meanwhile are retried, and an auto-renewed hold survives."""
    lease = client.acquire(name, ttl=3.0, auto_renew=True)
    client.state(name)  # a pooled connection for the restart to kill
    done = threading.Event()
    failed: List[BaseException] = []

    def restart() -> None:
        try:
            req = urllib.request.Request(os.environ["BATON_TEST_RESTART_URL"], data=b"", method="POST")
            with urllib.request.urlopen(req, timeout=60) as resp:
                assert resp.status == 204
        except BaseException as exc:
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=restart).start()
    calls = 0
    while not done.is_set() or calls < 3:
        assert client.state(name)["fence"] == lease.fence
        calls += 1
    assert not failed
    other = client.acquire(name + "-after")
    other.release()
    time.sleep(1.2)  # a renewal after the restart
    assert not lease.lost
    assert client.state(name)["fence"] == lease.fence
    lease.release()


@pytest.mark.parametrize("kind", ["store-unavailable", "overloaded"])
def test_a_503_with_retry_after_is_retried(via_proxy: Client, proxy: Proxy, name: str, kind: str) -> None:
    path = "/v1/locks/%s" % name
    proxy.status(503, n=1, path=path, retry_after=1, kind=kind)
    started = time.monotonic()
    lease = via_proxy.acquire(name)
    assert time.monotonic() - started >= 0.95  # Retry-After honoured
    assert proxy.count(path) == 2
    assert via_proxy.state(name)["holders"] == 1
    lease.release()


@pytest.mark.parametrize("kind", ["store-unavailable", "overloaded"])
def test_503s_past_the_retries_are_unavailable_with_retry_after(
    proxy: Proxy, full_key: str, name: str, kind: str
) -> None:
    c = Client(proxy.url, full_key, retries=1)
    path = "/v1/locks/%s" % name
    proxy.status(503, n=5, path=path, retry_after=1, kind=kind)
    with pytest.raises(Unavailable) as info:
        c.acquire(name)
    err = info.value
    assert err.status == 503 and err.type == "/problems/" + kind and err.retry_after == 1.0
    assert isinstance(err, Overloaded) == (kind == "overloaded")
    assert proxy.count(path) == 2


def test_a_post_whose_answer_is_lost_makes_one_hold(via_proxy: Client, proxy: Proxy, name: str) -> None:
    path = "/v1/locks/%s" % name
    proxy.cut(n=2, path=path, method="POST")  # Baton grants twice over; both answers are lost
    lease = via_proxy.acquire(name, ttl=10.0)
    assert proxy.count(path) == 3  # the same Idempotency-Key and body each time
    state = via_proxy.state(name)
    assert state["holders"] == 1 and state["fence"] == lease.fence and state["holds"][0]["count"] == 1
    lease.release()
    assert via_proxy.state(name)["held"] is False


def test_a_shared_post_whose_answer_is_lost_takes_one_slot(via_proxy: Client, proxy: Proxy, name: str) -> None:
    path = "/v1/locks/%s" % name
    proxy.cut(n=1, path=path, method="POST")
    a = via_proxy.acquire(name, shared=True, limit=2)
    b = via_proxy.acquire(name, shared=True, limit=2)  # would be refused if the lost answer had taken a slot
    assert via_proxy.state(name)["holders"] == 2
    a.release()
    b.release()


def test_a_fair_post_whose_answer_is_lost_queues_once(via_proxy: Client, proxy: Proxy, name: str) -> None:
    holder = via_proxy.acquire(name, ttl=10.0)
    proxy.cut(n=1, path="/v1/locks/%s" % name, method="POST")
    got: List[Any] = []
    t = threading.Thread(target=lambda: got.append(via_proxy.acquire(name, wait=10.0, fair=True)))
    t.start()
    tickets = "/v1/locks/%s/tickets/" % name
    wait_until(lambda: proxy.count(tickets) >= 1, 5.0, "the ticket to be polled")
    assert via_proxy.state(name)["waiters"] == 1
    holder.release()
    t.join(10.0)
    assert got and via_proxy.state(name)["fence"] == got[0].fence
    got[0].release()
    assert via_proxy.state(name)["waiters"] == 0


def test_a_502_or_504_on_a_post_is_retried(via_proxy: Client, proxy: Proxy, name: str) -> None:
    path = "/v1/locks/%s" % name
    proxy.status(502, n=1, path=path)
    proxy.status(504, n=1, path=path)
    lease = via_proxy.acquire(name)
    assert proxy.count(path) == 3 and via_proxy.state(name)["holders"] == 1
    lease.release()


def test_a_release_whose_answer_is_lost(via_proxy: Client, proxy: Proxy, name: str) -> None:
    lease = via_proxy.acquire(name)
    proxy.cut(n=1, path=lease.path, method="DELETE")
    lease.release()  # the retry finds it gone: the first one released it
    assert lease.released and not lease.lost
    assert via_proxy.state(name)["held"] is False


def test_a_session_post_whose_answer_is_lost(via_proxy: Client, proxy: Proxy, name: str) -> None:
    proxy.cut(n=1, path="/v1/sessions", method="POST")
    with via_proxy.session(ttl=5.0) as s:
        s.lock(name)
        assert len(s.holds()) == 1
    assert proxy.count("/v1/sessions") >= 2
    assert via_proxy.state(name)["held"] is False


def test_every_call_has_a_timeout(fake: FakeServer) -> None:
    fake.script = [("sleep", 10.0)]
    c = Client(fake.url, timeout=0.3, retries=0)
    started = time.monotonic()
    with pytest.raises(Unavailable) as info:
        c.state("x")
    assert time.monotonic() - started < 5.0  # its timeout, not the server's 10 s
    assert isinstance(info.value.__cause__, (socket.timeout, TimeoutError))


def test_a_long_poll_gets_its_wait_on_top_of_the_timeout(proxy: Proxy, full_key: str, name: str) -> None:
    c = Client(proxy.url, full_key, timeout=0.5, retries=0)
    holder = c.acquire(name, ttl=10.0)
    threading.Timer(1.0, holder.release).start()
    started = time.monotonic()
    lease = c.acquire(name, wait=20.0)  # blocks on the server for a second, twice the timeout
    assert 0.9 < time.monotonic() - started < 10.0  # at the release, not the wait's end
    lease.release()
    state = c.state(name, wait=0.8, fence=lease.fence)  # a watch: no change, waits it out
    assert state["held"] is False


def test_a_non_problem_answer_is_still_typed(fake: FakeServer) -> None:
    fake.default = (500, {"X-Request-Id": "r-1"}, "oops")
    c = Client(fake.url, retries=0)
    with pytest.raises(BatonError) as info:
        c.state("x")
    err = info.value
    assert type(err) is BatonError and err.status == 500 and err.request_id == "r-1"
    fake.default = (423, {"Retry-After": "3"}, {"type": "/problems/lock-held", "title": "Lock held",
                                                 "status": 423, "detail": "held", "ttl_ms": 2500,
                                                 "owner": "o", "waiters": 2})
    with pytest.raises(LockHeld) as held:
        c.acquire("x")
    assert (held.value.retry_after, held.value.ttl, held.value.owner, held.value.waiters) == (3.0, 2.5, "o", 2)
