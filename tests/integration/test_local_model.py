"""A local Hugging Face model directory as the base: fine-tuned with the pretrained recipe, cached
by the directory's identity, and run end to end exactly like a preset."""

import pytest

from supportbench.benchmarks.tofu.adapter import Tofu
from supportbench.errors import SpecError, UnknownNameError
from supportbench.experiments.spec import RunSpec
from supportbench.harness.runner import Runner
from supportbench.unlearning.models import (
    build_model,
    load_model,
    model_hash,
    save_model,
    train_tokenizer,
)

pytestmark = pytest.mark.slow


def test_local_model_directory_is_fine_tuned_cached_and_runs(tmp_path):
    cache = tmp_path / "cache"
    opts = {"size": "mini", "cache_dir": cache, "progress": False, "finetune": {"epochs": 2}}
    tofu = Tofu(**opts)
    tok = train_tokenizer(tofu._tokenizer_texts(), 512)
    base_dir = save_model(build_model("tiny-llama", tok, seed=1), tok, tmp_path / "my-base")
    assert (
        tofu.pretrained_finetune_config.lr == 1e-5 and tofu.pretrained_finetune_config.epochs == 2
    )

    prep = tofu.prepare(str(base_dir))
    base, _ = load_model(base_dir)
    assert not prep.from_cache and "-full-my-base-" in prep.path
    assert model_hash(prep.model) != model_hash(base)  # fine-tuned on `full`
    assert (
        len(prep.tokenizer) == len(tok) == prep.model.config.vocab_size
    )  # the directory's own tokenizer

    again = Tofu(**opts).prepare(str(base_dir))
    assert again.from_cache and again.path == prep.path and again.model_hash == prep.model_hash

    save_model(build_model("tiny-llama", tok, seed=2), tok, base_dir)  # new weights, same name
    third = Tofu(**opts).prepare(str(base_dir))
    assert not third.from_cache and third.path != prep.path

    runner = Runner(tmp_path / "results", cache_dir=cache, progress=False)
    spec = RunSpec(
        "tofu",
        "forget01",
        "npo",
        "wagle",
        seed=0,
        T=2,
        budget=0.1,
        model=str(base_dir),
        hyperparameters={"benchmark.finetune.epochs": 2},
    )
    rec = runner.run(spec).record
    assert rec.status == "ok", rec.error
    assert rec.provenance.model_hash == third.model_hash  # the cached theta_0 of the new weights
    assert rec.support.cost <= rec.support.budget
    other = spec.replace(hyperparameters={"benchmark.finetune.epochs": 3})
    assert other.run_key != spec.run_key  # benchmark options are part of the run's identity

    preset = spec.replace(model="tiny-llama")  # same benchmark options, another model
    assert runner.run(preset).record.status == "ok"
    tok_dir, tok_preset = (runner.benchmark(s)._prepared.tokenizer for s in (spec, preset))
    assert len(tok_dir) != len(tok_preset)  # each model is tokenised with its own tokenizer
    assert runner.benchmark(spec).roles("forget01", 0).forget.input_ids.max() < len(tok_dir)


def test_benchmark_options_come_from_the_spec(tmp_path):
    spec = RunSpec(
        "tofu",
        "forget01",
        "npo",
        "random",
        hyperparameters={
            "benchmark.data_dir": str(tmp_path / "nowhere"),
            "benchmark.finetune.epochs": 2,
            "benchmark.size": "mini",
        },
    )
    assert spec.benchmark_options() == {
        "data_dir": str(tmp_path / "nowhere"),
        "finetune": {"epochs": 2},
        "size": "mini",
    }
    # a user's mistake is refused before any work and never recorded as a run
    with pytest.raises(SpecError, match="nowhere' does not exist"):
        Runner(tmp_path / "results", cache_dir=tmp_path / "cache", progress=False).run(spec)
    bad = spec.replace(hyperparameters={"benchmark.colour": "blue"})
    with pytest.raises(
        SpecError,
        match="benchmark 'tofu' has no option 'benchmark.colour'; allowed: benchmark.data_dir",
    ):
        Runner(tmp_path / "results", cache_dir=tmp_path / "cache", progress=False).run(bad)
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache").exists()


def test_unknown_model_is_named(tmp_path):
    tofu = Tofu(size="mini", cache_dir=tmp_path, progress=False)
    with pytest.raises(
        UnknownNameError, match="(?i)directory.*tiny-lama.*did you mean .tiny-llama"
    ):
        tofu.prepare("tiny-lama")
    with pytest.raises(SpecError, match=r"unknown fine-tuning option\(s\) \['epoch'\]"):
        Tofu(size="mini", cache_dir=tmp_path, progress=False, finetune={"epoch": 1})


def test_cli_data_dir_reaches_the_benchmark(tmp_path, capsys):
    from supportbench.cli import main

    rc = main(
        [
            "run",
            "--benchmark",
            "tofu",
            "--field",
            "forget01",
            "--method",
            "random",
            "--T",
            "2",
            "--data-dir",
            str(tmp_path / "no-such-tofu"),
            "--results",
            str(tmp_path / "r"),
            "--cache",
            str(tmp_path / "c"),
        ]
    )
    assert rc == 2  # the user's mistake is refused before any work, not recorded as a failed run
    err = capsys.readouterr().err
    assert f"benchmark.data_dir '{tmp_path / 'no-such-tofu'}' does not exist" in err
    assert not (tmp_path / "r").exists()
