"""Tamper evidence (docs/registry.md, "Threat model"): a forged decision whose run records were
rewritten to match, an edit of the registry after ingest, a record stripped of its gate -- each is a
row of this table, and the audit must name it. The honest baseline of every row audits clean, so
each row's finding is the forgery's, not the fixture's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from supportbench.experiments.claims import freeze_claims
from supportbench.experiments.claims import load as load_claims
from supportbench.experiments.decisions import decision_hash
from supportbench.experiments.plan import ExperimentSpec
from supportbench.experiments.record import RunRecord
from supportbench.experiments.results import ResultsDir
from supportbench.harness.calibration import calibrate_and_freeze
from supportbench.registry import synthetic as syn
from supportbench.registry.audit import audit
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect

CAL_SEEDS, FINAL_SEEDS = (7, 8, 9, 10), (3, 4)
SPEC = ExperimentSpec.from_dict(
    {
        "experiment": {
            "name": "e",
            "benchmarks": ["tofu"],
            "fields": ["forget10"],
            "objectives": ["npo"],
            "methods": ["intervention_score", "random"],
            "T": 200,
            "t": 160,
            "d": 20,
            "rho_p": 0.01,
            "seeds": {"calibration": list(CAL_SEEDS), "final": list(FINAL_SEEDS)},
        },
        "hyperparameters": {"lr": 0.01},
        "dirr": {"admissible_range": [0.2, 0.8]},
    }
)


def _now() -> str:
    """A run's start: now, after the decision just frozen and before the ingest that follows (the
    audit flags dates in the future of the registry's clock)."""
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="microseconds")


def _cands(gain: float) -> dict:
    return {r: 1.0 + (gain if r == "0.05" else 0.0) for r in syn.ACTIONS}


def honest(res: Path) -> dict:
    """The claims registered first (experiments.claims), calibration DIR-R records (signals
    0.1..0.4, gains 0, 0, 1, 1), the decision frozen from them with the project's own rule, then
    every final run after it (baselines and DIR-R under the decision)."""
    claims = freeze_claims(ResultsDir(res).decisions, load_claims(SPEC.claims), "e")
    cal = []
    for k, seed in enumerate(CAL_SEEDS):
        rec = syn.record(
            experiment="e",
            benchmark="tofu",
            variant="dirr",
            split="calibration",
            seed=seed,
            probe_signal=0.1 * (k + 1),
            candidates=_cands(1.0 if k >= 2 else 0.0),
            triggered=True,
            selection="development",
        )
        syn.write(res, rec)
        cal.append(RunRecord.from_dict(rec))
    _, dec = calibrate_and_freeze(
        cal,
        ResultsDir(res).decisions,
        baselines=["random"],
        admissible=(0.2, 0.8),
        experiment="e",
        claims_hash=claims["claims_hash"],
    )
    for seed in FINAL_SEEDS:
        for method in ("intervention_score", "random"):
            syn.write(
                res,
                syn.record(
                    experiment="e", benchmark="tofu", method=method, seed=seed, started_at=_now()
                ),
            )
        syn.write(
            res,
            syn.record(
                experiment="e",
                benchmark="tofu",
                variant="dirr",
                seed=seed,
                tau=dec["tau"],
                decision_hash=dec["hash"],
                probe_signal=0.5,
                triggered=True,
                candidates=_cands(0.5),
                started_at=_now(),
                selection="development",
            ),
        )
    return dec


def _records(res: Path, variant="dirr", split="final") -> list[Path]:
    out = []
    for f in ResultsDir(res).record_files():
        r = json.loads(Path(f).read_text())
        if r["spec"]["variant"] == variant and r["spec"]["split"] == split:
            out.append(Path(f))
    return out


def _reissue(res: Path, dec: dict, **change) -> dict:
    """The forger's decision: ``change`` applied, frozen items re-hashed, the old file gone, and
    every final DIR-R record rewritten to name it (and its tau), so that decision and records
    agree."""
    forged = {**dec, **change}
    forged["hash"] = decision_hash(forged)
    (ResultsDir(res).decisions / f"{dec['hash']}.json").unlink()
    (ResultsDir(res).decisions / f"{forged['hash']}.json").write_text(json.dumps(forged))
    for f in _records(res):
        r = json.loads(f.read_text())
        r["dirr"].update(decision_hash=forged["hash"], tau=forged["tau"])
        f.write_text(json.dumps(r))
    return forged


def forge_tau(res, dec, con):
    _reissue(res, dec, tau=0.05)


