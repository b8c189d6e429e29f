"""A ready fine-tuned theta_0 and a ready retain model (open-unlearning's released tofu_*_full /
*_retain90) are used as they are: nothing is trained again, forget quality is measured against the
given retain model, and both are identified by content."""

import shutil

import pytest

from supportbench.benchmarks import evaluators as ev
from supportbench.benchmarks.base import record_theta0_nll
from supportbench.benchmarks.tofu.adapter import Tofu
from supportbench.cli import main
from supportbench.errors import SpecError
from supportbench.experiments.spec import RunSpec
from supportbench.harness.runner import Runner
from supportbench.unlearning.models import load_model, model_hash, save_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ready(tofu, tmp_path_factory):
    """theta_0 and the forget01 retain model of the session's mini TOFU, saved as a user would have
    them."""
    d = tmp_path_factory.mktemp("ready")
    full = save_model(tofu._prepared.model, tofu._prepared.tokenizer, d / "tofu_tiny_full")
    retain = save_model(
        tofu.retain_model("forget01"), tofu._prepared.tokenizer, d / "tofu_tiny_retain99"
    )
    return full, retain


def test_a_given_theta0_is_used_as_it_is_and_the_given_retain_model_for_forget_quality(
    ready, tofu, tmp_path
):
    full, retain = ready
    b = Tofu(
        cache_dir=tmp_path / "empty-cache", progress=False, theta0="given", retain_model=str(retain)
    )
    prep = b.prepare(str(full))
    assert prep.model_hash == tofu._prepared.model_hash  # not fine-tuned again
    assert not (tmp_path / "empty-cache" / "models").exists()  # nothing trained, nothing cached
    assert model_hash(b.retain_model("forget01")) == model_hash(tofu.retain_model("forget01"))

    roles = b.roles("forget01", 0)
    model = load_model(full)[0]
    record_theta0_nll(model, roles)
    got = b.evaluate(model, roles, full=True).components["forget_quality"]
    split = roles.splits["eval"]["forget"]
    want = ev.forget_quality(
        tofu._truth_ratio(model, split, "paraphrased_answer").tolist(),
        tofu._truth_ratio(tofu.retain_model("forget01"), split, "paraphrased_answer").tolist(),
    )
    assert got == pytest.approx(want, abs=1e-12)


def test_without_a_retain_model_forget_quality_names_the_way_out(ready, tmp_path):
    b = Tofu(cache_dir=tmp_path, progress=False, theta0="given")
    b.prepare(str(ready[0]))
    with pytest.raises(
        SpecError, match=r"--retain-model PATH .*tofu_<model>_retain99 for forget01"
    ):
        b.retain_model("forget01")


def test_a_given_theta0_must_be_a_model_folder(tmp_path):
    with pytest.raises(
        SpecError, match="benchmark.theta0=given needs the model to be a local model folder"
    ):
        Tofu(cache_dir=tmp_path, progress=False, theta0="given").prepare("tiny-llama")


def test_the_cli_runs_from_a_ready_theta0_and_keys_it_by_content(ready, tmp_path, capsys):
    full, retain = ready
    args = [
        "run",
        "--benchmark",
        "tofu",
        "--field",
        "forget01",
        "--method",
        "random",
        "--T",
        "2",
        "--theta0",
        str(full),
        "--retain-model",
        str(retain),
        "--results",
        str(tmp_path / "r"),
        "--cache",
        str(tmp_path / "c"),
    ]
    assert main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    # on by default where a retain model exists (issue 36), printed with their meaning, and J with
    # its direction
    assert "\nforget_quality = " in out and "\nmodel_utility = " in out, out
    assert "higher = better" in out
    rec = next((tmp_path / "r").rglob("*.json"))
    moved = shutil.copytree(retain, tmp_path / "elsewhere" / "retain")
    a = RunSpec(
        "tofu",
        "forget01",
        "npo",
        "random",
        T=2,
        model=str(full),
        hyperparameters={
            "benchmark.theta0": "given",
            "benchmark.retain_model": str(retain),
            "eval_full": True,
        },
    )
    assert a.run_key[:12] in rec.name or a.run_key in rec.read_text()
    assert (
        a.replace(
            hyperparameters={**dict(a.hyperparameters), "benchmark.retain_model": str(moved)}
        ).run_key
        == a.run_key
    )  # moved: same content, same key
    assert (
        main(
            [
                "run",
                "--benchmark",
                "tofu",
                "--theta0",
                str(full),
                "--model",
                "tiny-llama",
                "--results",
                str(tmp_path / "r2"),
            ]
        )
        == 2
    )
    assert "name two models" in capsys.readouterr().err
    assert (
        Runner(tmp_path / "r", cache_dir=tmp_path / "c", progress=False).run(a).skipped
    )  # the CLI's record
