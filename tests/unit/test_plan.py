from pathlib import Path

import pytest

from supportbench.errors import SpecError
from supportbench.experiments.plan import ExperimentSpec

BASE = {
    "experiment": {
        "name": "x",
        "benchmarks": ["tofu"],
        "fields": ["forget01", "forget10"],
        "objectives": ["npo"],
        "methods": ["intervention_score", "random", "wagle"],
        "seeds": {"calibration": [1], "final": [2, 3]},
    }
}


def test_grid_and_order():
    s = ExperimentSpec.from_dict(BASE)
    cal, fin = s.runs("calibration"), s.runs("final")
    assert len(cal) == 2 and all(r.variant == "dirr" for r in cal)
    assert len(fin) == 2 * 2 * (3 + 1)
    # runs of one cell are adjacent (they share diagnostics)
    assert [(r.field, r.seed) for r in fin[:4]] == [("forget01", 2)] * 4
    assert len(s.expected_cells()) == len(set(s.expected_cells())) == 18


def test_shipped_mini_paper_spec_parses():
    from importlib import resources

    s = ExperimentSpec.from_toml(
        resources.files("supportbench.experiments").joinpath("mini-paper.toml")
    )
    assert len(s.methods) == 11 and s.objectives == ("npo", "simnpo")


@pytest.mark.parametrize(
    "mutate,msg",
    [
        (
            lambda e: e["seeds"].update(final=[1]),
            r"calibration seeds \[1\] also appear among final",
        ),
        (lambda e: e["seeds"].update(test=[5]), "unknown seed split"),
        (lambda e: e.update(budgett=1), "unknown \\[experiment\\] key"),
        (lambda e: e.pop("fields"), "lacks \\['fields'\\]"),
        (
            lambda e: e["seeds"].update(final=[2, 3, 2]),
            r"experiment.seeds.final lists seed\(s\) \[2\] more than once",
        ),
        (
            lambda e: e.update(benchmark={"tofu": {"seeds": {"final": [1, 4]}}}),
            r"benchmark tofu: calibration seeds \[1\] also appear among its final",
        ),
        (
            lambda e: e.update(benchmark={"tofu": {"hyperparameters": {"tau": 0.1}}}),
            r"benchmark tofu: hyperparameter tau is set, but its DIR-R runs follow the "
            r"tau\* frozen",
        ),
    ],
)
def test_bad_specs(mutate, msg):
    import copy

    raw = copy.deepcopy(BASE)
    mutate(raw["experiment"])
    with pytest.raises(SpecError, match=msg):
        ExperimentSpec.from_dict(raw)


