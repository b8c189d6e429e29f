"""A run is resolved once (``harness/resolve.py``): ``resolve`` looks each name up and builds each
component one time; validation, the runner and the code fingerprint read what it built; and the
fingerprint is the one a spec had when each of them looked the names up again."""

import dataclasses
import hashlib
import json

import pytest

from supportbench.benchmarks.base import BENCHMARKS
from supportbench.errors import SpecError, UnknownMethodError, UnknownObjectiveError
from supportbench.experiments.identity import source_hash
from supportbench.experiments.spec import RunSpec
from supportbench.harness import resolve as resolve_module
from supportbench.harness.fingerprint import fingerprint
from supportbench.harness.resolve import resolve
from supportbench.harness.validate import validate_spec
from supportbench.methods.base import METHODS, MethodBase, get_method, register_method
from supportbench.unlearning.objectives import OBJECTIVES, get_objective


@pytest.fixture()
def counted():
    """A registered method that counts its constructions."""
    built = []

    @register_method("counted_test")
    @dataclasses.dataclass
    class Counted(MethodBase):
        power: float = 1.0
        provenance = "test-only"
        requires = ("grad:F",)

        def __post_init__(self):
            built.append(self)

        def score(self, diag, geometry):
            return geometry.per_group_norm(diag.role_grad("F")) ** self.power

    yield built
    METHODS.unregister("counted_test")


@pytest.fixture()
def lookups(monkeypatch):
    """How often each registry is asked for a name, whichever module asks."""
    seen = {"benchmark": 0, "method": 0, "objective": 0}
    for what, registry in (
        ("benchmark", BENCHMARKS),
        ("method", METHODS),
        ("objective", OBJECTIVES),
    ):
        original = registry.get

        def counting(name, what=what, original=original):
            seen[what] += 1
            return original(name)

        monkeypatch.setattr(registry, "get", counting)
    return seen


def test_resolve_builds_each_component_once(monkeypatch, counted, lookups):
    objectives_built = []
    monkeypatch.setattr(
        resolve_module,
        "get_objective",
        lambda name, **options: objectives_built.append(name) or get_objective(name, **options),
    )
    spec = RunSpec(
        "tofu", "forget10", "npo", "counted_test", T=2, hyperparameters={"method.power": 2.0}
    )
    resolved = resolve(spec)
    assert len(counted) == 1 and resolved.method is counted[0] and resolved.method.power == 2.0
    assert objectives_built == ["npo"]
    assert lookups["benchmark"] == 1 and lookups["method"] == 1
    after_resolve = dict(lookups)
    # validation and the fingerprint read the resolved run: no name is looked up again, nothing
    # is built again
    validate_spec(resolved)
    fingerprint(resolved)
    fingerprint(resolved)
    assert lookups == after_resolve and len(counted) == 1 and objectives_built == ["npo"]
    # a run's method is its own: resolving again builds another instance
    assert resolve(spec).method is not resolved.method and len(counted) == 2


def test_the_runner_resolves_a_run_once(tmp_path, counted, lookups):
    """A run whose record stands is resolved, validated and fingerprinted: one method instance
    (validation and the fingerprint each built their own before)."""
    from supportbench.experiments.record import Compute, Outcome, Provenance, RunRecord
    from supportbench.experiments.results import ResultsDir
    from supportbench.harness.runner import Runner

    spec = RunSpec("tofu", "forget10", "npo", "counted_test", T=2)
    results = ResultsDir(tmp_path)
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
    counted.clear()
    before = dict(lookups)
    assert Runner(tmp_path, progress=False, device="cpu").run(spec).skipped
    assert len(counted) == 1
    assert lookups["method"] - before["method"] == 1
    assert lookups["benchmark"] - before["benchmark"] == 1


