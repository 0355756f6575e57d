"""Leases and sessions need nothing of a Client but the transport they share
with it: given only a Transport, they renew (by hand and in the background),
notice a loss, and end."""

from __future__ import annotations

import time
from typing import Any, Iterator, List

import pytest

from baton import Client, Lease, LeaseLost, Session
from baton._transport import Endpoint, Secret, Transport, json_doc, lock_path
from conftest import wait_until


@pytest.fixture
def transport(server_url: str, full_key: str) -> Iterator[Transport]:
    t = Transport(Endpoint(server_url), Secret(full_key), timeout=5.0, retries=2, user_agent="baton-python-test")
    yield t
    t.close()


def take(t: Transport, name: str, body: Any) -> Any:
    since = time.monotonic()
    return json_doc(t.call("POST", lock_path(name), body, lock=name)), since


def test_a_lease_given_only_a_transport_renews_is_lost_and_releases(
    transport: Transport, client: Client, name: str
) -> None:
    doc, since = take(transport, name, {"ttl_ms": 900})
    lease = Lease(transport, doc, ttl_ms=900, since=since)
    assert lease.url == client.url + lease.path
    lease.renew(5.0)
    assert 4.0 < lease.ttl <= 5.0
    lease.renew(0.9)
    lease._start_keeper()
    assert lease.auto_renew
    end = time.monotonic() + 2.0  # more than twice the ttl
    while time.monotonic() < end:
        time.sleep(0.1)
    state = client.state(name)
    assert state["held"] and state["fence"] == lease.fence and not lease.lost
    lease.release()
    assert lease.released and not client.state(name)["held"]

    doc, since = take(transport, name, {"ttl_ms": 900})
    lost: List[Lease] = []
    lease = Lease(transport, doc, ttl_ms=900, since=since, on_lost=lost.append)
    lease._start_keeper()
    assert client.force_release(name)
    assert lease.lost_event.wait(5.0), "the loss was not noticed"
    assert "404" in lease.lost_reason
    wait_until(lambda: lost == [lease], 5.0, "on_lost to be called")
    with pytest.raises(LeaseLost):
        lease.release()


def test_a_session_given_only_a_transport_takes_renews_and_closes(
    transport: Transport, client: Client, name: str
) -> None:
    taken: List[Lease] = []

    def acquire(lock: str, *, session: Session, **_: Any) -> Lease:
        doc, since = take(transport, lock, {"session": session.session})
        lease = Lease(transport, doc, ttl_ms=None, since=since, session=session)
        session._adopt(lease)  # as the Client's acquire does
        taken.append(lease)
        return lease

    since = time.monotonic()
    doc = json_doc(transport.call("POST", "/v1/sessions", {"ttl_ms": 900}))
    s = Session(transport, doc, ttl_ms=900, since=since, acquire=acquire)
    s._start_keeper()
    lease = s.lock(name)
    assert taken == [lease] and lease.session is s
    end = time.monotonic() + 2.0  # more than twice the ttl
    while time.monotonic() < end:
        time.sleep(0.1)
    assert client.state(name)["held"] and not s.lost and not lease.lost
    assert [h["name"] for h in s.holds()] == [name]
    s.renew(5.0)
    assert 4.0 < lease.ttl <= 5.0
    assert s.close() == 1
    assert s.closed and lease.released and not client.state(name)["held"]