def test_shipped_spec_by_name_and_unknown_name(tmp_path, monkeypatch):
    from supportbench.experiments.plan import resolve_spec_path, shipped_specs

    assert "mini-paper" in shipped_specs()
    assert ExperimentSpec.from_toml("mini-paper").name == "mini-paper"
    assert resolve_spec_path("mini-paper.toml") == shipped_specs()["mini-paper"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mini-paper.toml").write_text("x")  # a file that exists wins over the shipped name
    assert resolve_spec_path("mini-paper.toml") == Path("mini-paper.toml")
    with pytest.raises(SpecError, match="shipped: .*mini-paper"):
        resolve_spec_path("mini-papre")


def test_a_folder_named_like_a_shipped_spec_or_claims_file_does_not_hide_it(tmp_path, monkeypatch):
    """``supportbench sweep mini-paper`` from a folder that holds a results folder named
    mini-paper/ runs the shipped spec (it read the folder as the spec and failed with EISDIR); the
    claims files resolve by the same rule."""
    from supportbench.experiments import claims
    from supportbench.experiments.plan import resolve_spec_path, shipped_specs

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mini-paper").mkdir()
    (tmp_path / "paper.toml").mkdir()
    assert resolve_spec_path("mini-paper") == shipped_specs()["mini-paper"]
    assert ExperimentSpec.from_toml("mini-paper").name == "mini-paper"
    assert claims.resolve("paper.toml") == claims.SHIPPED / "paper.toml"
    with pytest.raises(SpecError, match="no claims file 'nope': not a file, .*shipped: .*paper"):
        claims.resolve("nope")


def test_per_benchmark_settings_override_the_experiment():
    raw = {
        "experiment": {
            **BASE["experiment"],
            "benchmarks": ["tofu", "lacuna"],
            "T": 40,
            "t": 32,
            "d": 4,
            "seeds": {"calibration": [1], "final": [2]},
            "benchmark": {
                "lacuna": {
                    "fields": ["Email_Address"],
                    "objectives": ["graddiff"],
                    "model": "tiny-olmo3",
                    "T": 20,
                    "t": 16,
                    "d": 2,
                    "replication_fields": ["Email_Address"],
                    "seeds": {"replication": [9]},
                }
            },
        }
    }
    s = ExperimentSpec.from_dict(raw)
    lac = [r for r in s.all_runs() if r.benchmark == "lacuna"]
    tofu = [r for r in s.all_runs() if r.benchmark == "tofu"]
    assert {(r.field, r.objective, r.model, r.T) for r in lac} == {
        ("Email_Address", "graddiff", "tiny-olmo3", 20)
    }
    assert {r.split for r in lac} == {"calibration", "final", "replication"} and {
        r.seed for r in lac
    } == {1, 2, 9}
    assert {r.T for r in tofu} == {40} and "replication" not in {r.split for r in tofu}
    bad = {"experiment": {**raw["experiment"], "benchmark": {"lacuna": {"feilds": ["x"]}}}}
    with pytest.raises(
        SpecError,
        match="'experiment.benchmark.lacuna.feilds' \\(did you mean "
        "'experiment.benchmark.lacuna.fields'",
    ):
        ExperimentSpec.from_dict(bad)
    with pytest.raises(SpecError, match="names a benchmark the experiment does not run"):
        ExperimentSpec.from_dict(
            {"experiment": {**raw["experiment"], "benchmark": {"controlled": {}}}}
        )


def test_dry_run_counts_and_step_equivalents_without_torch():
    import subprocess
    import sys

    from supportbench.harness.compute import sweep_estimate

    s = ExperimentSpec.from_dict(
        {**BASE, "experiment": {**BASE["experiment"], "T": 10, "t": 8, "d": 1}}
    )
    est = sweep_estimate(s)
    assert est["runs"] == len(s.all_runs())
    ph = est["benchmarks"]["tofu"]["phases"]
    # calibration: 2 fields x 1 objective x 1 seed x 1
    # DIR-R run, every candidate: T + d + (T-t-d) + 3 (T-t)
    assert ph["calibration"]["runs"] == 2 and ph["calibration"]["steps_low"] == 2 * (
        10 + 1 + 1 + 3 * 2
    )
    # final: 2 fields x 2 seeds x (3 static x T + 1 DIR-R between T + d and the triggered path)
    assert ph["final"]["runs"] == 16
    assert (ph["final"]["steps_low"], ph["final"]["steps_high"]) == (4 * (30 + 11), 4 * (30 + 18))
    code = (
        "import sys; from supportbench.cli import main; rc = main(['sweep', "
        "'--dry-run', 'paper']); sys.exit(3 if 'torch' in sys.modules else rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and "726 runs" in out.stdout, out.stderr


def test_a_spec_from_a_pipe_is_read_as_before(tmp_path):
    """``supportbench sweep <(...)``: a named pipe is a spec, not a shipped name (review of the
    folder fix, which first asked for a regular file)."""
    import os
    import threading

    from supportbench.experiments.plan import resolve_spec_path

    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    assert resolve_spec_path(fifo) == fifo
    text = (resolve_spec_path("mini-paper")).read_text()
    # a daemon: were the read to fail before it opens the pipe, the test fails instead of hanging
    writer = threading.Thread(target=lambda: fifo.write_text(text), daemon=True)
    writer.start()
    assert ExperimentSpec.from_toml(fifo).name == "mini-paper"
    writer.join(timeout=30)
    assert not writer.is_alive()
