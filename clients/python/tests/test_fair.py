"""The fair queue: tickets polled until granted, and deleted when giving up."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List

import pytest

import baton._client as impl
from baton import Client, Lease, LockHeld
from conftest import Proxy, wait_until


def waiters(client: Client, name: str) -> int:
    return int(client.state(name)["waiters"])


def test_fair_waiters_are_granted_in_order(client: Client, name: str) -> None:
    holder = client.acquire(name, ttl=10.0)
    order: List[str] = []
    leases: Dict[str, Lease] = {}
    errors: List[BaseException] = []

    def wait_turn(who: str) -> None:
        try:
            with client.lock(name, ttl=5.0, wait=10.0, fair=True, owner=who) as lease:
                order.append(who)
                leases[who] = lease
                time.sleep(0.1)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = []
    for i, who in enumerate(["first", "second", "third"]):
        t = threading.Thread(target=wait_turn, args=(who,))
        t.start()
        threads.append(t)
        wait_until(lambda: waiters(client, name) == i + 1, 5.0, "%s to queue" % who)
    holder.release()
    for t in threads:
        t.join(15.0)
    assert not errors
    assert order == ["first", "second", "third"]
    fences = [leases[w].fence for w in order]
    assert fences == sorted(fences) and fences[0] > holder.fence
    assert client.state(name)["held"] is False


def test_giving_up_deletes_the_ticket(via_proxy: Client, proxy: Proxy, name: str) -> None:
    holder = via_proxy.acquire(name, ttl=10.0)
    started = time.monotonic()
    with pytest.raises(LockHeld) as info:
        via_proxy.acquire(name, wait=0.5, fair=True)
    assert 0.45 < time.monotonic() - started < 8.0  # its own wait, not the 10 s hold
    assert info.value.lock == name and "queue" in str(info.value)
    # Gone at once, not after ticket_ttl_ms: the queue does not wait for a ghost.
    assert waiters(via_proxy, name) == 0
    holder.release()
    assert via_proxy.state(name)["held"] is False


def test_a_long_poll_cut_by_a_proxy_timeout_is_polled_again(
    via_proxy: Client, proxy: Proxy, name: str
) -> None:
    holder = via_proxy.acquire(name, ttl=10.0)
    tickets = "/v1/locks/%s/tickets/" % name
    proxy.timeout(ms=300, path=tickets, n=2)  # like nginx's proxy_read_timeout, but short
    got: List[Any] = []
    t = threading.Thread(target=lambda: got.append(via_proxy.acquire(name, wait=10.0, fair=True)))
    t.start()
    # Two polls answered 504, then shorter polls that the proxy lets through.
    wait_until(lambda: proxy.count(tickets) >= 4, 5.0, "the ticket to be polled again")
    assert waiters(via_proxy, name) == 1
    holder.release()
    t.join(10.0)
    [lease] = got
    assert isinstance(lease, Lease) and lease.fence > holder.fence
    assert via_proxy.state(name)["fence"] == lease.fence
    lease.release()


def test_polls_shrink_below_a_proxys_timeout(
    via_proxy: Client, proxy: Proxy, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG", logger="baton")
    holder = via_proxy.acquire(name, ttl=10.0)
    tickets = "/v1/locks/%s/tickets/" % name
    proxy.timeout(ms=300, path=tickets)  # every poll longer than 0.3 s is cut
    with pytest.raises(LockHeld):
        via_proxy.acquire(name, wait=2.0, fair=True)
    cuts = caplog.text.count("a proxy cut a ticket poll")
    assert 1 <= cuts <= 3, caplog.text  # a cut, then polls of 0.24 s (less if one more is cut)
    assert proxy.count(tickets) >= 1 + cuts + 3
    assert waiters(via_proxy, name) == 0
    holder.release()


def test_a_fair_request_granted_at_once(client: Client, name: str) -> None:
    with client.lock(name, fair=True, wait=0) as lease:
        assert client.state(name)["fence"] == lease.fence


def test_an_interrupted_wait_deletes_the_ticket(
    client: Client, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Stop(BaseException):
        """As a KeyboardInterrupt would, between two polls."""

    holder = client.acquire(name, ttl=10.0)
    monkeypatch.setattr(impl, "LONG_POLL", 0.2)
    polls: List[str] = []
    real_call = client._call

    def call(method: str, target: str, *args: Any, **kwargs: Any) -> Any:
        if method == "GET" and "/tickets/" in target:
            polls.append(target)
            if len(polls) == 3:
                assert waiters(client, name) == 1
                raise Stop()
        return real_call(method, target, *args, **kwargs)

    monkeypatch.setattr(client, "_call", call)
    with pytest.raises(Stop):
        client.acquire(name, wait=10.0, fair=True)
    monkeypatch.undo()
    assert waiters(client, name) == 0
    holder.release()
