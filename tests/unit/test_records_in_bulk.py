"""An ingest's records checked in bulk (``experiments.record.records_from_json``, issue 39): what it
accepts is exactly what ``RunRecord.from_json`` returns for the text, and what it leaves (None) is
decided by ``from_json``, whose error ingest reports, for the first bad file in the files' order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supportbench._io import loads_json
from supportbench.errors import RegistryError
from supportbench.experiments import record as record_module
from supportbench.experiments.record import RecordError, RunRecord, records_from_json
from supportbench.experiments.results import ResultsDir
from supportbench.experiments.spec import RunSpec, spec_key
from supportbench.registry import synthetic as syn
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect


def _strict(text: bytes):
    """The record the strict parser reads (``loads_json``, then ``from_dict``: ``from_json``'s
    strict path), or the reason it refuses the text."""
    try:
        obj = loads_json(text.decode("utf-8"), nonfinite=True)
    except ValueError as exc:  # not UTF-8, not JSON, a repeated key, nested too deep
        return f"unreadable: {exc}"
    try:
        return RunRecord.from_dict(obj, "runs/x.json")
    except RecordError as exc:
        return str(exc)


def _texts() -> list[bytes]:
    """Valid records in several spellings, and texts each wrong in one way the checks look at."""
    good = [syn.record(seed=s, J=0.1 * s) for s in range(3)]
    dirr = syn.record(variant="dirr", seed=4, candidates={"0.0": 1.0, "0.01": 2.0})
    built = syn.record(seed=5, build=3)
    failed = syn.record(seed=6, status="failed")
    rec = good[0]
    spaced = json.dumps(rec, indent=1).replace('":', '" :')
    dup = json.dumps(rec)[:-1] + ', "status": "ok"}'
    # a colon written escaped, and a repeated key: as many colons in the text as in the parse
    escaped_colon = json.dumps({**rec, "error": "COLON"}).replace("COLON", "\\u003a")
    escaped_colon = escaped_colon[:-1] + ', "status": "ok"}'
    nan = json.dumps({**rec, "outcome": {**rec["outcome"], "J": float("nan")}})
    diverged = json.dumps(
        {**rec, "status": "diverged", "outcome": {**rec["outcome"], "J": float("nan")}}
    )
    texts = (
        [json.dumps(r) for r in (*good, dirr, built, failed)]
        + [
            json.dumps(rec, indent=1, sort_keys=True),
            spaced,
            dup,
            escaped_colon,
            nan,
            diverged,
            json.dumps({**rec, "error": "caf\u00e9 \\ : \u2603"}, ensure_ascii=False),
            json.dumps({**rec, "error": "caf\u00e9"}),  # \u00e9 written escaped: the strict path
            json.dumps({**rec, "run_key": "0" * 64}),
            json.dumps({**rec, "status": "lost"}),
            json.dumps({**rec, "spec": {**rec["spec"], "variant": "other"}}),
            json.dumps({**rec, "spec": {**rec["spec"], "seed": True}}),
            json.dumps({**rec, "spec": {**rec["spec"], "method": ""}}),
            json.dumps({**rec, "outcome": {**rec["outcome"], "J": "high"}}),
            json.dumps({k: v for k, v in rec.items() if k != "compute"}),
            json.dumps({**rec, "outcome": None}),  # ok without an outcome (review of eb11bfc)
            json.dumps({k: v for k, v in rec.items() if k != "outcome"}),
            json.dumps(rec)[:-5],
            "null",
            "[1, 2]",
            '{"a": 1} {"b": 2}',
            "",
            "[" * 150 + "]" * 150,
        ]
    )
    spec = {**rec["spec"], "T": 0}  # a key that matches its spec, a spec that is not resolved
    texts.append(json.dumps({**rec, "spec": spec, "run_key": spec_key(spec)}))
    return [t.encode() for t in texts] + [b'{"run_key": "\xe9"}']


def test_what_the_bulk_check_accepts_is_what_from_json_reads(monkeypatch):
    monkeypatch.setattr(record_module, "_RESOLVED", set())
    texts = _texts()
    for group in (1, 3, 512):  # the group's scans, and each text alone
        monkeypatch.setattr(record_module, "_GROUP", group)
        got = list(records_from_json(texts, [f"runs/{i}.json" for i in range(len(texts))]))
        assert len(got) == len(texts)
        for text, rec in zip(texts, got):
            strict = _strict(text)
            if rec is not None:
                assert isinstance(strict, RunRecord) and rec == strict, text
                assert rec == RunRecord.from_json(text, "runs/x.json")
        accepted = [i for i, rec in enumerate(got) if rec is not None]
        assert accepted[:8] == list(range(8))  # the valid records, in any spelling
        refused = [i for i, t in enumerate(texts) if not isinstance(_strict(t), RunRecord)]
        assert not set(accepted) & set(refused)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["error", "schema", "status", "roles", "run_key"]),
            st.one_of(st.none(), st.integers(0, 3), st.sampled_from([":", '":', "a:b", "\\"])),
        ),
        max_size=3,
    ),
    st.integers(0, 4),
)
def test_a_repeated_key_anywhere_in_a_group_is_never_accepted(extra, where):
    """Keys appended to one record of a group (repeating one, or not): the group is accepted only
    where ``from_json`` accepts each text, as the same record."""
    recs = [json.dumps(syn.record(seed=s)) for s in range(5)]
    tail = "".join(f", {json.dumps(k)}: {json.dumps(v)}" for k, v in extra)
    recs[where] = recs[where][:-1] + tail + "}"
    texts = [r.encode() for r in recs]
    for text, rec in zip(texts, records_from_json(texts, ["r"] * len(texts))):
        strict = _strict(text)
        assert rec is None or (isinstance(strict, RunRecord) and rec == strict)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"build": 7},
        {"hyperparameters": {"tau": 0.5, "lr": 1e-05, "x": [1.5e300, -0.0, "\u00e9"]}},
        {"experiment": "\u00e9t\u00e9", "budget": 1e22},
        {"model": "\x00seed\x00"},  # a marker the cached text is cut at, as a value
        {"model": "\x00build\x00", "build": 2},
    ],
)
def test_the_cached_key_text_gives_spec_key(changes):
    """The text ``spec_key`` hashes, cached per shape, with the seed (and build) written in."""
    spec = {**RunSpec("tofu", "forget10", "npo", "wagle").canonical(), **changes}
    shape = record_module._shape(spec, finite=True)
    for seed in (0, 3, 2**63 - 1):
        other = {**spec, "seed": seed}
        assert record_module._spec_key(other, shape) == spec_key(other)


def _put(res, text: str, name: str) -> None:
    path = ResultsDir(res).runs / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize("first", ["unknown", "truncated"])
def test_ingest_refuses_the_first_bad_file_in_order(tmp_path, first):
    """An unknown method and a truncated record in one chunk: the error is the earlier file's."""
    res = tmp_path / "res"
    for s in range(20):
        rec = syn.record(seed=s)
        _put(res, json.dumps(rec), f"{s:03d}-{rec['run_key']}.json")
    unknown = json.dumps(syn.record(method="no_such_method", seed=99))
    truncated = json.dumps(syn.record(seed=98))[:-3]
    a, b = (unknown, truncated) if first == "unknown" else (truncated, unknown)
    _put(res, a, "005a.json")
    _put(res, b, "012a.json")
    con = connect(tmp_path / "r.duckdb")
    message = "unknown method 'no_such_method'" if first == "unknown" else "truncated or invalid"
    with pytest.raises(RegistryError, match=message) as err:
        ingest(con, res)
    assert "005a.json" in str(err.value)
    assert con.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]


