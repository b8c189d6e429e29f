"""Run identity: the record says exactly what ran. Every default is resolved into the spec (one
source for the CLI, Python and TOML), a local model is known by its content, and the code
fingerprint covers the code that trains and evaluates, so changing a default or a training line
reruns the affected cells."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from supportbench.experiments import spec as spec_module
from supportbench.experiments.identity import clear_memo, model_identity
from supportbench.experiments.plan import ExperimentSpec
from supportbench.experiments.spec import RunSpec

SRC = Path(__file__).resolve().parents[2] / "src"


def test_every_setting_is_resolved_into_the_spec():
    spec = RunSpec("tofu", "forget10", "npo", "wagle")
    hp = dict(spec.hyperparameters)
    assert set(hp) == set(spec_module.DEFAULT_HYPERPARAMETERS)
    assert (
        hp["lr"] == 1e-2
        and hp["batch_size"] == 8
        and (spec.T, spec.t, spec.d, spec.rho_p) == (40, 32, 4, 0.05)
    )
    c = spec.canonical()
    # the record stores, and the key hashes, all of them but column_grads = false and chunked_loss =
    # false (the default gradients and loss), a curve's settings when eval_every = 0 (no curve) and
    # the relearning attack's when relearn_steps = 0 (no attack): the key every run had before the
    # settings existed
    assert c["hyperparameters"] == {
        k: v
        for k, v in hp.items()
        if k
        not in (
            "column_grads",
            "chunked_loss",
            "eval_every",
            "curve_items",
            "curve_metrics",
            "relearn_steps",
            "relearn_lr",
            "relearn_batch_size",
        )
    }
    assert c["T"] == 40
    for k in ("column_grads", "chunked_loss"):
        on = RunSpec("tofu", "forget10", "npo", "wagle", hyperparameters={k: True})
        assert on.canonical()["hyperparameters"][k] is True
        assert on.run_key != spec.run_key
    # naming a default explicitly is the same run
    assert (
        RunSpec("tofu", "forget10", "npo", "wagle", T=40, hyperparameters={"lr": 0.01}).run_key
        == spec.run_key
    )


def test_a_local_model_gets_the_papers_settings_not_the_tiny_learning_rate(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    spec = RunSpec("tofu", "forget10", "npo", "wagle", model=str(d))
    assert spec.hp("lr") == 1e-5 and (spec.T, spec.t, spec.d, spec.rho_p) == (200, 160, 20, 0.01)


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.setitem(spec_module.DEFAULT_HYPERPARAMETERS, "batch_size", 4),
        lambda m: m.setitem(spec_module.MODEL_DEFAULTS["preset"], "lr", 5e-2),
        lambda m: m.setitem(spec_module.MODEL_DEFAULTS["preset"], "T", 41),
    ],
)
def test_changing_any_default_changes_the_run_key(monkeypatch, change):
    before = RunSpec("tofu", "forget10", "npo", "wagle").run_key
    change(monkeypatch)
    assert RunSpec("tofu", "forget10", "npo", "wagle").run_key != before


@pytest.mark.parametrize(
    ("benchmark", "field", "method", "model"),
    [
        ("tofu", "forget10", "wagle", "tiny-llama"),
        ("natural_tofu", "forget10", "wagle", "tiny-llama"),
        ("lacuna", "Phone_Number", "wagle", "tiny-olmo3"),
        ("controlled", "t00", "backbone", "tiny-qwen2"),
    ],
)
def test_cli_python_and_toml_name_the_same_default_cell(tmp_path, benchmark, field, method, model):
    from supportbench.benchmarks.base import BENCHMARKS
    from supportbench.cli import build_parser, run_spec

    args = build_parser().parse_args(
        ["run", "--benchmark", benchmark, "--field", field, "--method", method]
    )
    python = RunSpec(benchmark, field, "npo", method)
    assert (
        python.model == model == BENCHMARKS.get(benchmark).DEFAULT_MODEL
    )  # the benchmark's own default
    assert run_spec(args).run_key == python.run_key
    toml = tmp_path / "e.toml"
    toml.write_text(
        textwrap.dedent(f"""
        [experiment]
        name = "adhoc"
        benchmarks = ["{benchmark}"]
        fields = ["{field}"]
        objectives = ["npo"]
        methods = ["{method}"]
        dirr_methods = []
        [experiment.seeds]
        final = [0]
    """)
    )
    (from_toml,) = ExperimentSpec.from_toml(toml).runs("final")
    assert from_toml.run_key == python.run_key


def test_one_number_one_key():
    a = RunSpec(
        "tofu",
        "forget10",
        "npo",
        "wagle",
        budget=64.0,
        hyperparameters={"weight_decay": 0, "lr": 1, "method.eps": 2.0},
    )
    b = RunSpec(
        "tofu",
        "forget10",
        "npo",
        "wagle",
        budget=64,
        hyperparameters={"weight_decay": 0.0, "lr": 1.0, "method.eps": 2},
    )
    assert a.run_key == b.run_key and a.budget == 64 and isinstance(a.budget, int)
    assert isinstance(a.hp("lr"), float) and isinstance(a.hp("method.eps"), int)


def test_replace_resolves_the_defaults_again_under_the_change(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    tiny = RunSpec("tofu", "forget10", "npo", "wagle", T=12, hyperparameters={"batch_size": 4})
    local = tiny.replace(model=str(d))
    # t and d follow the T given (floor(0.8 T), max(1,
    # floor(0.1 T))), not the model default T = 200's 160
    assert (
        local.hp("lr") == 1e-5
        and (local.t, local.d) == (9, 1)
        and local.T == 12
        and local.hp("batch_size") == 4
    )
    assert (
        local.run_key
        == RunSpec(
            "tofu",
            "forget10",
            "npo",
            "wagle",
            T=12,
            model=str(d),
            hyperparameters={"batch_size": 4},
        ).run_key
    )
    assert tiny.replace(benchmark="lacuna", field="Phone_Number").model == "tiny-olmo3"
    assert (
        tiny.replace(hyperparameters={"lr": 0.5}).hyperparameters
        == RunSpec(  # replaced, as a field is
            "tofu", "forget10", "npo", "wagle", T=12, hyperparameters={"lr": 0.5}
        ).hyperparameters
    )


def test_a_benchmark_without_a_default_model_must_name_one():
    with pytest.raises(
        spec_module.SpecError, match=r"benchmark 'nosuch' has no default model .*name the model"
    ):
        RunSpec("nosuch", "f", "npo", "random")
    assert RunSpec("nosuch", "f", "npo", "random", model="tiny-llama").model == "tiny-llama"


def test_a_builtin_benchmark_cannot_declare_another_default_model():
    with pytest.raises(
        spec_module.SpecError,
        match=r"declares DEFAULT_MODEL 'tiny-llama', but its default model is "
        r"'tiny-olmo3'",
    ):
        spec_module.register_default_model("lacuna", "tiny-llama")


def test_a_data_folder_is_known_by_its_content_not_its_path(tmp_path):
    a = tmp_path / "data" / "a"
    a.mkdir(parents=True)
    (a / "forget10.json").write_text('[{"question": "q", "answer": "x"}]')
    b = tmp_path / "moved" / "b"
    shutil.copytree(a, b)

    def key(path):
        return RunSpec(
            "tofu", "forget10", "npo", "wagle", hyperparameters={"benchmark.data_dir": str(path)}
        )

    assert key(a).run_key == key(b).run_key  # moved: same runs
    assert str(tmp_path) not in json.dumps(key(a).canonical())
    assert key(a).canonical()["hyperparameters"]["benchmark.data_dir"].startswith("content:")
    (b / "forget10.json").write_text('[{"question": "q", "answer": "y"}]')  # the data changed
    os.utime(b / "forget10.json", ns=(2, 2))
    clear_memo()
    assert key(b).run_key != key(a).run_key
    with pytest.raises(
        spec_module.SpecError, match=r"benchmark.data_dir '.*nowhere' does not exist"
    ):
        key(tmp_path / "nowhere").canonical()


def _stored(spec: dict) -> str:
    from supportbench.experiments.record import Compute, Outcome, Provenance, RunRecord

    rec = RunRecord(
        run_key=spec_module.spec_key(spec),
        spec=spec,
        status="ok",
        outcome=Outcome(J=1.0, G_F=1.0, D_coll=0.0),
        compute=Compute(),
        provenance=Provenance(
            supportbench="-",
            git="-",
            torch="-",
            transformers="-",
            started_at="2026-01-01T00:00:00+00:00",
        ),
    )
    return rec.to_json()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda c: c["hyperparameters"].pop("batch_size"),
            r"not fully resolved: hyperparameters.batch_size "
            r"\(stored None, resolved 8\)",
        ),
        (
            lambda c: c["hyperparameters"].update(tag="x"),
            r"not a valid RunSpec: unknown hyperparameter 'tag'",
        ),
        (
            lambda c: c["hyperparameters"].update(lr=-1.0),
            r"not a valid RunSpec: hyperparameter lr = -1.0",
        ),
        (lambda c: c.update(T="40"), r"not a valid RunSpec: T must be a whole number, got '40'"),
    ],
)
def test_a_record_whose_spec_is_not_a_resolved_runspec_is_refused(edit, message):
    from supportbench.experiments.record import RecordError, RunRecord

    good = RunSpec("tofu", "forget10", "npo", "wagle").canonical()
    assert RunRecord.from_json(_stored(good)).spec == good
    bad = json.loads(json.dumps(good))
    edit(bad)
    with pytest.raises(RecordError, match=message):
        RunRecord.from_json(_stored(bad))


def test_a_local_model_is_known_by_its_content_not_its_path(tmp_path):
    a = tmp_path / "models" / "a"
    a.mkdir(parents=True)
    (a / "config.json").write_text('{"hidden_size": 8}')
    (a / "model.safetensors").write_bytes(b"\x00" * 64)
    (a / "README.md").write_text("not part of the model")
    b = tmp_path / "elsewhere" / "b"
    shutil.copytree(a, b)
    key = RunSpec("tofu", "forget10", "npo", "wagle", model=str(a)).run_key
    assert (
        RunSpec("tofu", "forget10", "npo", "wagle", model=str(b)).run_key == key
    )  # moved: same runs
    assert model_identity(a) == model_identity(b) and model_identity(a).startswith("local:")
    assert str(a) not in json.dumps(
        RunSpec("tofu", "forget10", "npo", "wagle", model=str(a)).canonical()
    )
    (b / "README.md").write_text("edited")  # not the model
    assert RunSpec("tofu", "forget10", "npo", "wagle", model=str(b)).run_key == key
    (b / "model.safetensors").write_bytes(b"\x01" + b"\x00" * 63)  # a weight changed
    os.utime(b / "model.safetensors", ns=(1, 1))
    clear_memo()
    assert RunSpec("tofu", "forget10", "npo", "wagle", model=str(b)).run_key != key


def _reusable_in(src: Path, results: Path, spec: RunSpec) -> str:
    """Ask a fresh process running the code in ``src`` whether the stored record of ``spec``
    stands."""
    code = textwrap.dedent(f"""
        import supportbench, sys
        assert supportbench.__file__.startswith({str(src)!r}), supportbench.__file__
        from supportbench.experiments.spec import RunSpec
        from supportbench.harness.resolve import resolve
        from supportbench.harness.runner import Runner
        spec = RunSpec.from_dict({spec.canonical_full()!r})
        rec = Runner({str(results)!r}, progress=False, device="cpu").reusable(resolve(spec))
        print("reused" if rec is not None else "stale")
    """)
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("edited", "old", "new"),
    [
        (
            "unlearning/train.py",
            "        loss.backward()\n        self.leaves.collect_grads()",
            "        (1.0 * loss).backward()\n        self.leaves.collect_grads()",
        ),
        (
            "benchmarks/evaluators.py",
            "\nfrom __future__ import annotations\n",
            "\nfrom __future__ import annotations\n_EDITED = True\n",
        ),
        (
            "benchmarks/saved.py",
            "\nfrom __future__ import annotations\n",
            "\nfrom __future__ import annotations\n_EDITED = True\n",
        ),
        (
            "harness/runner.py",
            "def resolve_budget(",
            "def _edited():\n    pass\n\n\ndef resolve_budget(",
        ),
    ],
)
def test_editing_the_code_that_trains_or_evaluates_makes_records_stale(tmp_path, edited, old, new):
    from supportbench.experiments.record import Compute, Outcome, Provenance, RunRecord
    from supportbench.experiments.results import ResultsDir
    from supportbench.harness.fingerprint import fingerprint
    from supportbench.harness.resolve import resolve

    spec = RunSpec("tofu", "forget10", "npo", "wagle", T=2)
    results = ResultsDir(tmp_path / "res")
    results.write_record(
        RunRecord(
            run_key=spec.run_key,
            spec=spec.canonical(),
            status="ok",
            outcome=Outcome(J=1.0, G_F=1.0, D_coll=0.0),
            fingerprint=fingerprint(resolve(spec)),
            compute=Compute(),
            provenance=Provenance(
                supportbench="-",
                git="-",
                torch="-",
                transformers="-",
                started_at="2026-01-01T00:00:00+00:00",
            ),
        )
    )
    copy = tmp_path / "src"
    shutil.copytree(
        SRC / "supportbench", copy / "supportbench", ignore=shutil.ignore_patterns("__pycache__")
    )
    assert _reusable_in(copy, results.root, spec) == "reused"  # same code: the record stands
    f = copy / "supportbench" / edited
    text = f.read_text()
    assert old in text
    f.write_text(text.replace(old, new, 1))
    assert _reusable_in(copy, results.root, spec) == "stale"  # edited code: the cell reruns


def test_a_source_hash_follows_what_the_code_does_not_its_layout(tmp_path):
    """Comments, docstrings and line breaks leave a file's hash (so a record's fingerprint and a
    cached theta_0's key) as it was; a changed constant, name or statement changes it."""
    from supportbench.experiments.identity import source_hash

    base = "def f(x):\n    return x * 2 + 1\n"
    variants = {
        "same": base,
        "comment": "# a comment\ndef f(x):  # trailing\n    return x * 2 + 1\n",
        "docstring": '"""Module."""\ndef f(x):\n'
        '    """Doubles, then adds one."""\n    return x * 2 + 1\n',
        "layout": "def f(\n    x,\n):\n    return (\n        x * 2\n        + 1\n    )\n",
        "constant": "def f(x):\n    return x * 2 + 2\n",
        "name": "def f(y):\n    return y * 2 + 1\n",
        "statement": "def f(x):\n    x = x\n    return x * 2 + 1\n",
        "string": 'def f(x):\n    s = "a"\n    return x * 2 + 1\n',
    }
    hashes = {}
    for name, text in variants.items():
        d = tmp_path / name
        d.mkdir()
        (d / "mod.py").write_text(text)
        hashes[name] = source_hash(d)
    assert hashes["comment"] == hashes["docstring"] == hashes["layout"] == hashes["same"]
    changed = [hashes[k] for k in ("constant", "name", "statement", "string")]
    assert len({hashes["same"], *changed}) == 5
