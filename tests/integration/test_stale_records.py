"""A method change can never hide behind an old record: records carry the code's fingerprint, a
rerun with different code recomputes the run, and the audit reports an experiment mixing
fingerprints."""

import dataclasses
import json

import pytest

from supportbench.experiments.results import ResultsDir
from supportbench.experiments.spec import RunSpec
from supportbench.harness.fingerprint import fingerprint
from supportbench.harness.resolve import resolve
from supportbench.harness.runner import Runner
from supportbench.methods.base import METHODS, MethodBase, register_method

pytestmark = pytest.mark.slow


@pytest.fixture()
def scaled_norm():
    @register_method("scaled_norm_test")
    @dataclasses.dataclass
    class ScaledNorm(MethodBase):
        power: float = 1.0
        provenance = "test-only"
        requires = ("grad:F",)

        def score(self, diag, geometry):
            return geometry.per_group_norm(diag.role_grad("F")) ** self.power

    yield ScaledNorm
    METHODS.unregister("scaled_norm_test")


def test_changed_default_reruns_unless_stale_reuse_is_asked(tofu, cache, tmp_path, scaled_norm):
    spec = RunSpec(
        "tofu", "forget10", "npo", "scaled_norm_test", seed=0, T=2, budget=0.1, experiment="fp"
    )
    first = Runner(tmp_path, cache_dir=cache, progress=False).run(spec).record
    assert first.status == "ok" and first.fingerprint.method["hyperparameters"] == {"power": 1.0}
    assert Runner(tmp_path, cache_dir=cache, progress=False).run(spec).skipped  # same code: reused

    scaled_norm.__dataclass_fields__["power"].default = 2.0  # the method's default changes
    scaled_norm.__init__.__defaults__ = (2.0,)
    assert fingerprint(resolve(spec)).hash != first.fingerprint.hash
    kept, skipped = Runner(tmp_path, cache_dir=cache, progress=False, reuse_stale=True).run(spec)
    assert skipped and kept.fingerprint.hash == first.fingerprint.hash
    again, skipped = Runner(tmp_path, cache_dir=cache, progress=False).run(spec)
    assert not skipped
    assert again.fingerprint.method["hyperparameters"] == {"power": 2.0}
    stored = json.loads(ResultsDir(tmp_path).record(spec.run_key).read_text())
    assert stored["fingerprint"]["hash"] == fingerprint(resolve(spec)).hash


def test_failed_record_is_retried(tofu, cache, tmp_path):
    spec = RunSpec("tofu", "forget10", "npo", "random", seed=0, T=2, budget=0.1, experiment="fp")
    path = ResultsDir(tmp_path).record(spec.run_key)
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {
                "run_key": spec.run_key,
                "status": "failed",
                "error": "boom",
                "fingerprint": fingerprint(resolve(spec)).to_dict(),
            }
        )
    )
    rec, skipped = Runner(tmp_path, cache_dir=cache, progress=False).run(spec)
    assert not skipped and rec.status == "ok"


def test_audit_reports_mixed_fingerprints(tofu, cache, tmp_path):
    from supportbench.registry.audit import audit
    from supportbench.registry.ingest import ingest
    from supportbench.registry.store import connect

    runner = Runner(tmp_path, cache_dir=cache, progress=False)
    for seed in (0, 1):
        runner.run(
            RunSpec(
                "tofu", "forget10", "npo", "random", seed=seed, T=2, budget=0.1, experiment="fp"
            )
        )
    con = connect(tmp_path / "r.duckdb")
    ingest(con, tmp_path)
    assert audit(con, "fp").mixed_fingerprints == []
    # an older record (different code) kept with --reuse-stale
    spec = RunSpec("tofu", "forget10", "npo", "random", seed=2, T=2, budget=0.1, experiment="fp")
    rec = runner.run(spec).record.to_dict()
    rec["fingerprint"] = {**rec["fingerprint"], "hash": "0" * 16}
    ResultsDir(tmp_path).record(spec.run_key).write_text(json.dumps(rec))
    ingest(con, tmp_path)
    rep = audit(con, "fp")
    assert [(r["method"], r["fingerprints"]) for r in rep.mixed_fingerprints] == [("random", 2)]
    assert not rep.ok and "mix code fingerprints" in rep.text()


def test_non_finite_outcome_is_diverged_by_construction(tofu, cache, tmp_path, monkeypatch):
    from supportbench.benchmarks.base import Outcome

    def nan_eval(self, model, roles, which="eval", full=False):
        return Outcome(J=float("nan"), G_F=1.0, D_coll=0.0)

    monkeypatch.setattr(type(tofu), "evaluate", nan_eval)
    spec = RunSpec("tofu", "forget10", "npo", "random", seed=5, T=2, budget=0.1, experiment="fp")
    rec = Runner(tmp_path, cache_dir=cache, progress=False).run(spec).record
    assert rec.status == "diverged" and "non-finite outcome" in rec.error, rec.error


def test_corrupt_record_is_named_redone_and_reported(tofu, cache, tmp_path, capsys):
    spec = RunSpec("tofu", "forget10", "npo", "random", seed=6, T=2, budget=0.1, experiment="fp")
    path = ResultsDir(tmp_path).record(spec.run_key)
    path.parent.mkdir(parents=True)
    path.write_text('{"run_key": "trunc')
    runner = Runner(tmp_path, cache_dir=cache, progress=False)
    rec, skipped = runner.run(spec)
    assert rec.status == "ok" and not skipped
    assert str(path) in runner.corrupt and "not valid JSON" in runner.corrupt[str(path)]
    assert f"run record '{path}': not valid JSON" in capsys.readouterr().err
    assert json.loads(path.read_text())["run_key"] == spec.run_key  # the redone run replaced it
