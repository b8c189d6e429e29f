"""Bad values are refused up front: exit 2, one line naming the value and what is allowed, no
traceback, nothing trained and nothing written. One row per bad input."""

import pytest
import torch

from supportbench.cli import main

RUN = ["run", "--benchmark", "tofu", "--method", "random"]
IS = ["run", "--benchmark", "tofu", "--method", "intervention_score"]
LACUNA = ["run", "--benchmark", "lacuna", "--field", "Email_Address"]
CASES = [
    (RUN + ["--threads", "0"], "'0' is out of range; allowed: a whole number in 1..1024"),
    (
        RUN + ["--seed", "100000000000000000000"],
        "out of range; allowed: a whole number in 0..2^63-1",
    ),
    (RUN + ["--seed", "-1"], "out of range; allowed: a whole number in 0..2^63-1"),
    (RUN + ["--T", "9223372036854775807"], "out of range; allowed: a whole number in 1..1,000,000"),
    (RUN + ["--T", "0"], "'0' is out of range"),
    (RUN + ["--budget", "nan"], "'nan' is not finite"),
    (RUN + ["--budget", "-1"], "'-1' is out of range; allowed: a number > 0"),
    (RUN + ["--set", "warmup_steps=50"], "warmup_steps = 50 must be < T = 40"),
    (RUN + ["--set", "lr=abc"], "hyperparameter lr = 'abc': must be a number in (0, 1]"),
    # issue 33: every option's range from its one declaration, before any model loads
    (RUN + ["--set", "lr=1e300"], "hyperparameter lr = 1e+300: must be a number in (0, 1]"),
    # an option that may also be none keeps its range
    # (msgspec takes none with a range only this way)
    (
        RUN + ["--set", "tau=1e300"],
        "hyperparameter tau = 1e+300: must be a number in [-1e+12, 1e+12]",
    ),
    (RUN + ["--set", "tau=nan"], "hyperparameter tau = 'nan': must be a number in [-1e+12, 1e+12]"),
    (
        RUN + ["--set", "objective.beta=-5"],
        "objective.beta = -5: must be a number in (0, 1000] (1/nat)",
    ),
    (RUN + ["--set", "objective.beta=0"], "objective.beta = 0: must be a number in (0, 1000]"),
    (
        RUN + ["--objective", "graddiff", "--set", "objective.beta=1"],
        "objective 'graddiff' has no option 'beta'; allowed: objective.forget_coef (a number > 0), "
        "objective.retain_coef (a number >= 0)",
    ),
    (IS + ["--set", "method.eps=-1"], "method.eps = -1: must be a number in (0, 1]"),
    (IS + ["--set", "method.eps=abc"], "method.eps = 'abc': must be a number in (0, 1]"),
    (
        IS + ["--set", "method.epsilon=1e-6"],
        "method 'intervention_score' has no option 'epsilon' (did you mean 'method.eps'?)",
    ),
    # an option nothing declares is named before any value is judged (options are sorted)
    (
        IS + ["--set", "method.eps=-1", "--set", "method.epsilon=1e-6"],
        "method 'intervention_score' has no option 'epsilon' (did you mean 'method.eps'?)",
    ),
    (
        RUN + ["--set", "objective.beta=0", "--set", "objective.bta=1"],
        "objective 'npo' has no option 'bta' (did you mean 'objective.beta'?)",
    ),
    # ... at any depth: a nested table's undeclared name before a top-level option's bad value
    (
        RUN + ["--set", "benchmark.finetune.epoch=3", "--set", "benchmark.max_new_tokens=0"],
        "no option 'benchmark.finetune.epoch' (did you mean 'benchmark.finetune.epochs'?)",
    ),
    (RUN + ["--set", "benchmark.max_new_tokens=0"], "benchmark.max_new_tokens = 0: must be"),
    (
        ["run", "--benchmark", "tofu", "--method", "fila", "--set", "method.batch_size=2.5"],
        "method.batch_size = 2.5: must be a whole number in 1..4096",
    ),
    (
        RUN + ["--set", "objective.beta=abc"],
        "objective.beta = 'abc': must be a number in (0, 1000]",
    ),
    (
        RUN + ["--set", "benchmark.finetune.epochs=-1"],
        "benchmark.finetune.epochs = -1: must be a whole number in 1..100000",
    ),
    (
        RUN + ["--set", "benchmark.finetune.epochs=abc"],
        "benchmark.finetune.epochs = 'abc': must be a whole number",
    ),
    (
        RUN + ["--set", "benchmark.finetune.epoch=2"],
        "no option 'benchmark.finetune.epoch' (did you mean 'benchmark.finetune.epochs'?)",
    ),
    (
        RUN + ["--set", "benchmark.max_new_tokens=many"],
        "benchmark.max_new_tokens = 'many': must be a whole number",
    ),
    (
        RUN + ["--set", "benchmark.size=huge"],
        "benchmark.size = 'huge': must be one of 'mini', 'full'",
    ),
    (
        RUN + ["--set", "benchmark.chat_template=maybe"],
        "benchmark.chat_template = 'maybe': must be one of 'auto', 'on', 'off'",
    ),
    (
        RUN + ["--set", "benchmark.seed=1"],
        "benchmark.seed is not a benchmark option: the construction's seed is the "
        "run's theta_0 build",
    ),
    (
        LACUNA + ["--set", "benchmark.mask_mode=neuron"],
        "benchmark.mask_mode = 'neuron': must be one of 'element', 'component'",
    ),
    (
        LACUNA + ["--set", "benchmark.group_dropout=1.5"],
        "benchmark.group_dropout = 1.5: must be a number in [0, 1)",
    ),
    # names before theta_0 is built (it takes minutes for the controlled separation)
    (["run", "--benchmark", "controlled", "--objective", "nosuch"], "no objective 'nosuch'"),
    # found by the independent review of issue 33: refused before work, not inside the run
    (
        [
            "run",
            "--benchmark",
            "controlled",
            "--method",
            "backbone",
            "--set",
            "benchmark.n_targets=3",
        ],
        "n_targets must be a positive even number, got 3",
    ),
    (
        ["run", "--benchmark", "controlled", "--set", "benchmark.n_targets=3"],
        "n_targets must be a positive even number, got 3",
    ),
    (
        RUN + ["--set", "eval_full=true", "--retain-model", "/etc"],
        "'/etc' is not a Hugging Face model directory",
    ),
    # the option's range before the fields it makes
    # (0 read as "no field t00"; 10^8 ran out of memory)
    *[
        (
            [
                "run",
                "--benchmark",
                "controlled",
                "--method",
                "backbone",
                "--set",
                f"benchmark.n_targets={v}",
            ],
            f"benchmark.n_targets = {v}: must be a whole number in 2..1000",
        )
        for v in (0, -2, 100000000)
    ],
    (RUN + ["--rho-p", "-1"], "argument --rho-p: '-1' is not a probe action"),  # a static run too
    (RUN + ["--t", "999"], "DIR-R checkpoint t must satisfy 0 < t < T=40, got 999"),
    # the controlled decision owns these: a user's value
    # would be replaced without a word (found by review)
    (
        ["run", "--benchmark", "controlled", "--set", "benchmark.primary_locator=nope"],
        "--set benchmark.primary_locator=nope: the primary "
        "locator is the one with the best calibration AUROC",
    ),
    (
        ["run", "--benchmark", "controlled", "--set", "lr=0.5"],
        "--set lr=0.5: each interface's lr is chosen",
    ),
    (["sweep", "mini-paper", "--workers", "-1"], "'-1' is out of range"),
    (["sweep", "mini-paper", "--step-seconds", "nan"], "'nan' is not finite"),
    (
        ["sweep", "mini-paper", "--slurm", "partition=cpu"],
        "--slurm partition=cpu is a Slurm parameter, but the executor is 'local'",
    ),
    (
        [
            "sweep",
            "mini-paper",
            "--dry-run",
            "--slurm",
            "partition=cpu",
        ],  # the dry run refuses it too
        "--slurm partition=cpu is a Slurm parameter, but the executor is 'local'",
    ),
    (
        ["plan-memory", "--model", "tiny-llama", "--budget", "0"],
        "'0' is out of range; allowed: a number > 0",
    ),
    (["plan-memory", "--model", "tiny-llama", "--budget", "1e30"], "--budget 1e+30 = "),
    (
        ["plan-memory", "--model", "tiny-llama", "--budget", "1.5"],
        "--budget 1.5 is neither a fraction (0 < b < 1) nor a whole number of scalars",
    ),
    (["plan-memory", "--model", "tiny-llama", "--budget", "3"], "allowed: at least one group"),
    (
        ["plan-memory", "--model", "tiny-llama", "--budget", "64", "--batch", "0"],
        "'0' is out of range",
    ),
    (
        ["plan-memory", "--model", "tiny-llama", "--budget", "64", "--gpu-gib", "nan"],
        "'nan' is not finite",
    ),
    (
        [
            "plan-memory",
            "--model",
            "meta-llama/Llama-3-8B",
            "--budget",
            "1e6",
        ],  # a hub id the (offline) Hugging Face cache lacks: named, with the architectures
        "plan-memory also takes a known architecture, which needs no files (llama3-8b",
    ),
    (
        RUN + ["--results", "/proc/supportbench/res"],
        "--results '/proc/supportbench/res': '/proc' is not writable",
    ),
    # issue 33: a value nested past the depth any file may have (was a RecursionError, an
    # internal error), the curve's flag with its range, a misspelt method by its own error
    (RUN + ["--set", "lr=" + "[" * 60_000 + "]" * 60_000], "lr=...: the value is nested more"),
    (
        RUN + ["--set", "objective.beta=" + "[" * 200 + "1" + "]" * 200],
        "nested more than 100 levels deep",
    ),
    (RUN + ["--eval-every", "-1"], "allowed: a whole number of steps in [0, 1000000000]"),
    (
        ["run", "--benchmark", "tofu", "--method", "intervention_scor"],
        "no selection method 'intervention_scor'. Did you mean 'intervention_score'?",
    ),
]
import shutil  # noqa: E402

