"""Taking, holding and releasing locks: exclusive, shared and counted."""

from __future__ import annotations

import threading
import time

import pytest

from baton import BatonError, Client, LeaseLost, LimitMismatch, LockHeld


def test_acquire_and_release(client: Client, name: str) -> None:
    lease = client.acquire(name, ttl=10.0, owner="worker-1")
    assert isinstance(lease.fence, int) and lease.fence > 0
    assert lease.name == name and lease.count == 1 and not lease.shared and lease.owner == "worker-1"
    assert lease.url == client.url + lease.path and lease.lease in lease.path
    assert not lease.lost and not lease.released and not lease.auto_renew
    state = client.state(name)
    assert state["held"] and state["owner"] == "worker-1" and state["fence"] == lease.fence
    lease.release()
    assert lease.released and not lease.lost
    assert client.state(name)["held"] is False
    lease.release()  # a second release does nothing
    with pytest.raises(LeaseLost):
        lease.renew()


def test_the_fence_is_in_the_users_hands_and_only_grows(client: Client, name: str) -> None:
    fences = []
    for _ in range(3):
        with client.lock(name, ttl=5.0) as lease:
            fences.append(lease.fence)
            assert client.state(name)["fence"] == lease.fence
    assert fences == sorted(fences) and len(set(fences)) == 3


def test_a_held_lock_is_refused_with_who_holds_it(client: Client, name: str) -> None:
    holder = client.acquire(name, ttl=5.0, owner="the-holder")
    started = time.monotonic()
    with pytest.raises(LockHeld) as info:
        client.acquire(name)  # wait=0: at once
    assert time.monotonic() - started < 4.0  # not when the 5 s hold ends
    err = info.value
    assert isinstance(err, BatonError)
    assert err.status == 423 and err.type == "/problems/lock-held"
    assert err.owner == "the-holder"
    assert err.retry_after is not None and 1.0 <= err.retry_after <= 5.0
    assert err.ttl is not None and 0 < err.ttl <= 5.0
    assert err.lock == name and name in str(err)
    holder.release()


def test_waiting_for_a_lock_until_its_release(client: Client, name: str) -> None:
    holder = client.acquire(name, ttl=10.0)
    threading.Timer(0.3, holder.release).start()
    started = time.monotonic()
    lease = client.acquire(name, wait=20.0)
    assert 0.2 < time.monotonic() - started < 10.0  # at the release, not the wait's end
    assert lease.fence > holder.fence
    lease.release()


def test_waiting_runs_out(client: Client, name: str) -> None:
    holder = client.acquire(name, ttl=10.0)
    started = time.monotonic()
    with pytest.raises(LockHeld):
        client.acquire(name, wait=0.4)
    assert 0.35 < time.monotonic() - started < 8.0  # its own wait, not the 10 s hold
    holder.release()


def test_lock_takes_the_lock_only_when_entered(client: Client, name: str) -> None:
    ctx = client.lock(name)
    assert client.state(name)["held"] is False
    with ctx as lease:
        assert client.state(name)["held"] and lease.auto_renew
    assert client.state(name)["held"] is False


class Boom(BaseException):
    """Not an Exception: like KeyboardInterrupt or SystemExit."""


@pytest.mark.parametrize("how", ["normal", "exception", "base-exception", "return", "break"])
def test_leaving_the_block_releases_on_every_path(client: Client, name: str, how: str) -> None:
    seen = []

    def body() -> str:
        for _ in range(2):
            with client.lock(name, ttl=10.0) as lease:
                seen.append(lease)
                if how == "exception":
                    raise ValueError("in the block")
                if how == "base-exception":
                    raise Boom()
                if how == "return":
                    return "returned"
                if how == "break":
                    break
                return "normal"
        return "after the loop"

    if how == "exception":
        with pytest.raises(ValueError):
            body()
    elif how == "base-exception":
        with pytest.raises(Boom):
            body()
    else:
        body()
    assert len(seen) == 1 and seen[0].released
    assert client.state(name)["held"] is False
    assert not seen[0].auto_renew


def test_renew_by_hand(client: Client, name: str) -> None:
    lease = client.acquire(name, ttl=1.0)
    assert lease.renew(ttl=5.0) is lease
    assert client.state(name)["ttl_ms"] > 4000
    assert lease.ttl > 4.0
    lease.release()


def test_a_lease_that_ran_out_is_lost(client: Client, name: str) -> None:
    lease = client.acquire(name, ttl=0.3)
    time.sleep(0.45)
    assert lease.lost and lease.lost_event.is_set()
    assert "ran out" in lease.lost_reason
    with pytest.raises(LeaseLost) as info:
        lease.renew()
    assert name in str(info.value)
    with pytest.raises(LeaseLost):
        lease.release()


def test_leaving_the_block_after_the_lease_ran_out_raises(client: Client, name: str) -> None:
    with pytest.raises(LeaseLost):
        with client.lock(name, ttl=0.3, auto_renew=False):
            time.sleep(0.45)
    # ... unless the block raised: its own exception is the one to see.
    with pytest.raises(KeyError):
        with client.lock(name, ttl=0.3, auto_renew=False) as lease:
            time.sleep(0.45)
            raise KeyError("mine")
    assert lease.lost


def test_shared_holds_coexist_and_exclude_an_exclusive_one(client: Client, name: str) -> None:
    r1 = client.acquire(name, shared=True, owner="reader-1")
    r2 = client.acquire(name, shared=True, owner="reader-2")
    assert r1.shared and r2.shared and r1.lease != r2.lease and r2.fence > r1.fence
    state = client.state(name)
    assert state["mode"] == "shared" and state["holders"] == 2
    assert sorted(h["owner"] for h in state["holds"]) == ["reader-1", "reader-2"]
    with pytest.raises(LockHeld):
        client.acquire(name)
    r1.release()
    r2.release()
    with client.lock(name) as writer:
        assert not writer.shared
        with pytest.raises(LockHeld):
            client.acquire(name, shared=True)


def test_a_semaphore_and_its_limit(client: Client, name: str) -> None:
    a = client.acquire(name, shared=True, limit=2)
    b = client.acquire(name, shared=True, limit=2)
    assert a.limit == 2 and b.limit == 2
    with pytest.raises(LockHeld):
        client.acquire(name, shared=True, limit=2)
    with pytest.raises(LimitMismatch) as info:
        client.acquire(name, shared=True, limit=5)
    err = info.value
    assert err.status == 409 and err.limit == 2 and err.lock == name
    a.release()
    with client.lock(name, shared=True, limit=2, wait=0) as c:
        assert client.state(name)["holders"] == 2 and c.limit == 2
    b.release()
    assert client.state(name)["held"] is False
