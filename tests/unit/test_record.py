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
    items = dict(
        run_key=spec.run_key,
        spec=spec.canonical(),
        status="ok",
        outcome=Outcome(J=0.25, G_F=1.0, D_coll=0.75, components={"forget_prob": 0.5}),
        support=SupportInfo(n_groups=2, cost=20, budget=20, groups=[3, 7]),
        dirr=DirrResult(
            decision_hash="h",
            unfrozen=False,
            tau=0.1,
            probe_signal=0.2,
            probe_values={"0.0": 1.0, "0.01": 1.2},
            triggered=True,
            chosen_rho=0.01,
            selection="evaluation",
            candidates={"0.0": 1.0, "0.01": 1.5},
            candidates_J={"0.0": 1.0, "0.01": 1.5},
            rho0_J=1.0,
            post_hoc=False,
            complete=False,
            calibration=False,
        ),
        compute=Compute(
            step_equivalents=22.0, wall_s={"train": 1.5}, paths={"committed": 20, "probe": 2}
        ),
        provenance=Provenance(
            supportbench="0.1.0",
            git="abc",
            torch="2",
            transformers="4",
            started_at="2026-01-01T00:00:00+00:00",
        ),
    )
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


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda r: r["compute"].update(step_equivalents="many"),
            r"Expected `float`, got `str` - at `\$.compute.step_equivalents`",
        ),
        (
            lambda r: r["support"].update(groups=["a"]),
            r"Expected `int`, got `str` - at `\$.support.groups\[0\]`",
        ),
        (
            lambda r: r["dirr"].pop("triggered"),
            r"missing required field `triggered` - at `\$.dirr`",
        ),
        (
            lambda r: r.update(status="done"),
            r"unknown status 'done'; allowed: ok, failed, diverged",
        ),
        (
            lambda r: r["spec"].update(split="test"),
            r"unknown split 'test'; allowed: calibration, final, replication",
        ),
        (lambda r: r["spec"].update(seed=4), r"does not match its spec"),
        (lambda r: r["outcome"].update(J=None), r"status 'ok' but J not a finite number"),
        (lambda r: r.pop("spec"), r"a record needs a run_key and a spec object"),
    ],
)
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
    assert tree["outcome"] == {
        "J": "DOUBLE",
        "G_F": "DOUBLE",
        "D_coll": "DOUBLE",
        "components": "JSON",
        "curve": [
            {
                "step": "BIGINT",
                "J": "DOUBLE",
                "G_F": "DOUBLE",
                "D_coll": "DOUBLE",
                "components": "JSON",
            }
        ],
    }
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
    assert (
        res.registry == tmp_path / "res" / "registry.duckdb"
        and res.report == tmp_path / "res" / "report"
    )
    assert not res.is_results_dir() and res.record_files() == []
    rec = _record()
    res.write_record(rec)
    (res.runs / f".{rec.run_key}.json.123.tmp").write_text(
        "{"
    )  # a write in progress is not a record
    assert res.record_files() == [str(res.record(rec.run_key))]
    assert res.read_record(rec.run_key) == rec and list(res.records()) == [rec]
    res.record(rec.run_key).write_text('{"run_key": ')
    with pytest.raises(RecordError, match="not valid JSON"):
        res.read_record(rec.run_key)


def test_synthetic_records_are_valid_records(tmp_path):
    for r in (
        synthetic.record(),
        synthetic.record(variant="dirr", candidates={"0.0": 1.0, "0.01": 2.0}),
        synthetic.record(status="failed"),
    ):
        assert RunRecord.from_dict(json.loads(json.dumps(r))).to_dict() == r


# ---- the fast path of from_json (issue 39) and the strict parser it stands in for ----------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from supportbench._io import StrictJSONError, loads_json  # noqa: E402
from supportbench.experiments import record as record_module  # noqa: E402

_KEYS = st.sampled_from(["a", "b", "J", "k:", 'q"', '"":', " ", "é"])
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(['":', '" :', "x", '\\"', "é"]),
)
_PAIRS = st.recursive(
    st.lists(st.tuples(_KEYS, _SCALARS), max_size=4),
    lambda inner: st.lists(st.tuples(_KEYS, st.one_of(_SCALARS, inner)), max_size=4),
    max_leaves=12,
)


def _text(pairs, ascii_only: bool, spaced: bool) -> str:
    """JSON text of an object written pair by pair: a key may repeat, as a hand-edited file's
    may."""
    colon = " : " if spaced else ": "
    out = []
    for k, v in pairs:
        val = (
            _text(v, ascii_only, spaced)
            if isinstance(v, list)
            else json.dumps(v, ensure_ascii=ascii_only)
        )
        out.append(json.dumps(k, ensure_ascii=ascii_only) + colon + val)
    return "{" + ", ".join(out) + "}"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs=_PAIRS, ascii_only=st.booleans(), spaced=st.booleans())