if shutil.which("sbatch") is None:
    CASES.append(
        (
            ["sweep", "mini-paper", "--executor", "slurm"],
            "no Slurm on this machine (sbatch is not on PATH)",
        )
    )
CASES.append(
    (
        ["sweep", "mini-paper", "--executor", "slurm", "--slurm", "partition"],
        "--slurm expects KEY=VALUE, got 'partition'",
    )
)
if not torch.cuda.is_available():
    CASES.append((RUN + ["--device", "cuda", "--T", "2"], "this machine has no CUDA GPU"))


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(c[0][-2:]) for c in CASES])
def test_bad_value_is_refused_up_front(tmp_path, capsys, argv, message):
    if argv[0] in ("run", "sweep") and "--results" not in argv:
        argv = [*argv, "--results", str(tmp_path / "res")]
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own refusal
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2, err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "res").exists()  # nothing written


def test_a_dry_run_checks_method_names_without_torch(tmp_path):
    _dry_run_says(
        tmp_path,
        '[experiment]\nname = "x"\nbenchmarks = ["tofu"]\nfields = ["forget01"]\n'
        'objectives = ["npo"]\nmethods = ["intervention_score", "wagel"]\n'
        "[experiment.seeds]\ncalibration = [1]\nfinal = [2]\n",
        2,
        "no selection method 'wagel'. Did you mean 'wagle'?",
    )


