"""The CLI tells a new user what exists and what each option defaults to, and a DIR-R run without a
threshold names every way out in one error."""

import pytest

from supportbench.cli import build_parser, main


def test_benchmarks_and_objectives_are_listed(capsys):
    assert main(["benchmarks"]) == 0
    out = capsys.readouterr().out
    for name, model, field in (
        ("tofu", "tiny-llama", "forget10"),
        ("lacuna", "tiny-olmo3", "Email_Address"),
        ("controlled", "tiny-qwen2", "t00"),
    ):
        row = next(ln for ln in out.splitlines() if ln.split()[:1] == [name])
        assert model in row and field in row
    assert "backbone, lora" in out
    assert main(["objectives"]) == 0
    out = capsys.readouterr().out
    blocks = {b.split("\n", 1)[0]: b for b in out.split("\n\n")[1:]}  # one block per objective
    assert set(blocks) >= {"npo", "simnpo", "graddiff", "ga"}
    npo = blocks["npo"]
    for line in (
        "forget_coef: a number > 0, default 1.0",
        "retain_coef: a number >= 0, default 1.0",
        "beta: a number in (0, 1000] (1/nat), default 0.1",
    ):
        assert line in npo, (line, npo)


def test_help_shows_defaults_and_the_set_keys():
    text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    flat = " ".join(text.split())
    assert "(default: npo)" in flat and "(default: static)" in flat and "(default: 0)" in flat
    assert "batch_size" in flat and "weight_decay" in flat and "objective.beta=0.2" in flat


def _run_help() -> dict[str, str]:
    """run --help's text per option (its flag -> its help, whitespace folded)."""
    run = build_parser()._subparsers._group_actions[0].choices["run"]
    return {
        a.option_strings[-1]: " ".join((a.help or "").split())
        for a in run._actions
        if a.option_strings
    }


@pytest.mark.parametrize(
    ("flag", "allowed", "bad"),
    [
        ("--seed", "0..2^63-1", "-1"),
        ("--build", "0..2^63-1", "-3"),
        ("--budget", "a fraction in (0, 1)", "0"),
        ("--T", "1..1,000,000", "1000001"),
        ("--t", "0 < t < T", "0"),
        ("--d", "0 < d <= T - t", "0"),
        ("--rho-p", "one of 0.01, 0.025, 0.05, 0.1", "0.3"),
        ("--threads", "1..1024", "100000"),
    ],
)
def test_each_numeric_run_flag_shows_its_range_and_refuses_outside_it(
    capsys, tmp_path, flag, allowed, bad
):
    assert allowed in _run_help()[flag]
    with pytest.raises(SystemExit) as exc:
        main(["run", flag, bad, "--results", str(tmp_path / "r")])
    assert exc.value.code == 2 and f"argument {flag}" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("extra", [[], ["--allow-unfrozen"]])
def test_a_dirr_run_without_a_threshold_names_every_way_out(tmp_path, capsys, extra):
    rc = main(
        [
            "run",
            "--benchmark",
            "tofu",
            "--variant",
            "dirr",
            "--results",
            str(tmp_path / "r"),
            *extra,
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--decision FILE" in err and "--allow-unfrozen --set tau=X" in err
    assert "--split calibration" in err
    assert not (tmp_path / "r").exists()


def test_geometry_takes_a_preset_like_every_other_command(capsys):
    assert main(["geometry", "tiny-llama"]) == 0
    assert "down_proj_columns" in capsys.readouterr().out


def test_methods_are_listed_from_source_without_torch_and_as_the_registry_has_them():
    import subprocess
    import sys

    code = (
        "import sys; from supportbench.cli import main; rc = main(['methods', '--full']); "
        "sys.exit(3 if 'torch' in sys.modules else rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    from supportbench.cli import _requires_of
    from supportbench.methods.base import METHODS

    rows = out.stdout.splitlines()[1:]
    assert len(rows) == len(METHODS.names()) == 11
    for row, name in zip(
        rows, METHODS.names(), strict=True
    ):  # the light reading equals the imported classes
        cls = METHODS.get(name)
        assert row.split()[0] == name
        needs = ", ".join(_requires_of(cls)) or "-"
        assert f"  {needs}  " in row and row.endswith(cls.provenance), row


def test_a_method_file_with_a_syntax_error_is_named_with_its_line(tmp_path):
    """A file dropped into supportbench/methods/ that does not parse: `supportbench methods` exits 2
    with one line naming the file and the line, not an internal error. (Run on a copy of the
    package.)"""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src" / "supportbench"
    shutil.copytree(src, tmp_path / "supportbench", ignore=shutil.ignore_patterns("__pycache__"))
    bad = tmp_path / "supportbench" / "methods" / "mine.py"
    bad.write_text('"""A user\'s method."""\n\ndef broken(:\n    pass\n')
    r = subprocess.run(
        [sys.executable, "-m", "supportbench.cli", "methods"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)},
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{bad}, line 3: syntax error" in lines[0], r.stderr
    assert "internal error" not in r.stderr


@pytest.mark.parametrize(
    "command, options",
    [
        ("report", ("--registry", "--out")),
        ("registry", ("--registry",)),
        ("run", ("--benchmark", "--experiment", "--results")),
    ],
)
def test_path_and_name_options_show_their_defaults(command, options):
    import re

    text = " ".join(
        build_parser()._subparsers._group_actions[0].choices[command].format_help().split()
    )
    for opt in options:
        # "(default: X)", or a "Default:" sentence where
        # the default depends on the subcommand (registry)
        assert re.search(
            re.escape(opt) + r" [A-Z_]+ [^-]*(\(default: [^)]+\)|Default: \S)", text
        ), (opt, text)


@pytest.mark.parametrize(
    "argv, command, unknown",
    [
        (["--bogus"], "supportbench", "--bogus"),
        (["report", "--nope", "x"], "supportbench report", "--nope x"),
        (["registry", "query", "--bogus"], "supportbench registry", "--bogus"),
        (["audit", "--registry", "r.duckdb", "--zzz"], "supportbench audit", "--zzz"),
    ],
)
def test_an_unknown_option_is_refused_by_the_command_it_was_given_to(
    capsys, argv, command, unknown
):
    """argparse names the top-level program for an option no parser knows; the refusal names the
    command the user typed and its --help, and nothing runs."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err == (
        f"{command}: error: unrecognized arguments: {unknown} (see {command} --help)\n"
    )
