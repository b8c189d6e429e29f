"""docs/api.md is true: its python blocks run, in order, in one namespace, in a fresh folder."""

import os
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"

pytestmark = pytest.mark.slow


def test_the_api_docs_run(tmp_path, monkeypatch, cache, tofu):
    # ``tofu``: the docs' default TOFU theta_0, built under the shared cache's lock, or read
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SUPPORTBENCH_CACHE", str(cache))
    namespace: dict = {}
    for i, code in enumerate(blocks):
        # (our own docs)
        exec(compile(code, f"docs/api.md block {i + 1}", "exec"), namespace)  # noqa: S102
    assert os.path.isfile(tmp_path / "results" / "tiny" / "registry.duckdb")


def test_import_supportbench_stays_light():
    import subprocess
    import sys

    code = (
        "import sys, supportbench; assert callable(supportbench.open_registry); "
        "sys.exit(3 if 'torch' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