@pytest.mark.parametrize(
    ("make", "flag", "message"),
    [
        (lambda t: (t / "f").write_text("x") and t / "f", "--results", "is a file, not a folder"),
        (lambda t: (t / "f").write_text("x") and t / "f" / "res", "--results", "which is a file"),
        (
            lambda t: (t / "dead").symlink_to(t / "gone") or t / "dead" / "res",
            "--results",
            "lies under '{tmp}/dead', which is a link to no folder",
        ),
        (lambda t: t / ("n" * 300), "--cache", "is longer than 255 bytes"),
    ],
)
def test_a_folder_that_cannot_be_written_is_refused_before_any_work(
    tmp_path, capsys, make, flag, message
):
    target = make(tmp_path)
    rc = main(
        RUN
        + ["--T", "2", flag, str(target)]
        + (["--results", str(tmp_path / "res")] if flag != "--results" else [])
    )
    err = capsys.readouterr().err
    assert rc == 2 and message.format(tmp=tmp_path) in err and "Traceback" not in err
    assert not (tmp_path / "res").exists()


def test_a_read_only_results_folder_is_refused(tmp_path, capsys):
    import os

    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who can write anywhere (root)")
        rc = main(RUN + ["--T", "2", "--results", str(ro / "res")])
        assert rc == 2 and "is not writable" in capsys.readouterr().err
    finally:
        ro.chmod(0o700)