def forge_final_seeds_as_calibration(res, dec, con):
    finals = [json.loads(f.read_text()) for f in _records(res)]
    inst = [
        {
            "run_key": r["run_key"],
            "field": "forget10",
            "seed": r["spec"]["seed"],
            "s": 0.5,
            "gamma": 0.5,
        }
        for r in finals
    ]
    _reissue(
        res,
        dec,
        calibration_seeds=list(FINAL_SEEDS),
        calibration={**dec["calibration"], "instances": inst},
        calibration_runs=sorted(f"{r['run_key']}:" for r in finals),
    )


def forge_another_objectives_decision(res, dec, con):
    _reissue(res, dec, objective="simnpo")


def forge_instances(res, dec, con):
    inst = [dict(i) for i in dec["calibration"]["instances"]]
    inst[0]["s"] = 0.9  # informational items: the hash does not change
    path = ResultsDir(res).decisions / f"{dec['hash']}.json"
    path.write_text(json.dumps({**dec, "calibration": {**dec["calibration"], "instances": inst}}))


def forge_rules(res, dec, con):
    _reissue(
        res, dec, admissible_range=[0.0, 1.0]
    )  # tau itself still follows from the cited records


def forge_second_decision(res, dec, con):
    second = {**dec, "frozen_at": "2026-01-02T00:00:00.000000+00:00"}
    second["hash"] = decision_hash(second)
    (ResultsDir(res).decisions / f"{second['hash']}.json").write_text(json.dumps(second))
    f = _records(res)[0]
    r = json.loads(f.read_text())
    r["dirr"]["decision_hash"] = second["hash"]
    f.write_text(json.dumps(r))


def strip_gate(res, dec, con):
    for f in _records(res):
        r = json.loads(f.read_text())
        r["dirr"] = None
        f.write_text(json.dumps(r))


def backdate_after_ingest(res, dec, con):
    ingest(con, res)  # the registry saw the honest decision and records
    _reissue(res, dec, frozen_at="2000-01-01T00:00:00.000000+00:00")


def edit_outcome_in_sql(res, dec, con):
    ingest(con, res)
    con.execute("UPDATE outcomes SET J = J + 1 WHERE run_key = (SELECT min(run_key) FROM runs)")


def edit_tau_in_sql(res, dec, con):
    ingest(con, res)
    con.execute("UPDATE decisions SET tau = 0.05")
    con.execute("UPDATE gate_events SET tau = 0.05 WHERE decision_hash IS NOT NULL")


def drop_a_log_entry(res, dec, con):
    ingest(con, res)
    con.execute("DELETE FROM ingest_log WHERE seq = 3")


def change_claims_after_ingest(res, dec, con, tmp_path):
    """The experiment's claims file edited after its runs were ingested (a threshold loosened)."""
    ingest(con, res)
    text = load_claims().text.replace("threshold = 0.75", "threshold = 0.9")
    (tmp_path / "claims.toml").write_text(text)
    return ExperimentSpec.from_dict(
        {**_raw(), "experiment": {**_raw()["experiment"], "claims": str(tmp_path / "claims.toml")}}
    )


def register_claims_late(res, dec, con, tmp_path):
    """Claims registered after the final runs were ingested: the registry's own order shows it."""
    claims = [
        f
        for f in ResultsDir(res).decision_files()
        if json.loads(Path(f).read_text()).get("kind") == "claims"
    ]
    moved = tmp_path / "later"
    moved.mkdir()
    for f in claims:
        Path(f).rename(moved / Path(f).name)
    ingest(con, res)
    for f in moved.iterdir():
        f.rename(ResultsDir(res).decisions / f.name)


def _rewrite_claims_decision(res, **changes) -> None:
    """The registered claims decision re-issued with ``changes`` (its content hash recomputed, so
    only the audit's own checks can tell)."""
    from supportbench.experiments.claims import decision_hash as claims_hash

    for f in ResultsDir(res).decision_files():
        d = json.loads(Path(f).read_text())
        if d.get("kind") == "claims":
            Path(f).unlink()
            d = {**d, **changes}
            d["hash"] = claims_hash(d)
            (ResultsDir(res).decisions / f"{d['hash']}.json").write_text(json.dumps(d))


def register_claims_after_the_first_start(res, dec, con, tmp_path):
    """Claims frozen one second after the first final run started (ingested with the runs, so
    the log's order alone would not show it): the audit's ``late`` rule."""
    from datetime import datetime, timedelta

    first = min(
        json.loads(Path(f).read_text())["provenance"]["started_at"]
        for f in _records(res, split="final")
    )
    later = (datetime.fromisoformat(first) + timedelta(seconds=1)).isoformat()
    _rewrite_claims_decision(res, frozen_at=later)


