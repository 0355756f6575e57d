"""Auto-renew: the watchdog thread, loss, and its end."""

from __future__ import annotations

import gc
import threading
import time
from typing import List

import pytest

from baton import Client, Lease, LeaseLost
from conftest import Proxy, wait_until


def renew_threads(name: str) -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "baton-renew %r" % name]


def test_auto_renew_keeps_a_short_lease_alive_and_stops_at_release(
    via_proxy: Client, proxy: Proxy, name: str
) -> None:
    with via_proxy.lock(name, ttl=0.9) as lease:
        assert lease.auto_renew
        [thread] = renew_threads(name)
        assert thread.daemon
        time.sleep(2.2)  # well past the ttl
        state = via_proxy.state(name)
        assert state["held"] and state["fence"] == lease.fence
        assert not lease.lost
    leases = "/v1/locks/%s/leases/" % name
    renewals = proxy.count(leases)
    assert renewals >= 1 + 4  # at least four renewals at a third of 0.9 s, and the release
    assert not renew_threads(name)
    time.sleep(0.7)  # two renewal periods
    assert proxy.count(leases) == renewals, "a renewal was sent after the release"
    assert via_proxy.state(name)["held"] is False


def test_a_renewal_answered_404_marks_the_hold_lost_at_once(client: Client, name: str) -> None:
    called: List[Lease] = []
    lease = client.acquire(name, ttl=0.9, auto_renew=True, on_lost=called.append)
    assert client.force_release(name)  # as an admin would, with the full key
    assert lease.lost_event.wait(2.0), "the loss was not noticed"
    assert lease.lost and "404" in lease.lost_reason
    wait_until(lambda: called == [lease], 2.0, "on_lost to be called")
    wait_until(lambda: not renew_threads(name), 2.0, "the renewal thread to end")
    with pytest.raises(LeaseLost) as info:
        lease.renew()
    assert info.value.lock == name and name in str(info.value)
    with pytest.raises(LeaseLost):
        lease.release()
    assert called == [lease]  # told once


def test_leaving_the_block_of_a_lost_hold_raises(client: Client, name: str) -> None:
    with pytest.raises(LeaseLost):
        with client.lock(name, ttl=0.6) as lease:
            client.force_release(name)
            assert lease.lost_event.wait(2.0)
    # The block's own exception wins, and the lease still says it was lost.
    with pytest.raises(ZeroDivisionError):
        with client.lock(name, ttl=0.6) as lease:
            client.force_release(name)
            assert lease.lost_event.wait(2.0)
            1 / 0
    assert lease.lost


def test_renewal_never_touches_a_later_hold_of_the_same_lock(
    via_proxy: Client, proxy: Proxy, name: str
) -> None:
    # Lost (Redisson #7272: the old watchdog renewed the new holder's lock) ...
    first = via_proxy.acquire(name, ttl=0.6, auto_renew=True)
    via_proxy.force_release(name)
    assert first.lost_event.wait(2.0)
    sent = proxy.count(first.path)  # the renewal that found it gone
    with via_proxy.lock(name, ttl=0.6) as second:
        time.sleep(1.0)
        assert not second.lost and via_proxy.state(name)["fence"] == second.fence
    assert proxy.count(first.path) == sent
    # ... and released (Redisson #775: a renewal after unlock).
    third = via_proxy.acquire(name, ttl=0.6, auto_renew=True)
    third.release()
    fourth = via_proxy.acquire(name, ttl=0.6)
    sent = proxy.count(third.path)
    time.sleep(0.5)
    assert proxy.count(third.path) == sent
    assert via_proxy.state(name)["fence"] == fourth.fence
    fourth.release()


@pytest.mark.parametrize("kind", ["store-unavailable", "overloaded"])
def test_passing_failures_are_retried_while_the_lease_lasts(
    via_proxy: Client, proxy: Proxy, name: str, kind: str
) -> None:
    with via_proxy.lock(name, ttl=3.0) as lease:
        # 503, 503, 503, an answer lost, then through: five renewal requests.
        proxy.status(503, n=3, path=lease.path, kind=kind)
        proxy.cut(n=1, path=lease.path, method="PATCH")
        wait_until(lambda: proxy.count(lease.path) >= 5, 5.0, "the renewals to get through")
        assert not lease.lost
        assert via_proxy.state(name)["fence"] == lease.fence
        # Connections dropped for longer than a renewal period.
        proxy.down(True)
        time.sleep(1.2)
        proxy.down(False)
        seen = proxy.count(lease.path)
        wait_until(lambda: proxy.count(lease.path) > seen, 3.0, "a renewal after the outage")
        assert not lease.lost
        assert via_proxy.state(name)["fence"] == lease.fence


def test_a_lease_that_runs_out_while_renewals_fail_is_lost(via_proxy: Client, proxy: Proxy, name: str) -> None:
    lease = via_proxy.acquire(name, ttl=0.6, auto_renew=True)
    proxy.down(True)
    started = time.monotonic()
    assert lease.lost_event.wait(10.0)
    assert time.monotonic() - started < 3.0  # at the lease's end (0.6 s), not a request's timeout
    assert "ran out" in lease.lost_reason
    proxy.down(False)
    # The client counts from before the server did: it is never late.
    wait_until(lambda: not via_proxy.state(name)["held"], 1.0, "the server to see it run out")
    with pytest.raises(LeaseLost):
        lease.release()


def test_a_lease_dropped_without_release_stops_being_renewed(client: Client, name: str) -> None:
    lease = client.acquire(name, ttl=0.6, auto_renew=True)
    assert renew_threads(name)
    del lease
    gc.collect()
    wait_until(lambda: not renew_threads(name), 2.0, "the renewal thread to end")
    wait_until(lambda: not client.state(name)["held"], 2.0, "the lease to run out")