def test_the_light_interface_names_equal_the_registered_benchmarks():
    """The dry run reads each benchmark's INTERFACES from source; it must agree with the imported
    classes."""
    from supportbench import catalog
    from supportbench.benchmarks.base import BENCHMARKS

    light = {n: e.attrs["INTERFACES"] for n, e in catalog.entries("benchmark").items()}
    assert light == {b: BENCHMARKS.get(b).INTERFACES for b in BENCHMARKS.names()}


@pytest.mark.parametrize(
    ("methods", "rc", "message"),
    [
        ('["backbone", "lora"]', 0, "experiment 'x'"),
        ('["backbone", "intervention_score"]', 2, "no selection method 'intervention_score'"),
        ('["lorra"]', 2, "Did you mean 'lora'?"),
    ],
)
def test_a_dry_run_checks_a_benchmarks_own_interfaces(tmp_path, methods, rc, message):
    _dry_run_says(
        tmp_path,
        '[experiment]\nname = "x"\nbenchmarks = ["controlled"]\nfields = ["t00"]\n'
        'objectives = ["npo"]\n'
        f"methods = {methods}\ndirr_methods = []\n[experiment.seeds]\ncalibration = []\n"
        "final = [2]\n",
        rc,
        message,
    )


def _dry_run_in_a_process(spec):
    """``sweep --dry-run spec`` in a fresh interpreter; exit 3 if it imported torch."""
    import subprocess
    import sys

    code = (
        "import sys; from supportbench.cli import main; rc = main(['sweep', "
        "'--dry-run', sys.argv[1]]); sys.exit(3 if 'torch' in sys.modules else rc)"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(spec)], capture_output=True, text=True, timeout=120
    )


def _dry_run_says(tmp_path, text: str, rc: int, message: str) -> None:
    """``text`` as a sweep spec, dry-run in a fresh interpreter: exit ``rc`` and ``message`` in its
    output (exit 3: it imported torch)."""
    spec = tmp_path / "e.toml"
    spec.write_text(text)
    out = _dry_run_in_a_process(spec)
    assert out.returncode == rc, (out.stdout, out.stderr)
    assert message in out.stdout + out.stderr