def register_other_claims_too(res, dec, con, tmp_path):
    """A second claims decision of the same experiment with a different text."""
    other = load_claims().text.replace("threshold = 0.75", "threshold = 0.9")
    (tmp_path / "other.toml").write_text(other)
    freeze_claims(ResultsDir(res).decisions, load_claims(tmp_path / "other.toml"), "e")


def _raw() -> dict:
    return {
        "experiment": {
            "name": "e",
            "benchmarks": ["tofu"],
            "fields": ["forget10"],
            "objectives": ["npo"],
            "methods": ["intervention_score", "random"],
            "T": 200,
            "t": 160,
            "d": 20,
            "rho_p": 0.01,
            "seeds": {"calibration": list(CAL_SEEDS), "final": list(FINAL_SEEDS)},
        },
        "hyperparameters": {"lr": 0.01},
        "dirr": {"admissible_range": [0.2, 0.8]},
    }


@pytest.mark.parametrize(
    ("forge", "reason"),
    [
        (change_claims_after_ingest, "it changed after they were registered"),
        (register_claims_late, "after the first final run (entry"),
        (register_claims_after_the_first_start, "after the first final run started ("),
        (register_other_claims_too, "claims registered more than once, with different texts"),
    ],
    ids=["changed-after-ingest", "registered-late", "frozen-after-start", "registered-twice"],
)
def test_claims_changed_or_registered_late_fail_the_audit(tmp_path, forge, reason):
    res = tmp_path / "res"
    con = connect(tmp_path / "r.duckdb")
    honest(res)
    spec = forge(res, None, con, tmp_path) or SPEC
    ingest(con, res)
    rep = audit(con, "e", spec)
    assert not rep.ok
    assert any(reason in r["reason"] for r in rep.claims), rep.text()


def test_plain_audit_checks_the_claims_file_the_registered_decision_names(tmp_path):
    """Without ``--spec`` the audit compares the file the claims decision came from (review: a
    plain ``audit`` skipped the check); a file no longer there cannot be compared."""
    res = tmp_path / "res"
    con = connect(tmp_path / "r.duckdb")
    honest(res)
    path = tmp_path / "claims.toml"
    path.write_text(load_claims().text)  # the same text: the same claims hash every decision cites
    _rewrite_claims_decision(res, source=str(path))
    ingest(con, res)
    assert audit(con, "e").ok, audit(con, "e").text()
    path.write_text(load_claims().text.replace("threshold = 0.75", "threshold = 0.9"))
    rep = audit(con, "e")
    assert not rep.ok and any(
        "it changed after they were registered" in r["reason"] and str(path) in r["reason"]
        for r in rep.claims
    ), rep.text()
    path.unlink()
    assert audit(con, "e").ok


def backdate_decision_before_its_evidence(res, dec, con):
    """The decision re-dated one day before the calibration runs it cites (and the final records
    rewritten to name the re-hashed decision): issue 33's forgery that the registry's records
    contradict."""
    from datetime import datetime, timedelta

    first = min(
        json.loads(Path(f).read_text())["provenance"]["started_at"]
        for f in _records(res, split="calibration")
    )
    _reissue(res, dec, frozen_at=(datetime.fromisoformat(first) - timedelta(days=1)).isoformat())


def backdate_and_erase_the_evidence_times(res, dec, con):
    """The back-dated decision of above, and the cited calibration runs' finish times erased (a
    malformed time is refused at ingest, issue 33; null is a record's own "not known"): the order
    can no longer be checked, and the audit says so instead of passing."""
    backdate_decision_before_its_evidence(res, dec, con)
    for f in _records(res, split="calibration"):
        r = json.loads(f.read_text())
        r["provenance"]["finished_at"] = None
        f.write_text(json.dumps(r))


def date_runs_in_the_future(res, dec, con):
    """Final runs dated a year ahead (so that they look started after any decision): the registry's
    clock at their ingest says otherwise."""
    for f in _records(res, variant="static"):
        r = json.loads(f.read_text())
        r["provenance"]["started_at"] = r["provenance"]["finished_at"] = "2999-01-01T00:00:00+00:00"
        f.write_text(json.dumps(r))


CASES = [
    (backdate_decision_before_its_evidence, "clock", "before the calibration run"),
    (backdate_and_erase_the_evidence_times, "clock", "whose record has no finish time"),
    (date_runs_in_the_future, "clock", "in the future of the registry's clock"),
    (forge_tau, "decision_evidence", "is not what the calibration rule gives on the cited records"),
    (
        forge_final_seeds_as_calibration,
        "decision_evidence",
        "cited run is not a calibration DIR-R run",
    ),
    (
        forge_another_objectives_decision,
        "undeclared_decisions",
        "frozen for another benchmark, objective",
    ),
    (forge_instances, "decision_evidence", "cited signal s differs from the record"),
    (forge_rules, "decision_evidence", "frozen under rules the experiment does not declare"),
    (forge_second_decision, "competing_decisions", None),
    (strip_gate, "unfrozen", "record has no dirr block"),
    (backdate_after_ingest, "conflicts", None),
    (edit_outcome_in_sql, "ledger", "run differs from what ingest accepted"),
    (edit_tau_in_sql, "ledger", "decision differs from what ingest accepted"),
    (drop_a_log_entry, "ledger", "entries 3..3 are missing from the log"),
]