def test_the_fast_parse_reads_only_what_the_strict_parser_reads_the_same(pairs, ascii_only, spaced):
    """Whatever the fast path accepts, ``loads_json`` (duplicate keys refused, NaN kept) reads to
    the equal object; a repeated key at any depth is never accepted by it."""
    text = _text(pairs, ascii_only, spaced)
    fast = record_module._parse_plain(text)
    try:
        strict = loads_json(text, nonfinite=True)
    except StrictJSONError:
        assert fast is None
        return
    if fast is not None:
        assert json.dumps(fast, sort_keys=True) == json.dumps(strict, sort_keys=True)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',
        '{"x": {"a": 1, "a": 2}}',
        '{"x": [{"a": ":", "a": 2}]}',
        '{"a" : 1, "a" : 2}',
        '{"\\u0061": 1, "a": 2}',
        '{"a": "\\":", "a": "\\":"}',
    ],
)
def test_a_repeated_key_always_takes_the_strict_path(text):
    assert record_module._parse_plain(text) is None
    with pytest.raises(StrictJSONError, match="duplicate key"):
        loads_json(text, nonfinite=True)


def test_a_checked_spec_stands_only_for_other_valid_seeds_and_builds(monkeypatch):
    """``_check_resolved`` checks a spec once per shape (all but its seed and build); a spec that
    differs in anything else, or whose seed or build is not valid, is checked in full."""
    full = []
    monkeypatch.setattr(record_module, "_RESOLVED", set())
    real = record_module._check_resolved_in_full
    monkeypatch.setattr(
        record_module, "_check_resolved_in_full", lambda s, src: (full.append(s), real(s, src))
    )
    spec = RunSpec("tofu", "forget10", "npo", "wagle", seed=3).canonical()
    for seed in (3, 4, 2**63 - 1):
        record_module._check_resolved({**spec, "seed": seed}, "r")
    record_module._check_resolved({**spec, "build": 7}, "r")
    record_module._check_resolved({**spec, "build": 9}, "r")
    assert len(full) == 2  # one per shape: without a build, with a non-zero build
    for bad, message in (
        ({**spec, "seed": -1}, "seed must be a whole number in 0..2"),
        ({**spec, "seed": True}, "seed must be a whole number"),
        ({**spec, "build": 0}, "not fully resolved"),
        ({**spec, "build": 2**63}, "build must be a whole number"),
        ({**spec, "T": 0}, "T must be a whole number in 1.."),
        ({**spec, "variant": "dirr"}, "not fully resolved|DIR-R"),
        ({**spec, "hyperparameters": {**spec["hyperparameters"], "lr": -1.0}}, "lr"),
    ):
        with pytest.raises(RecordError, match=message):
            record_module._check_resolved(bad, "r")


def test_a_spec_with_a_non_finite_number_is_never_taken_for_one_with_none(monkeypatch):
    """msgspec writes NaN as null: a NaN spec must not share a cached shape with the None spec."""
    monkeypatch.setattr(record_module, "_RESOLVED", set())
    spec = RunSpec("tofu", "forget10", "npo", "wagle", seed=3).canonical()
    record_module._check_resolved(spec, "r")  # tau None: checked and cached
    assert (
        record_module._shape(
            {**spec, "hyperparameters": {**spec["hyperparameters"], "tau": math.nan}}
        )
        is None
    )
    with pytest.raises(RecordError, match="tau"):
        record_module._check_resolved(
            {**spec, "hyperparameters": {**spec["hyperparameters"], "tau": math.nan}}, "r"
        )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'{"run_key": "\xe9"}', "not UTF-8 text"),
        (b'{"a": NaN}', "a record needs a run_key"),
        (b"[" * 5000 + b"]" * 5000, "nested more than 100 levels"),
        (b'{"a": 1', "not valid JSON"),
    ],
)
def test_what_the_fast_path_leaves_gets_the_strict_paths_message(text, message):
    assert record_module._parse_plain(text) is None
    with pytest.raises(RecordError, match=message):
        RunRecord.from_json(text, "runs/x.json")


@pytest.mark.parametrize(
    "text",
    [
        b'{"a":"x\ty"}',
        b'{"a":01}',
        b'{"a":+1}',
        b'{"a":[1,]}',
        b"{'a':1}",
        b'{"a":1.}',
        b'{"a":.5}',
        b'\xef\xbb\xbf{"a":1}',
        b'{"a":1} ',
        b'{"a":1}x',
        b'{"a":123456789012345678901234567890}',
        b'{"a":-0}',
        b'{"a":1E400}',
        b'{"a":true,"b":null}',
        b'{"a":"\x7f"}',
        b'  {"a":1}\n',
    ],
)
def test_the_fast_parse_agrees_with_the_strict_one_on_json_edge_cases(text):
    """What JSON leaves to the parser (a raw tab, leading zeros, trailing commas, a BOM, huge
    numbers...): the fast path either declines or reads exactly what the strict parser reads."""
    fast = record_module._parse_plain(text)
    try:
        strict = loads_json(text.decode("utf-8"), nonfinite=True)
    except ValueError:
        assert fast is None
        return
    assert fast is None or json.dumps(fast) == json.dumps(strict)