def test_a_toml_that_is_not_utf8_is_named(tmp_path, capsys):
    spec = tmp_path / "latin1.toml"
    spec.write_bytes(b'[experiment]\nname = "caf\xe9"\n')
    assert main(["sweep", "--dry-run", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "latin1.toml': not UTF-8 (byte 0xe9 at offset 24)" in err and "Traceback" not in err


def _tofu_dir(t, truncate: bool = False, drop: str | None = None):
    """A TOFU folder in the upstream layout (the generator's files); ``truncate`` cuts full.json
    mid-line, ``drop`` removes a file."""
    from supportbench.benchmarks.tofu import generator

    d = t / "tofu"
    generator.generate(d, size="mini", seed=0)
    if truncate:
        text = (d / "full.json").read_text()
        (d / "full.json").write_text(text[: len(text) // 2])
    if drop:
        (d / drop).unlink()
    return d


def _theta0(t):
    """A ready local theta_0 folder (a tiny Llama saved as transformers writes it)."""
    from supportbench.unlearning.models import build_model, save_model, train_tokenizer

    tok = train_tokenizer(["a b c d e f"] * 5, 300)
    return save_model(build_model("tiny-llama", tok, seed=0), tok, t / "theta0")


def _spec(t, body: str):
    p = t / "e.toml"
    p.write_text(body)
    return p


SPEC = (
    '[experiment]\nname = "x"\nbenchmarks = ["tofu"]\nfields = ["forget01"]\nobjectives = ["npo"]\n'
    'methods = ["random"]\n[experiment.seeds]\ncalibration = [1]\nfinal = [2]\n'
)


def _config(t, **sizes) -> str:
    """A model folder whose config.json is a small llama with ``sizes`` changed."""
    import json

    (t / "m").mkdir()
    conf = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 100,
    }
    (t / "m" / "config.json").write_text(json.dumps({**conf, **sizes}))
    return str(t / "m")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda t: RUN + ["--data-dir", str((t / "empty").mkdir() or t / "empty")],
            "TOFU config 'full' not found in",
        ),
        (lambda t: RUN + ["--data-dir", str(_tofu_dir(t, truncate=True))], "full.json line"),
        # a config the data hash covers but this field's run does not read (review D4 of 37)
        (
            lambda t: (
                RUN + ["--field", "forget10", "--data-dir", str(_tofu_dir(t, drop="forget05.json"))]
            ),
            "TOFU config 'forget05' not found in",
        ),
        (
            lambda t: [
                "run",
                "--benchmark",
                "lacuna",
                "--data-dir",
                str((t / "empty").mkdir() or t / "empty"),
            ],
            "LACUNA",
        ),
        (
            lambda t: [
                "run",
                "--benchmark",
                "tofu",
                "--theta0",
                str(_theta0(t)),
                "--set",
                "eval_full=true",
            ],
            "name one with --retain-model PATH",
        ),
        (
            lambda t: ["sweep", str(_spec(t, SPEC + '[hyperparameters]\n"objective.beta" = -1\n'))],
            "objective.beta = -1: must be a number in (0, 1000]",
        ),
        (lambda t: ["sweep", str(_spec(t, 'experiment = "x"\n'))], "is a value, not a table"),
        (
            lambda t: [
                "plan-memory",
                "--budget",
                "0.1",
                "--model",
                str(
                    (t / "m").mkdir()
                    or (t / "m" / "config.json").write_text(
                        '{"model_type": "llama", "hidden_size": "big"}'
                    )
                    and t / "m"
                ),
            ],
            "is not a usable transformers config",
        ),
        # issue 33: sizes transformers accepts but torch cannot build (an internal error before)
        # or builds for minutes (10^5 layers hung plan-memory), and heads that do not divide
        (
            lambda t: [
                "plan-memory",
                "--budget",
                "0.1",
                "--model",
                _config(t, intermediate_size=-5),
            ],
            "intermediate_size = -5 is not allowed; a whole number from 1 to 2,097,152",
        ),
        (
            lambda t: ["plan-memory", "--budget", "0.1", "--model", _config(t, hidden_size=0)],
            "hidden_size = 0 is not allowed",
        ),
        (
            lambda t: [
                "plan-memory",
                "--budget",
                "0.1",
                "--model",
                _config(t, num_hidden_layers=100_000),
            ],
            "num_hidden_layers = 100000 is not allowed; a whole number from 1 to 1,024",
        ),
        (
            lambda t: [
                "plan-memory",
                "--budget",
                "0.1",
                "--model",
                _config(t, num_attention_heads=5),
            ],
            "config.json",
        ),
    ],
    ids=[
        "empty-data-dir",
        "truncated-data-dir",
        "unused-config-missing",
        "lacuna-empty-data-dir",
        "given-theta0-eval-full-no-retain",
        "toml-beta-negative",
        "toml-experiment-not-a-table",
        "plan-memory-bad-config",
        "plan-memory-negative-size",
        "plan-memory-zero-width",
        "plan-memory-100000-layers",
        "plan-memory-heads-do-not-divide",
    ],
)
def test_inputs_are_read_before_any_work(tmp_path, capsys, build, message):
    argv = build(tmp_path)
    if argv[0] in ("run", "sweep"):
        argv = [*argv, "--results", str(tmp_path / "res")]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert message in err and "Traceback" not in err and "internal error" not in err
    assert not (tmp_path / "res").exists()  # nothing written


