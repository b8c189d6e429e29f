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
    subprocess.run(
        pip + ["install", "--no-deps", "--no-build-isolation", str(ROOT / "examples/extra_method")],
        check=True,
        capture_output=True,
    )
    yield
    subprocess.run(
        pip + ["uninstall", "-y", "supportbench-extra-method"], check=True, capture_output=True
    )


@pytest.mark.slow
def test_example_plugin_listed_after_install(installed_example):
    out = subprocess.run(CLI + ["methods"], capture_output=True, text=True, check=True).stdout
    assert "extra_method (plugin)" in out and "length_weighted_norm (plugin)" in out
    assert (
        sum(1 for line in out.splitlines()[1:] if line.strip()) == 13
    )  # 11 built-ins + the two plugins
    # and it scores like any other method
    code = textwrap.dedent("""
        import torch
        from supportbench.methods.base import get_method
        m = get_method("extra_method")
        print(type(m).__module__, m.requires)
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
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
    assert (
        "plugin 'broken_plugin' failed to load and was skipped: ModuleNotFoundError" in res.stderr
    )


def test_hyphenated_and_shadowing_plugins_are_reported_never_fatal(tmp_path):
    write_dist(tmp_path, "my-method", "no_such_module_xyz:Method")
    shadow = tmp_path / "shadow"
    write_dist(shadow, "random", "json:dumps")
    env = {"PYTHONPATH": f"{tmp_path}:{shadow}", "PATH": "/usr/bin:/bin"}
    res = subprocess.run(CLI + ["methods"], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert "intervention_score" in res.stdout and "random " in res.stdout  # built-ins all listed
    assert "broken/shadowed plugins (skipped):" in res.stdout
    assert (
        "my-method: entry-point name 'my-method' is not a "
        "Python identifier (rename it, e.g. 'my_method')" in res.stdout
    )
    assert "random: shadowed: a built-in selection method is named 'random'" in res.stdout
    code = (
        "from supportbench.methods.base import get_method; "
        "print(type(get_method('random')).__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "supportbench.methods.random"  # the built-in still wins


def test_plugin_diagnostic_is_computed_once_for_two_methods(tiny_model, diag_records):
    import dataclasses

    from supportbench.methods.base import METHODS, MethodBase, compute_scores, register_method
    from supportbench.methods.diagnostics import DIAGNOSTICS, Diagnostics, register_diagnostic

    calls = []

    @register_diagnostic("answer_tokens_test")
    def answer_tokens(diag):
        calls.append(1)
        return diag.records.F.n_answer_tokens.double()

    def method(name, power):
        @register_method(name)
        @dataclasses.dataclass
        class M(MethodBase):
            provenance = "test"
            requires = ("grad:F", "answer_tokens_test")

            def score(self, diag, geometry):
                return (
                    geometry.per_group_norm(diag.role_grad("F"))
                    * diag.get("answer_tokens_test").sum() ** power
                )

        return M

    try:
        a, b = method("plug_a_test", 1), method("plug_b_test", 2)
        diag = Diagnostics(tiny_model, diag_records, "npo")
        diag.prepare([*a.requires, *b.requires])
        sa, sb = compute_scores(a(), diag), compute_scores(b(), diag)
        assert len(calls) == 1 and diag.computed["answer_tokens_test"] == 1
        n = float(diag_records.F.n_answer_tokens.sum())
        assert sb.div(sa).sub(n).abs().max() < 1e-6 * n  # both read the same shared value
    finally:
        for n in ("plug_a_test", "plug_b_test"):
            METHODS.unregister(n)
        DIAGNOSTICS.unregister("answer_tokens_test")
