"""The documented way to add a method (README, docs/methods.md): one new file in methods/, nothing
else edited. The file is listed by `supportbench methods` (read from source, with its display name),
runs through `supportbench run`, and the report prints its display name. A copy of the package is
used, so the tree under test is never touched."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import supportbench

pytestmark = pytest.mark.slow

METHOD = textwrap.dedent('''
    """SNIP-like saliency (a test's method)."""
    from dataclasses import dataclass

    import torch

    from supportbench.methods.base import MethodBase, register_method


    @register_method("snip")
    @dataclass
    class Snip(MethodBase):
        display_name = "SNIP"
        provenance = "a test: |g_F| per column"
        requires = ("grad:F",)
        scale: float = 2.0

        def score(self, diag, geometry):
            return self.scale * geometry.per_group_norm(diag.role_grad("F"))
''')


def test_a_new_method_file_is_listed_runs_and_is_reported_by_its_display_name(
    tofu, cache, tmp_path
):
    src = Path(supportbench.__file__).resolve().parent
    shutil.copytree(
        src, tmp_path / "pkg" / "supportbench", ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / "pkg" / "supportbench" / "methods" / "snip.py").write_text(METHOD)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "pkg"), "OMP_NUM_THREADS": "1"}

    def cli(*args):
        out = subprocess.run(
            [sys.executable, "-m", "supportbench.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    listing = cli("methods")
    assert any(line.split()[:1] == ["snip"] for line in listing.splitlines()), listing
    res = tmp_path / "res"
    cli(
        "run",
        "--benchmark",
        "tofu",
        "--field",
        "forget01",
        "--objective",
        "npo",
        "--method",
        "snip",
        "--T",
        "2",
        "--set",
        "method.scale=3",
        "--results",
        str(res),
        "--cache",
        str(cache),
    )
    (record,) = (res / "runs").rglob("*.json")
    rec = json.loads(record.read_text())
    assert rec["status"] == "ok", rec["error"]
    assert rec["spec"]["method"] == "snip" and rec["spec"]["hyperparameters"]["method.scale"] == 3.0
    assert rec["support"]["n_groups"] > 0
    cli("registry", "ingest", str(res), "--registry", str(tmp_path / "r.duckdb"))
    cli("report", "--registry", str(tmp_path / "r.duckdb"), "--out", str(tmp_path / "report"))
    text = (tmp_path / "report" / "report.md").read_text()
    assert "SNIP" in text and "undefined" not in text