def test_t_and_d_follow_T_and_are_recorded():
    from supportbench.experiments.spec import RunSpec

    s = RunSpec("tofu", "forget10", "npo", "intervention_score", variant="dirr", T=8)
    assert (s.t, s.d) == (6, 1) and s.canonical()["t"] == 6 and s.canonical()["d"] == 1
    paper = RunSpec(
        "tofu", "forget10", "npo", "intervention_score", variant="dirr", model="local:x"
    )
    assert (paper.T, paper.t, paper.d) == (200, 160, 20)
    assert RunSpec("tofu", "forget10", "npo", "intervention_score", variant="dirr", T=8, t=5).t == 5


@pytest.mark.parametrize(
    ("hp", "rc", "message"),
    [
        ('"objective.beta" = 0.5\n"method.eps" = 1e-6', 0, "experiment 'x'"),
        ('"objective.beta" = -1', 2, "objective.beta = -1: must be a number in (0, 1000]"),
        ('"method.eps" = 5', 2, "method.eps = 5: must be a number in (0, 1]"),
        ('"method.epsilon" = 1e-6', 2, "(did you mean 'method.eps'?)"),
        # issue 33: TOML's own spellings of a dotted name are the same name (were "unknown
        # hyperparameter 'objective'"), and one name given both ways is refused
        ("objective.beta = -1", 2, "objective.beta = -1: must be a number in (0, 1000]"),
        ("[hyperparameters.objective]\nbeta = -1", 2, "objective.beta = -1: must be a number"),
        ("[hyperparameters.method]\neps = 5", 2, "method.eps = 5: must be a number in (0, 1]"),
        ('"objective.beta" = 0.2\nobjective.beta = 0.3', 2, "'objective.beta' is given twice"),
        # an undeclared option is named first, as the run names it
        (
            '"method.eps" = 5\n"method.epsilon" = 1e-6',
            2,
            "method.epsilon is not an option of method 'intervention_score'",
        ),
        # ... the benchmark's options before the objective's, as a run (``harness/resolve``)
        (
            '"objective.bta" = 1\n"benchmark.max_new_tokens" = 0',
            2,
            "benchmark.max_new_tokens = 0: must be a whole number in 1..4096",
        ),
        ("objective.beta = 0.5", 0, "experiment 'x'"),
    ],
)
def test_a_dry_run_range_checks_method_and_objective_options_without_torch(
    tmp_path, hp, rc, message
):
    """The options' declarations are read from source (``catalog.option_problem``), so a sweep
    TOML's out-of-range ``objective.beta`` is refused by the dry run, torch never imported, as
    each of its runs would refuse it."""

    _dry_run_says(
        tmp_path,
        '[experiment]\nname = "x"\nbenchmarks = ["natural_tofu"]\nfields = ["forget01"]\n'
        'objectives = ["npo"]\nmethods = ["intervention_score"]\ndirr_methods = []\n'
        "[experiment.seeds]\ncalibration = []\nfinal = [2]\n"
        f"[hyperparameters]\n{hp}\n",
        rc,
        message,
    )