def _audit(res: Path, con):
    ingest(con, res)
    return audit(con, "e", SPEC)


def test_the_honest_baseline_audits_clean(tmp_path):
    res = tmp_path / "res"
    honest(res)
    rep = _audit(res, connect(tmp_path / "r.duckdb"))
    assert rep.ok, rep.text()
    # every run, the decision and the registered claims logged
    assert rep.head["seq"] == len(ResultsDir(res).record_files()) + 2


@pytest.mark.parametrize(("forge", "section", "reason"), CASES, ids=[c[0].__name__ for c in CASES])
def test_tampering_is_evident(tmp_path, forge, section, reason):
    res = tmp_path / "res"
    con = connect(tmp_path / "r.duckdb")
    dec = honest(res)
    forge(res, dec, con)
    rep = _audit(res, con)
    assert not rep.ok
    rows = getattr(rep, section)
    assert rows, f"{forge.__name__}: nothing in {section}\n{rep.text()}"
    if reason:
        assert any(reason in str(r.get("reason")) for r in rows), rows


def test_a_rewritten_chain_changes_the_head(tmp_path):
    """Recomputing every hash after an edit passes verify, but not a head noted before: what the
    head is for."""
    from supportbench.registry import ledger

    res = tmp_path / "res"
    honest(res)
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    before = ledger.head(con)
    con.execute("UPDATE outcomes SET J = J + 1 WHERE run_key = (SELECT min(run_key) FROM runs)")
    rows = con.execute("SELECT seq, key, kind FROM ingest_log ORDER BY seq").fetchall()
    con.execute("DELETE FROM ingest_log")
    for _seq, key, kind in rows:  # the forger re-logs everything from scratch
        ledger.append(con, kind, [key])
    assert ledger.verify(con) == []
    assert ledger.head(con)["hash"] != before["hash"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tau": None}, "tau = None must be a finite number"),
        ({"tau": "0.1"}, "tau = '0.1' must be a finite number"),
        ({"frozen_at": "yesterday"}, "frozen_at 'yesterday' is not an ISO timestamp"),
        (
            {"frozen_at": "2999-01-01T00:00:00+00:00"},
            "frozen_at '2999-01-01T00:00:00\\+00:00' is in the future",
        ),
        ({"frozen_at": "2026-01-01T00:00:00"}, "has no time zone"),
        ({"selection": "oracle"}, "selection = 'oracle' must be one of evaluation, development"),
        (
            {"calibration_seeds": [7.0]},
            "calibration_seeds = \\[7.0\\] must be a list of whole numbers",
        ),
        ({"d": 1.5}, "d = 1.5 must be a whole number > 0"),
        ({"rho_p": 0.07}, "rho_p = 0.07 must be a probe action"),
        (
            {"admissible_range": [0.9, 0.1]},
            "admissible_range = \\[0.9, 0.1\\] must be \\[lo, hi\\]",
        ),
        ({"t": 190, "d": 20}, "t = 190, d = 20, T = 200 must satisfy"),
    ],
)
def test_a_decision_with_a_bad_item_is_refused_even_with_a_matching_hash(tmp_path, change, message):
    from supportbench.errors import DecisionError
    from supportbench.experiments.decisions import verify_decision

    res = tmp_path / "res"
    dec = honest(res)
    bad = {**dec, **change}
    bad["hash"] = decision_hash(
        bad
    )  # consistent with its own content: only the item check can refuse it
    with pytest.raises(DecisionError, match=message):
        verify_decision(bad)


def test_findings_say_when_claims_were_registered_after_the_first_final_run(tmp_path):
    """findings.md's 'registered ... before its first final run' is checked against the records,
    as the audit checks it (review: the sentence was printed without looking)."""
    from supportbench.reports.findings import registered_claims

    for late, want in ((False, "before its first final run started ("), (True, "**after its")):
        res, db = tmp_path / f"res{late}", tmp_path / f"r{late}.duckdb"
        honest(res)
        if late:
            register_claims_after_the_first_start(res, None, None, tmp_path)
        con = connect(db)
        ingest(con, res)
        _, registered = registered_claims(con, "e")
        assert want in registered, registered
        assert ("`supportbench audit` fails this experiment" in registered) is late