def test_a_lone_surrogate_is_refused_naming_the_file(tmp_path):
    """``json.dumps`` writes a text with a surrogate-escaped byte (a traceback naming a non-UTF-8
    path) as a lone ``\\udcff``: Python reads it, DuckDB's JSON parser does not. Ingest refuses it
    naming the file, before DuckDB sees the chunk, and stores nothing (it raised DuckDB's
    InvalidInputException, naming no file); a surrogate pair (a real character) is stored."""
    res = tmp_path / "res"
    syn.write(res, syn.record(seed=1))
    bad = syn.write(res, {**syn.record(seed=2, status="failed"), "error": "caf\udcff"})
    syn.write(res, {**syn.record(seed=3, status="failed"), "error": "snow \U0001f600"})
    con = connect(tmp_path / "r.duckdb")
    with pytest.raises(RegistryError, match=f"{bad.name}.*lone UTF-16 surrogate"):
        ingest(con, res)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    bad.unlink()
    assert ingest(con, res).new == 2


@given(n=st.integers(0, 300), size=st.integers(1, 80))
def test_chunks_cover_the_files_in_order_with_short_edges(n, size):
    """The reader's chunks: every file once, in order; none longer than ``size``; the first and the
    last a quarter of it (the pipeline's fill and drain), where there are more files than that."""
    from supportbench.registry.ingest import EDGE, _chunks

    files = [f"{i:04d}.json" for i in range(n)]
    got = _chunks(files, size)
    assert [f for c in got for f in c] == files
    assert all(0 < len(c) <= size for c in got)
    edge = max(1, size // EDGE)
    if got:
        assert len(got[0]) <= edge and len(got[-1]) <= edge


def test_names_are_checked_once_per_spec_shape_and_decided_as_each_spec_alone(
    tmp_path, monkeypatch
):
    """An ingest checks a record's names once per spec shape (``NameCheck.check_shape``: specs that
    differ only in seed and build name the same benchmark, method, objective and options): 40
    records in two shapes are checked twice, and what it decides is what checking every spec alone
    decides: an unknown method refused naming the first file that holds it, or with
    --allow-unknown stored and counted at that file."""
    from supportbench.registry.names import NameCheck

    checked, real = [], NameCheck.check
    monkeypatch.setattr(
        NameCheck,
        "check",
        lambda self, cell, where, texts=True: (
            checked.append(where),
            real(self, cell, where, texts),
        )[1],
    )
    res = tmp_path / "res"
    (res / "runs").mkdir(parents=True)
    for seed in range(20):
        for method in ("wagle", "wagel"):  # the second is no method: refused or counted
            rec = syn.record(method=method, seed=seed, build=1 + seed % 2)
            (res / "runs" / f"{rec['run_key']}.json").write_text(json.dumps(rec))
    files = ResultsDir(res).record_files()
    first_bad = next(f for f in files if '"method": "wagel"' in Path(f).read_text())
    with pytest.raises(RegistryError, match="unknown method 'wagel'") as exc:
        ingest(connect(tmp_path / "a.duckdb"), res)
    assert first_bad in str(exc.value)
    checked.clear()
    rep = ingest(connect(tmp_path / "b.duckdb"), res, allow_unknown=True)
    assert rep.new == 40 and len(checked) == 2
    assert first_bad in checked  # the unknown name counted where it first stands
    alone = NameCheck(allow_unknown=True)
    for f in files:
        alone.check(json.loads(Path(f).read_text())["spec"], f, texts=False)
    assert rep.unknown == alone.summary() and first_bad in str(alone.unknown)