def test_the_light_benchmark_options_equal_the_constructors():
    """The dry run reads each benchmark's options from source (``catalog``): the same names the
    run's check reads from the constructor (``resolve.check_options``)."""
    from supportbench import catalog
    from supportbench._options import declared
    from supportbench.benchmarks.base import BENCHMARKS
    from supportbench.harness.resolve import SHARED_KEYWORDS

    for name in BENCHMARKS.names():
        real = {k for k in declared(BENCHMARKS.get(name)) if k not in SHARED_KEYWORDS}
        assert set(catalog.declared_options("benchmark", name)) == real, name


@pytest.mark.parametrize(
    ("hp", "rc", "message"),
    [
        ('"benchmark.group_dropout" = 1.5', 2, "benchmark.group_dropout = 1.5: must be a number"),
        ('"benchmark.group_dropout" = "abc"', 2, "benchmark.group_dropout = 'abc': must be"),
        ("benchmark.nosuch = 3", 2, "benchmark.nosuch is not an option of benchmark 'lacuna'"),
        ('"benchmark.finetune.epochs" = 3\n"benchmark.people" = 30', 0, "experiment 'x'"),
    ],
)
def test_a_dry_run_checks_benchmark_options_without_torch(tmp_path, hp, rc, message):
    """``benchmark.*`` too (review of issue 33: the dry run printed a plan the sweep refuses)."""
    _dry_run_says(
        tmp_path,
        '[experiment]\nname = "x"\nbenchmarks = ["lacuna"]\nfields = ["Email_Address"]\n'
        'objectives = ["npo"]\nmethods = ["random"]\ndirr_methods = []\n'
        "[experiment.seeds]\ncalibration = []\nfinal = [2]\n"
        f"[hyperparameters]\n{hp}\n",
        rc,
        message,
    )


def test_a_benchmarks_own_hyperparameters_read_toml_tables_as_dotted_names(tmp_path):
    """``[experiment.benchmark.<name>.hyperparameters.objective]`` is ``objective.<x>`` for that
    benchmark, as under ``[hyperparameters]`` (issue 33): its range is checked by the dry run."""
    _dry_run_says(
        tmp_path,
        '[experiment]\nname = "x"\nbenchmarks = ["natural_tofu"]\nfields = ["forget01"]\n'
        'objectives = ["npo"]\nmethods = ["intervention_score"]\ndirr_methods = []\n'
        "[experiment.seeds]\ncalibration = []\nfinal = [2]\n"
        "[experiment.benchmark.natural_tofu.hyperparameters.objective]\nbeta = -1\n",
        2,
        "objective.beta = -1: must be a number in (0, 1000]",
    )


def test_a_dry_run_checks_objective_options_against_the_replication_objectives(tmp_path):
    """``replication_objectives`` run too: an ``objective.beta`` that GradDiff does not declare is
    refused even when only the replication split runs GradDiff (review: only ``objectives``)."""
    _dry_run_says(
        tmp_path,
        '[experiment]\nname = "x"\nbenchmarks = ["lacuna"]\nfields = ["Email_Address"]\n'
        'objectives = ["npo"]\nmethods = ["random"]\ndirr_methods = []\n'
        "[experiment.seeds]\ncalibration = []\nfinal = [2]\n"
        '[experiment.benchmark.lacuna]\nreplication_objectives = ["graddiff"]\n'
        "[experiment.benchmark.lacuna.seeds]\nreplication = [3]\n"
        '[hyperparameters]\n"objective.beta" = 0.2\n',
        2,
        "objective.beta is not an option of objective 'graddiff'",
    )
