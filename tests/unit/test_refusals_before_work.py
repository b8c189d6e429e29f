"""Bad input fails fast and clearly (exit code 2 or a named error) and nothing is written: every
run, spec and sweep input is checked before any model is built or trained."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from supportbench.cli import main
from supportbench.errors import SpecError
from supportbench.experiments.plan import ExperimentSpec

CLI = [sys.executable, "-m", "supportbench.cli"]


def nothing_written(*dirs: Path) -> bool:
    return all(not d.exists() or not any(d.rglob("*")) for d in dirs)


# ---- validate before any expensive work ----------------------------------------------------------
@pytest.mark.parametrize(
    "args, says",
    [
        (["--method", "wagel"], "Did you mean 'wagle'"),
        (["--benchmark", "tofuu"], "Did you mean 'tofu'"),
        (["--objective", "npoo"], "Did you mean 'npo'"),
        (["--field", "forget11"], "Did you mean 'forget10'"),
        (
            ["--variant", "dirr", "--rho-p", "0.07", "--allow-unfrozen"],
            "'0.07' is not a probe action",
        ),
        (["--budget", "1.5"], "neither a fraction"),
        (["--budget", "nan"], "'nan' is not finite"),
        (["--budget", "inf"], "'inf' is not finite"),
        (["--seed", "-1"], "^supportbench run: error: argument --seed: '-1' is out of range"),
        (["--budget", "10"], "below one group of 'tiny-llama' \\(96 scalars"),
        (["--set", "lr=-1"], re.escape("lr = -1.0: must be a number in (0, 1]")),
        (
            ["--set", "method.nope=1"],
            re.escape("method 'intervention_score' has no option 'nope'; allowed: method.eps"),
        ),
        # an option set without its prefix is pointed at it (review of issue 33)
        (
            ["--benchmark", "lacuna", "--set", "group_dropout=0.5"],
            re.escape("or 'benchmark.group_dropout')"),
        ),
    ],
)
def test_bad_run_input_exits_2_and_writes_nothing(tmp_path, capsys, args, says):
    res, cache = tmp_path / "results", tmp_path / "cache"
    try:
        rc = main(["run", "--results", str(res), "--cache", str(cache), *args])
    except SystemExit as exc:  # refused by argparse itself
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and __import__("re").search(says, err), err
    assert "Traceback" not in err
    assert "usage:" not in err, err  # argparse's 13-line usage block left out (issue 33)
    assert nothing_written(res, cache)


@pytest.mark.parametrize(
    "where", ["env-cache-is-a-file", "env-cache-under-a-file", "runs-not-writable"]
)
def test_where_a_run_writes_is_checked_before_it_trains(tmp_path, capsys, monkeypatch, where):
    """$SUPPORTBENCH_CACHE is checked as --cache is, and the results' runs/ folder itself (issue
    33's second review: both failed after training, with an internal error)."""
    res = tmp_path / "results"
    (tmp_path / "afile").write_text("x")
    if where == "runs-not-writable":
        (res / "runs").mkdir(parents=True)
        if os.geteuid() == 0:
            if subprocess.run(["chattr", "+i", str(res / "runs")], capture_output=True).returncode:
                pytest.skip("chattr +i is not available here")
        else:
            (res / "runs").chmod(0o555)
    else:
        monkeypatch.setenv(
            "SUPPORTBENCH_CACHE", str(tmp_path / "afile" / ("sub" if "under" in where else ""))
        )
    try:
        rc = main(
            ["run", "--benchmark", "tofu", "--method", "random", "--T", "2", "--results", str(res)]
        )
    finally:
        if where == "runs-not-writable" and os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(res / "runs")], check=True)
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and "internal error" not in err, err
    assert (
        ("$SUPPORTBENCH_CACHE" in err) if where.startswith("env") else ("is not writable" in err)
    ), err
    assert not list((res / "runs").glob("*.json")) if (res / "runs").exists() else True


def test_model_folder_without_weights_exits_2_before_training(tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    res, cache = tmp_path / "results", tmp_path / "cache"
    rc = main(["run", "--model", str(folder), "--results", str(res), "--cache", str(cache)])
    err = capsys.readouterr().err
    assert rc == 2 and "has config.json but no weights" in err and str(folder) in err
    assert nothing_written(res, cache)


SPEC = """
[experiment]
name = "x"
benchmarks = ["tofu"]
fields = ["forget10"]
objectives = ["npo"]
methods = ["random"]
dirr_methods = ["intervention_score"]
T = 4
t = 2
d = 1
rho_p = 0.05
[experiment.seeds]
calibration = [1]
final = [2]
"""


@pytest.mark.parametrize(
    "edit, says",
    [
        (
            lambda s: s + "[hyperparamters]\nlr = 0.1\n",
            "unknown section 'hyperparamters' \\(did you mean 'hyperparameters'",
        ),
        (
            lambda s: s + "[dir]\nselection = 'evaluation'\n",
            "unknown section 'dir' \\(did you mean 'dirr'",
        ),
        (
            lambda s: s + "[dirr]\nadmisible_range = [0, 1]\n",
            "'dirr.admisible_range' \\(did you mean 'dirr.admissible_range'",
        ),
        (
            lambda s: s.replace("final = [2]", 'final = ["a"]'),
            "experiment.seeds.final must hold whole numbers, got 'a'",
        ),
        (lambda s: s.replace("rho_p = 0.05", "rho_p = 0.07"), "rho_p 0.07 is not a probe action"),
        (
            lambda s: s + "[dirr]\nselection = 'evaluatoin'\n",
            "dirr.selection 'evaluatoin' is not allowed",
        ),
        (
            lambda s: s.replace("budgt", "x").replace("T = 4", "T = 4\nbudgt = 0.1"),
            "did you mean 'experiment.budget'",
        ),
    ],
)
def test_bad_experiment_specs_are_refused_at_load(tmp_path, edit, says):
    f = tmp_path / "x.toml"
    f.write_text(edit(SPEC))
    with pytest.raises(SpecError, match=says):
        ExperimentSpec.from_toml(f)


@pytest.mark.parametrize(
    "bad, says",
    [
        ('methods = ["random", "wagel"]', "Did you mean 'wagle'"),
        ('dirr_methods = ["intervention_scor"]', "Did you mean 'intervention_score'"),
        ('objectives = ["npoo"]', "Did you mean 'npo'"),
    ],
)
def test_sweep_checks_every_name_before_running(tmp_path, capsys, bad, says):
    key = bad.split(" = ")[0]
    text = "\n".join(bad if line.startswith(key + " ") else line for line in SPEC.splitlines())
    (tmp_path / "x.toml").write_text(text)
    res = tmp_path / "results"
    rc = main(
        [
            "sweep",
            str(tmp_path / "x.toml"),
            "--results",
            str(res),
            "--workers",
            "1",
            "--cache",
            str(tmp_path / "cache"),
        ]
    )
    assert rc == 2 and says in capsys.readouterr().err
    assert nothing_written(res, tmp_path / "cache")
