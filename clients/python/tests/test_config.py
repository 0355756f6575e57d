"""Configuration, the wire format, and the packaging promises (stdlib only,
Python 3.9+, typed)."""

from __future__ import annotations

import ast
import glob
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import baton
from baton import Client, InvalidRequest

SRC = Path(baton.__file__).resolve().parent
ROOT = SRC.parent.parent  # clients/python


def test_url_and_key_from_the_environment(monkeypatch: pytest.MonkeyPatch, server_url: str, full_key: str, name: str) -> None:
    monkeypatch.setenv("BATON_URL", server_url)
    monkeypatch.setenv("BATON_API_KEY", full_key)
    c = Client()
    assert c.url == server_url
    with c.lock(name) as lease:
        assert lease.fence > 0
    assert full_key not in repr(c)


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BATON_URL", raising=False)
    monkeypatch.delenv("BATON_API_KEY", raising=False)
    c = Client()
    assert c.url == "http://localhost:8080"
    assert c.timeout == 10.0
    assert repr(c) == "Client(url='http://localhost:8080', api_key=None, timeout=10.0)"


def test_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch, fake) -> None:
    monkeypatch.setenv("BATON_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("BATON_API_KEY", "bk_from_the_environment_0000000000000000000000")
    c = Client(fake.url, "bk_from_the_argument_00000000000000000000000000")
    c.acquire("x")
    assert fake.requests[0].headers["Authorization"] == "Bearer bk_from_the_argument_00000000000000000000000000"


def test_the_wire_format(fake) -> None:
    c = Client(fake.url + "/", "bk_secret_0000000000000000000000000000000000000")
    lease = c.acquire("a/b c:d", ttl=1.5, wait=0.25, shared=True, limit=3, owner="worker-1")
    post = fake.requests[0]
    assert post.method == "POST"
    assert post.path == "/v1/locks/a%2Fb%20c:d"  # one path segment; ":" stays as it is
    assert post.headers["Authorization"] == "Bearer bk_secret_0000000000000000000000000000000000000"
    assert post.headers["Content-Type"] == "application/json"
    assert post.headers["Idempotency-Key"]
    # Float seconds become integer milliseconds.
    assert post.json() == {"ttl_ms": 1500, "wait_ms": 250, "shared": True, "limit": 3, "owner": "worker-1"}
    assert lease.fence == 7
    lease.renew(ttl=0.0004)  # below a millisecond still asks for one, never for "the default"
    assert fake.requests[1].method == "PATCH"
    assert fake.requests[1].json() == {"ttl_ms": 1}
    assert "Idempotency-Key" not in fake.requests[1].headers
    fake.default = (200, {}, {"name": "x", "count": 0, "released": True})
    lease.release()
    assert fake.requests[2].method == "DELETE"
    assert fake.requests[2].path == "/v1/locks/x/leases/L1"


def test_every_post_has_its_own_idempotency_key(fake) -> None:
    c = Client(fake.url)
    c.acquire("x")
    c.acquire("x")
    keys = [r.headers["Idempotency-Key"] for r in fake.requests]
    assert len(set(keys)) == 2
    assert all(1 <= len(k) <= 255 and k.isprintable() for k in keys)


def test_a_url_prefix_is_kept(fake) -> None:
    c = Client(fake.url + "/baton/")
    c.state("x")
    assert fake.requests[0].path == "/baton/v1/locks/x"


def test_one_connection_is_reused(fake) -> None:
    c = Client(fake.url)
    for _ in range(5):
        c.acquire("x")
    assert len(c._pool._idle) == 1


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda c: c.acquire("x", ttl=-1.0), ValueError),
        (lambda c: c.acquire("x", ttl=float("nan")), ValueError),
        (lambda c: c.acquire("x", wait=float("inf")), ValueError),
        (lambda c: c.acquire("x", ttl="30"), TypeError),
        (lambda c: c.acquire("x", limit=2), ValueError),
        (lambda c: c.acquire(""), ValueError),
        (lambda c: Client(timeout=0), ValueError),
        (lambda c: Client(retries=-1), ValueError),
        (lambda c: Client("ftp://example.com"), ValueError),
        (lambda c: Client("http://user:pw@example.com"), ValueError),
    ],
)
def test_bad_arguments_fail_before_any_request(fake, call, error) -> None:
    c = Client(fake.url)
    with pytest.raises(error):
        call(c)
    assert fake.requests == []


def test_ttl_in_seconds_reaches_the_server_as_milliseconds(client: Client, name: str) -> None:
    lease = client.acquire(name, ttl=0.75)
    state = client.state(name)
    assert 500 < state["ttl_ms"] <= 750
    assert 0.5 < lease.ttl <= 0.75
    lease.release()


def test_an_invalid_name_is_a_typed_error(client: Client) -> None:
    with pytest.raises(InvalidRequest) as info:
        client.acquire("client:no spaces allowed")
    assert info.value.status == 400
    assert info.value.type == "/problems/invalid-name"
    assert "client:no spaces allowed" in str(info.value)


def _sources():
    return sorted(SRC.glob("*.py"))


def test_the_package_parses_as_python_3_9() -> None:
    for path in _sources():
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))


def test_the_package_imports_only_the_standard_library() -> None:
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                mods = [node.module or ""]
            else:
                continue
            for mod in mods:
                top = mod.split(".")[0]
                assert top == "__future__" or top in sys.stdlib_module_names, "%s imports %s" % (path.name, mod)


def test_typed_and_packaged() -> None:
    import tomllib

    assert (SRC / "py.typed").exists()
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["requires-python"] == ">=3.9"
    assert meta["project"].get("dependencies", []) == []
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["baton"]


def test_builds_a_wheel_with_py_typed(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    import shutil
    import zipfile

    project = tmp_path / "project"
    shutil.copytree(ROOT, project, ignore=shutil.ignore_patterns("tests", "*.go", "__pycache__", ".*"))
    script = "from setuptools import build_meta as b; print(b.build_wheel(%r))" % str(tmp_path / "dist")
    out = subprocess.run([sys.executable, "-c", script], cwd=project, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    wheel = tmp_path / "dist" / out.stdout.strip().splitlines()[-1]
    names = zipfile.ZipFile(wheel).namelist()
    assert "baton/py.typed" in names and "baton/_client.py" in names
    assert not any(n.startswith("tests/") for n in names)


def _python39():
    candidates = ["python3.9"] + sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9")))
    for exe in candidates:
        try:
            out = subprocess.run(
                [exe, "-c", "import sys; print(sys.version_info[:2] == (3, 9))"],
                capture_output=True, text=True, timeout=20,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.stdout.strip() == "True":
            return exe
    return None


def test_runs_on_python_3_9(server_url: str, full_key: str, name: str) -> None:
    exe = _python39()
    if exe is None:
        pytest.skip("no Python 3.9 interpreter on this machine")
    script = textwrap.dedent(
        """
        import sys
        from baton import Client, LockHeld
        c = Client()
        with c.lock(sys.argv[1], ttl=1.0) as lease:
            try:
                c.acquire(sys.argv[1])
            except LockHeld:
                pass
            with c.session(ttl=1.0) as s:
                s.lock(sys.argv[1] + "-s")
        print("ok", lease.fence > 0)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(SRC.parent), BATON_URL=server_url, BATON_API_KEY=full_key)
    out = subprocess.run([exe, "-c", script, name], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok True"
