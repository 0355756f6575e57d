"""API keys: sent as a Bearer token, refused keys never retried, and the key
never shown: not by repr, not in errors or tracebacks, not in logs."""

from __future__ import annotations

import logging
import os
import traceback

import pytest

from baton import AccessDenied, Client, Forbidden, Unauthorized
from conftest import Proxy

WRONG_KEY = "bk_" + "W" * 43


def test_no_key_is_refused_once_with_the_lock_named(proxy: Proxy, name: str) -> None:
    c = Client(proxy.url)  # BATON_API_KEY is unset in the tests
    with pytest.raises(Unauthorized) as info:
        c.acquire(name, wait=5.0)
    err = info.value
    assert isinstance(err, AccessDenied)
    assert err.status == 401 and err.type == "/problems/unauthorized"
    assert err.lock == name and name in str(err)
    assert proxy.count("/v1/locks/%s" % name) == 1  # no retry loop


def test_a_wrong_key_is_refused_once(proxy: Proxy, name: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="baton")
    c = Client(proxy.url, WRONG_KEY)
    with pytest.raises(Unauthorized) as info:
        with c.lock(name):
            pass
    assert proxy.count("/v1/locks/%s" % name) == 1
    text = "".join(traceback.format_exception(type(info.value), info.value, info.value.__traceback__))
    assert WRONG_KEY not in text and WRONG_KEY not in repr(info.value) and WRONG_KEY not in caplog.text


def test_a_key_outside_its_grants_is_forbidden_once(proxy: Proxy, limited_key: str, reader_key: str) -> None:
    c = Client(proxy.url, limited_key)
    other = "billing:invoices"  # the limited key may lock client:* and cli:* only
    with pytest.raises(Forbidden) as info:
        c.acquire(other, wait=5.0)
    err = info.value
    assert err.status == 403 and err.lock == other and other in str(err)
    assert proxy.count("/v1/locks/" + other) == 1
    with pytest.raises(Forbidden):
        Client(proxy.url, reader_key).acquire("client:read-only")


def test_grants_are_honoured(server_url: str, limited_key: str, reader_key: str, name: str) -> None:
    limited = Client(server_url, limited_key)
    with limited.lock(name) as lease:
        assert limited.state(name)["fence"] == lease.fence
        assert Client(server_url, reader_key).state(name)["held"]
        with pytest.raises(Forbidden):
            limited.force_release(name)  # needs admin
    with limited.session(ttl=5.0) as s:
        s.lock(name)


def test_protected_mode_serves_loopback_without_a_key(name: str) -> None:
    c = Client(os.environ["BATON_TEST_PROTECTED_URL"])
    with c.lock(name) as lease:
        assert lease.fence > 0


def test_the_key_is_never_shown(
    via_proxy: Client, proxy: Proxy, full_key: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="baton")
    c = Client(proxy.url, full_key, retries=2)
    assert full_key not in repr(c) and full_key not in str(c) and "***" in repr(c)
    assert full_key not in repr(vars(c))
    # Retries, a loss and errors all log or raise; none shows the key.
    proxy.status(503, n=1, path="/v1/locks/" + name)
    proxy.cut(n=1, path="/v1/locks/" + name, method="POST")
    lease = c.acquire(name, ttl=0.6, auto_renew=True)
    assert lease.lease not in repr(lease)  # lease ids are bearer secrets too
    c.force_release(name)
    assert lease.lost_event.wait(2.0)
    texts = [repr(lease), caplog.text]
    proxy.down(True)
    for call in (lambda: c.state(name), lease.release):
        try:
            call()
        except Exception as exc:  # Unavailable, LeaseLost
            texts.append("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    proxy.down(False)
    texts.append(caplog.text)
    assert "retry" in caplog.text and "lost" in caplog.text
    for text in texts:
        assert full_key not in text
        assert lease.lease not in text


def test_a_malformed_key_is_refused_without_showing_it() -> None:
    key = "bk_" + "S" * 40 + "\n"
    with pytest.raises(ValueError) as info:
        Client("http://127.0.0.1:9", key)
    assert key.strip() not in str(info.value)
