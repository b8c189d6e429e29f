import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from supportbench._registry import Registry

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "supportbench.cli"]


@pytest.fixture()
def installed_example():
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run(pip + ["install", "--no-deps", "--no-build-isolation", str(ROOT / "examples/extra_method")],
                   check=True, capture_output=True)
    yield
    subprocess.run(pip + ["uninstall", "-y", "supportbench-extra-method"], check=True, capture_output=True)


@pytest.mark.slow
def test_example_plugin_listed_after_install(installed_example):
    out = subprocess.run(CLI + ["methods"], capture_output=True, text=True, check=True).stdout
    assert "extra_method (plugin)" in out
    assert sum(1 for line in out.splitlines()[1:] if line.strip()) == 12  # 11 built-ins + the plugin
    # and it scores like any other method
    code = textwrap.dedent("""
        import torch
        from supportbench.methods.base import get_method
        m = get_method("extra_method")
        print(type(m).__module__, m.requires)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "extra_method ('grad:F',)"


def write_dist(site: Path, name: str, target: str) -> None:
    d = site / f"{name}-0.1.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (d / "entry_points.txt").write_text(f"[supportbench.methods]\n{name} = {target}\n")


def test_broken_plugin_is_reported_and_skipped(tmp_path, monkeypatch):
    write_dist(tmp_path, "broken_plugin", "no_such_module_xyz:Method")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("selection method", entry_point_group="supportbench.methods")
    reg.register("random", type("Random", (), {}))
    names = reg.names()
    assert "random" in names and "broken_plugin" not in names
    assert "ModuleNotFoundError" in reg.broken["broken_plugin"]


def test_cli_lists_methods_despite_broken_plugin(tmp_path):
    write_dist(tmp_path, "broken_plugin", "no_such_module_xyz:Method")
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    res = subprocess.run(CLI + ["methods"], capture_output=True, text=True, env=env)
    assert res.returncode == 0
    assert "intervention_score" in res.stdout
    assert "plugin 'broken_plugin' failed to load and was skipped: ModuleNotFoundError" in res.stderr
