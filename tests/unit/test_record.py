"""The typed run record and the results layout: one description of a record, used by the runner, the
results directory and the registry."""

import json
import math

import pytest

from supportbench.experiments.record import (
    Compute,
    DirrResult,
    Outcome,
    Provenance,
    RecordError,
    RunRecord,
    SupportInfo,
    check_levels,
)
from supportbench.experiments.results import ResultsDir
from supportbench.experiments.spec import RunSpec
from supportbench.registry import synthetic
from supportbench.registry.ingest import duckdb_type, record_structure


def _record(**changes) -> RunRecord:
    spec = RunSpec("tofu", "forget10", "npo", "wagle", seed=3, variant="dirr", T=20, t=10, d=2)
    items = dict(run_key=spec.run_key, spec=spec.canonical(), status="ok",
                 outcome=Outcome(J=0.25, G_F=1.0, D_coll=0.75, components={"forget_prob": 0.5}),
                 support=SupportInfo(n_groups=2, cost=20, budget=20, groups=[3, 7]),
                 dirr=DirrResult(decision_hash="h", unfrozen=False, tau=0.1, probe_signal=0.2,
                                 probe_values={"0.0": 1.0, "0.01": 1.2}, triggered=True, chosen_rho=0.01,
                                 selection="evaluation", candidates={"0.0": 1.0, "0.01": 1.5},
                                 candidates_J={"0.0": 1.0, "0.01": 1.5}, rho0_J=1.0, post_hoc=False, complete=False,
                                 calibration=False),
                 compute=Compute(step_equivalents=22.0, wall_s={"train": 1.5}, paths={"committed": 20, "probe": 2}),
                 provenance=Provenance(supportbench="0.1.0", git="abc", torch="2", transformers="4",
                                       started_at="2026-01-01T00:00:00+00:00"))
    items.update(changes)
    return RunRecord(**items)


def test_record_round_trips_through_json():
    rec = _record()
    back = RunRecord.from_json(rec.to_json())
    assert back == rec
    assert isinstance(back.dirr, DirrResult) and back.dirr.candidates == {"0.0": 1.0, "0.01": 1.5}
    assert back.support.groups == [3, 7] and back.compute.paths == {"committed": 20, "probe": 2}


def test_a_diverged_record_keeps_its_non_finite_outcome():
    rec = _record(status="diverged", outcome=Outcome(J=math.nan, G_F=math.inf, D_coll=0.0))
    back = RunRecord.from_json(rec.to_json())
    assert math.isnan(back.outcome.J) and math.inf == back.outcome.G_F


@pytest.mark.parametrize(("edit", "message"), [
    (lambda r: r["compute"].update(step_equivalents="many"),
     r"Expected `float`, got `str` - at `\$.compute.step_equivalents`"),
    (lambda r: r["support"].update(groups=["a"]), r"Expected `int`, got `str` - at `\$.support.groups\[0\]`"),
    (lambda r: r["dirr"].pop("triggered"), r"missing required field `triggered` - at `\$.dirr`"),
    (lambda r: r.update(status="done"), r"unknown status 'done'; allowed: ok, failed, diverged"),
    (lambda r: r["spec"].update(split="test"), r"unknown split 'test'; allowed: calibration, final, replication"),
    (lambda r: r["spec"].update(seed=4), r"does not match its spec"),
    (lambda r: r["outcome"].update(J=None), r"status 'ok' but J not a finite number"),
    (lambda r: r.pop("spec"), r"a record needs a run_key and a spec object"),
])
def test_an_invalid_record_names_the_file_and_the_bad_key(edit, message):
    obj = _record().to_dict()
    edit(obj)
    with pytest.raises(RecordError, match=message) as err:
        RunRecord.from_dict(obj, "runs/x.json")
    assert str(err.value).startswith("runs/x.json: ")


def test_levels_are_checked_in_one_place():
    check_levels("here", variant="static", split="final", status="ok")
    with pytest.raises(RecordError, match="here: unknown variant 'dynamic'; allowed: static, dirr"):
        check_levels("here", variant="dynamic")


def test_the_registry_parse_structure_is_generated_from_the_record():
    tree = json.loads(record_structure())
    # every RunRecord field is read, with types derived from the annotations
    assert set(tree) == set(RunRecord.__struct_fields__)
    assert tree["outcome"] == {"J": "DOUBLE", "G_F": "DOUBLE", "D_coll": "DOUBLE", "components": "JSON"}
    assert tree["support"]["groups"] == ["BIGINT"] and tree["dirr"]["triggered"] == "BOOLEAN"
    assert tree["status"] == "VARCHAR" and tree["fingerprint"]["hash"] == "VARCHAR"
    # the spec's keys come from RunSpec; T and t are read apart (json_transform ignores case)
    assert {"benchmark", "seed", "budget", "rho_p", "hyperparameters"} <= set(tree["spec"])
    assert "T" not in tree["spec"] and "t" not in tree["spec"]
    assert duckdb_type(int | None) == "BIGINT"


def test_results_dir_owns_the_layout(tmp_path):
    res = ResultsDir(tmp_path / "res")
    assert res.record("k") == tmp_path / "res" / "runs" / "k.json"
    assert res.decision("h") == tmp_path / "res" / "decisions" / "h.json"
    assert res.registry == tmp_path / "res" / "registry.duckdb" and res.report == tmp_path / "res" / "report"
    assert not res.is_results_dir() and res.record_files() == []
    rec = _record()
    res.write_record(rec)
    (res.runs / f".{rec.run_key}.json.123.tmp").write_text("{")  # a write in progress is not a record
    assert res.record_files() == [str(res.record(rec.run_key))]
    assert res.read_record(rec.run_key) == rec and list(res.records()) == [rec]
    res.record(rec.run_key).write_text('{"run_key": ')
    with pytest.raises(RecordError, match="not valid JSON"):
        res.read_record(rec.run_key)


def test_synthetic_records_are_valid_records(tmp_path):
    for r in (synthetic.record(), synthetic.record(variant="dirr", candidates={"0.0": 1.0, "0.01": 2.0}),
              synthetic.record(status="failed")):
        assert RunRecord.from_dict(json.loads(json.dumps(r))).to_dict() == r
