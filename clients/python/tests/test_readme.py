"""The README's example runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_example_runs(server_url: str, full_key: str) -> None:
    blocks = re.findall(r"<!-- example -->\n```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "no <!-- example --> block in the README"
    env = dict(os.environ, BATON_URL=server_url, BATON_API_KEY=full_key)
    for block in blocks:
        out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 0, out.stderr
        assert "holding it with fence" in out.stdout and "held by" in out.stdout
        assert out.stdout.strip().endswith("True\nFalse")
