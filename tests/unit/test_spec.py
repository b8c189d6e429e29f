import dataclasses

import pytest

from supportbench.errors import SpecError
from supportbench.experiments.spec import RunSpec


def test_run_key_is_stable_and_sensitive():
    a = RunSpec("tofu", "forget10", "npo", "random", seed=1, T=200, hyperparameters={"lr": 0.01})
    b = RunSpec.from_dict(a.canonical_full())
    assert a.run_key == b.run_key and len(a.run_key) == 64
    assert a.run_key != a.replace(seed=2).run_key
    assert a.run_key != a.replace(hyperparameters={"lr": 0.02}).run_key
    # checkpoint settings are not part of a static run's identity
    assert a.run_key == a.replace(t=10).run_key
    d = a.replace(variant="dirr")
    assert d.run_key != d.replace(t=100).run_key


@pytest.mark.parametrize(
    "spec",
    [
        RunSpec("tofu", "forget10", "npo", "random"),
        RunSpec(
            "lacuna",
            "Email_Address",
            "simnpo",
            "wagle",
            seed=7,
            variant="dirr",
            split="calibration",
            budget=64,
            model="./models/m",
            hyperparameters={"lr": 0.02, "method.layers": [1, 2], "benchmark.finetune.epochs": 2},
        ),
    ],
)
def test_canonical_full_is_every_field_as_asdict_gave_it(spec):
    """canonical_full builds the dict itself (asdict's deep copy cost a third of the ingest check,
    issue 39): the same keys in the same order, the same values, hyperparameters as a dict."""
    want = {**dataclasses.asdict(spec), "hyperparameters": dict(spec.hyperparameters)}
    got = spec.canonical_full()
    assert list(got.items()) == list(want.items())
    assert RunSpec.from_dict(got) == spec


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"variant": "dynamic"}, "variant 'dynamic' is not allowed; allowed: static, dirr"),
        ({"split": "test"}, "split 'test' is not allowed"),
        ({"T": 0}, "T must be a whole number in 1..1,000,000"),
        ({"T": 2**63 - 1}, "T must be a whole number in 1..1,000,000"),
        ({"seed": 10**20}, "seed must be a whole number in 0..2\\^63-1"),
        ({"budget": 0}, "budget must be > 0"),
        ({"variant": "dirr", "T": 20, "t": 20}, "0 < t < T=20"),
        ({"variant": "dirr", "T": 20, "t": 15, "d": 10}, "d must satisfy"),
        ({"hyperparameters": {"learning_rate": 1}}, "unknown hyperparameter"),
    ],
)
def test_invalid_specs(kw, msg):
    with pytest.raises(SpecError, match=msg):
        RunSpec("tofu", "forget10", "npo", "random", **kw)


def test_unknown_field_in_dict():
    with pytest.raises(SpecError, match="unknown RunSpec field"):
        RunSpec.from_dict(
            {"benchmark": "tofu", "field": "forget10", "objective": "npo", "method": "x", "sed": 1}
        )


def test_benchmark_options_nest_and_conflicts_are_named():
    spec = RunSpec(
        "tofu",
        "forget01",
        "npo",
        "random",
        hyperparameters={"benchmark.finetune.epochs": 2, "benchmark.finetune.lr": 1e-4, "lr": 0.1},
    )
    assert spec.benchmark_options() == {"finetune": {"epochs": 2, "lr": 1e-4}}
    bad = RunSpec(
        "tofu",
        "forget01",
        "npo",
        "random",
        hyperparameters={"benchmark.finetune": 3, "benchmark.finetune.epochs": 2},
    )
    with pytest.raises(
        SpecError, match="'benchmark.finetune.epochs' conflicts with 'benchmark.finetune'"
    ):
        bad.benchmark_options()
    with pytest.raises(SpecError, match=r"allowed: .*benchmark\.<name>"):
        RunSpec("tofu", "forget01", "npo", "random", hyperparameters={"bench.size": "full"})
