"""Sessions: many holds, renewed together in the background, released together."""

from __future__ import annotations

import threading
import time
from typing import Any, List

import pytest

from baton import Client, LeaseLost, Session, SessionLost
from conftest import raw, wait_until


def test_leaving_the_block_releases_every_hold(client: Client, name: str) -> None:
    a, b = name + "-a", name + "-b"
    with client.session(ttl=5.0, owner="job-42") as s:
        assert isinstance(s, Session) and s.owner == "job-42"
        la = s.lock(a)
        lb = s.lock(b, shared=True)
        assert lb.shared and not la.shared and la.session is s
        assert s.leases == [la, lb]
        assert client.state(a)["held"] and client.state(b)["mode"] == "shared"
        assert sorted(h["name"] for h in s.holds()) == [a, b]
    assert client.state(a)["held"] is False and client.state(b)["held"] is False
    assert la.released and lb.released and s.closed
    with pytest.raises(SessionLost):
        s.lock(a)


def test_an_exception_in_the_block_releases_every_hold(client: Client, name: str) -> None:
    with pytest.raises(RuntimeError):
        with client.session(ttl=5.0) as s:
            s.lock(name + "-a")
            s.lock(name + "-b")
            raise RuntimeError("job failed")
    assert not client.state(name + "-a")["held"] and not client.state(name + "-b")["held"]


def test_the_session_is_renewed_in_the_background(client: Client, name: str) -> None:
    with client.session(ttl=0.9) as s:
        lease = s.lock(name)
        time.sleep(2.2)  # well past the ttl
        assert not s.lost and not lease.lost
        assert client.state(name)["fence"] == lease.fence
    assert client.state(name)["held"] is False


def test_a_hold_released_alone_leaves_the_session(client: Client, name: str) -> None:
    s = client.open_session(ttl=5.0)
    a = s.lock(name + "-a")
    b = s.lock(name + "-b")
    a.release()
    assert s.leases == [b]
    assert client.state(name + "-a")["held"] is False
    assert [h["name"] for h in s.holds()] == [name + "-b"]
    assert s.close() == 1
    assert s.close() == 0  # already closed
    assert client.state(name + "-b")["held"] is False


def test_renewing_a_hold_renews_its_session(client: Client, name: str) -> None:
    with client.session(ttl=1.0, auto_renew=False) as s:
        lease = s.lock(name)
        lease.renew(ttl=5.0)
        assert s.ttl > 4.0 and lease.ttl > 4.0
        assert client.state(name)["ttl_ms"] > 4000


def test_a_lost_session_loses_its_holds(client: Client, full_key: str, name: str) -> None:
    lost: List[Any] = []
    with pytest.raises(SessionLost) as info:
        with client.session(ttl=0.9, on_lost=lost.append) as s:
            lease = s.lock(name)
            status, _ = raw("DELETE", s.url, full_key)  # ended behind its back
            assert status == 200
            assert s.lost_event.wait(2.0) and lease.lost_event.wait(1.0)
            assert s.lost and lease.lost and "404" in s.lost_reason
    assert isinstance(info.value, LeaseLost)
    wait_until(lambda: lost == [s], 2.0, "on_lost to be called")
    with pytest.raises(LeaseLost):
        lease.release()


def test_a_fair_wait_in_a_session(client: Client, name: str) -> None:
    holder = client.acquire(name, ttl=10.0)
    with client.session(ttl=5.0) as s:
        got: List[Any] = []
        t = threading.Thread(target=lambda: got.append(s.lock(name, fair=True, wait=10.0)))
        t.start()
        wait_until(lambda: client.state(name)["waiters"] == 1, 5.0, "the session's ticket")
        holder.release()
        t.join(10.0)
        assert got and got[0].session is s and s.leases == got
    assert client.state(name)["held"] is False