def _hash(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _objective_settings(name: str, **options) -> dict:
    """As the fingerprint always took them: the objective built from its name and options."""
    settings = dataclasses.asdict(get_objective(name, **options))
    return {**settings, "options": list(settings["options"])}


def test_the_fingerprint_of_a_method_run_is_the_one_its_spec_had():
    spec = RunSpec(
        "tofu",
        "forget10",
        "npo",
        "wagle",
        T=2,
        hyperparameters={"objective.beta": 0.2, "method.mu": 1e-5},
    )
    method = get_method("wagle", mu=1e-5)  # what the fingerprint built from the spec's names
    want = {
        "method": {
            "hyperparameters": {"mu": 1e-5},
            "requires": list(method.requires),
            "source": source_hash("methods/wagle.py", "methods/diagnostics.py", "methods/base.py"),
        },
        "objective": {
            "settings": _objective_settings("npo", beta=0.2),
            "source": source_hash("unlearning"),
        },
        "benchmark": {
            "source": source_hash(
                "benchmarks/tofu",
                "benchmarks/base.py",
                "benchmarks/evaluators.py",
                "benchmarks/saved.py",
            )
        },
        "harness": {"source": source_hash("harness/runner.py")},
    }
    assert want["objective"]["settings"]["beta"] == 0.2
    got = fingerprint(resolve(spec))
    assert got.to_dict() == {"hash": _hash(want), **want}


def test_the_fingerprint_of_a_dirr_run_hashes_algorithm_1():
    spec = RunSpec("tofu", "forget10", "simnpo", "intervention_score", variant="dirr", T=4)
    method = get_method("intervention_score")
    want = {
        "method": {
            "hyperparameters": json.loads(json.dumps(method.hyperparameters, default=str)),
            "requires": list(method.requires),
            "source": source_hash(
                "methods/intervention_score.py", "methods/diagnostics.py", "methods/base.py"
            ),
        },
        "objective": {
            "settings": _objective_settings("simnpo"),
            "source": source_hash("unlearning"),
        },
        "benchmark": {
            "source": source_hash(
                "benchmarks/tofu",
                "benchmarks/base.py",
                "benchmarks/evaluators.py",
                "benchmarks/saved.py",
            )
        },
        "harness": {
            "source": source_hash(
                "harness/runner.py",
                "harness/dirr.py",
                "harness/compute.py",
                "experiments/decisions.py",
                "experiments/calibration.py",
            )
        },
    }
    got = fingerprint(resolve(spec))
    assert got.to_dict() == {"hash": _hash(want), **want}


def test_the_fingerprint_of_an_interface_run_names_the_interface():
    spec = RunSpec("controlled", "t00", "graddiff", "lora", model="tiny-qwen2")
    resolved = resolve(spec)
    assert resolved.method is None and resolved.interface
    bench = source_hash(
        "benchmarks/controlled",
        "benchmarks/base.py",
        "benchmarks/evaluators.py",
        "benchmarks/saved.py",
        "experiments/controlled_decision.py",
    )
    want = {
        "method": {"interface": "lora", "source": bench},
        "objective": {
            "settings": _objective_settings("graddiff"),
            "source": source_hash("unlearning"),
        },
        "benchmark": {"source": bench},
        "harness": {"source": source_hash("harness/runner.py")},
    }
    assert fingerprint(resolved).to_dict() == {"hash": _hash(want), **want}


def test_resolve_reports_the_first_mistake_in_validations_order():
    """Benchmark (options, field), then objective, then method: what ``validate_spec`` reported
    first when it looked the names up itself."""
    bad_everything = {"benchmark.nope": 1}
    with pytest.raises(SpecError, match=r"^benchmark 'tofu' has no option 'benchmark\.nope'"):
        resolve(RunSpec("tofu", "forget10", "npx", "wagel", hyperparameters=bad_everything))
    with pytest.raises(UnknownObjectiveError, match=r"^no objective 'npx'\. Did you mean 'npo'\?"):
        resolve(RunSpec("tofu", "forget10", "npx", "wagel"))
    # the method's own error, not wrapped as "rejects its options {}" (issue 33)
    with pytest.raises(
        UnknownMethodError, match=r"^no selection method 'wagel'\. Did you mean 'wagle'\?"
    ):
        resolve(RunSpec("tofu", "forget10", "npo", "wagel"))
    with pytest.raises(SpecError, match=r"runs its interfaces statically; variant 'dirr'"):
        resolve(RunSpec("controlled", "t00", "npo", "lora", variant="dirr", model="tiny-qwen2"))


def test_memory_settings_reach_the_objective_or_are_refused_where_they_cannot_apply():
    """``chunked_loss`` is how the objective computes its NLLs: resolve sets it on the objective
    (and so into the fingerprint's settings); ``column_grads`` switches a support's gradients, which
    a benchmark's own intervention does not have: refused there, not silently ignored."""
    on = resolve(
        RunSpec("tofu", "forget10", "npo", "wagle", hyperparameters={"chunked_loss": True})
    )
    off = resolve(RunSpec("tofu", "forget10", "npo", "wagle"))
    assert on.objective.chunked_loss is True and off.objective.chunked_loss is False
    assert fingerprint(on).hash != fingerprint(off).hash
    with pytest.raises(
        SpecError, match=r"'lora' is one of controlled's own interventions.*column_grads = false"
    ):
        resolve(
            RunSpec(
                "controlled",
                "t00",
                "npo",
                "lora",
                model="tiny-qwen2",
                hyperparameters={"column_grads": True},
            )
        )
