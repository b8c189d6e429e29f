"""The experiment report (issue 36): a registry that did not run the paper's grid gets a report
about what it ran -- no paper table, no column for a method that never ran, an interval beside
every mean, one reference and one sign (method − reference) in its tables and figures -- and the
rule that chose the kind is stated and testable."""

import re
from pathlib import Path

import matplotlib
import numpy as np
import pytest

from supportbench.catalog import BASELINES
from supportbench.cli import main
from supportbench.registry import synthetic as syn
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect
from supportbench.reports import figures as figures
from supportbench.reports import stats
from supportbench.reports.report import report, report_kind
from supportbench.reports.tables import TABLES, Context, file_name

FIELDS, SEEDS = ("forget01", "forget05"), (1, 2, 3)
# Random's paired gap to Intervention Score per unit: varied, so intervals have a width
GAPS = (-0.3, 0.1, -0.2, 0.05, -0.4, -0.1)


def _units():
    return [(f, s) for f in FIELDS for s in SEEDS]


def _registry(tmp_path: Path, methods=("intervention_score", "random"), skip=(), **extra) -> Path:
    """Two methods (Intervention Score, Random) under NPO on Natural-TOFU, 6 units (but the
    (method, unit index) pairs in ``skip``); ``extra`` adds runs: benchmark -> methods."""
    res = tmp_path / "res"
    for i, (f, s) in enumerate(_units()):
        base = 1.0 + 0.5 * i
        for m in (m for m in methods if (m, i) not in skip):
            J = base + (GAPS[i] if m == "random" else 0.0)
            syn.write(res, syn.record(experiment="mine", field=f, seed=s, method=m, J=J))
        for bench, ms in extra.items():
            for m in ms:
                rec = syn.record(experiment="mine", benchmark=bench, field=f, seed=s, method=m)
                syn.write(res, rec)
    db = tmp_path / "r.duckdb"
    con = connect(db)
    ingest(con, res, allow_unknown=True)
    con.close()
    return db


def _kind(tmp_path: Path, **kw) -> str:
    con = connect(_registry(tmp_path, **kw), read_only=True)
    try:
        return report_kind(Context.from_registry(con, "mine"))[0]
    finally:
        con.close()


def test_two_methods_one_objective_get_an_experiment_report(tmp_path, capsys):
    db, out = _registry(tmp_path), tmp_path / "out"
    assert main(["report", "--registry", str(db), "--out", str(out), "--html"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("experiment report: the experiment did not run the paper's grid")
    assert "tables:" not in printed  # no "3 rendered, 12 missing"
    # no paper table anywhere: not rendered, not listed, not input by paper.tex
    written = {p.name for p in (out / "tables").iterdir()}
    assert not written & {file_name(label) for label in TABLES}, written
    md, tex = (out / "report.md").read_text(), (out / "paper.tex").read_text()
    assert "The paper's tables" not in md and "The paper's tables" not in tex
    assert "SimNPO" not in md and "N/A" not in md  # no column or row for what never ran
    assert "Kind: experiment report" in md
    # every mean cell of the per-method table carries its interval; the gap is method − reference
    rows = [r for r in md.splitlines() if r.startswith("| NPO |")]
    assert [r.split(" | ")[1] for r in rows] == ["Intervention Score", "Random"]
    for r in rows:
        assert re.search(r"\| \d+\.\d{4} \[-?\d+\.\d{4}, -?\d+\.\d{4}\] \|", r), r
    d = np.array(GAPS)
    lo, hi = stats.t_interval(d)
    assert f"| {d.mean():+.4f} [{lo:+.4f}, {hi:+.4f}] |" in rows[1]
    assert "| 2/0/4 |" in rows[1]  # Random's wins, ties, losses against the reference
    assert "ΔJ method − reference [95% CI]" in md and "positive = better than the reference" in md
    # the figures compare the same reference with the same sign: the forest's point is the table's
    con = connect(db, read_only=True)
    with matplotlib.rc_context(figures.SAFE_TEXT):
        fig = figures.loo_forest(Context.from_registry(con, "mine"))
    con.close()
    ax = fig.axes[0]
    (point,) = [line.get_xdata()[0] for line in ax.get_lines() if line.get_marker() == "o"]
    assert point == pytest.approx(d.mean())
    # its bar is the table's t interval (review: the bars were LOO ranges beside t intervals)
    (bar,) = [tuple(line.get_xdata()) for line in ax.get_lines() if line.get_linewidth() == 2]
    assert bar == pytest.approx((lo, hi))
    assert "ΔJ = method − Intervention Score" in ax.get_xlabel()  # the tables' name for it
    assert [t.get_text() for t in ax.get_yticklabels()] == ["Random · NPO"]
    matplotlib.pyplot.close(fig)
    # the heatmap: Random − Intervention Score per field, the same sign as the table
    with matplotlib.rc_context(figures.SAFE_TEXT):
        fig = figures.field_gap_heatmap(
            Context.from_registry(con := connect(db, read_only=True), "mine")
        )
    con.close()
    cells = sorted(float(t.get_text()) for t in fig.axes[0].texts)
    assert cells == pytest.approx(sorted([d[:3].mean(), d[3:].mean()]), abs=1e-3)
    assert "method − Intervention Score (reference)" in fig.axes[0].get_title()
    matplotlib.pyplot.close(fig)
    # findings.md grades only what the experiment can speak to, and names the rest once
    findings = (out / "findings.md").read_text()
    assert findings.startswith("# Findings of experiment `mine`")
    assert "Not asked by this experiment" in findings
    # claims about benchmarks the experiment never ran (LACUNA, controlled) are named, not graded
    headings = [line for line in findings.splitlines() if line.startswith("## ")]
    assert headings and not [h for h in headings if "LACUNA" in h or "ontrolled" in h], headings
    page = (out / "index.html").read_text()
    assert "experiment report" in page and "Audit" in page
    # no section about what it never ran: no DIR-R run, so no DIR-R decisions (review of issue 36)
    assert 'id="gate-events"' not in page and "DIR-R decisions" not in page


def test_the_kind_follows_what_the_registry_holds(tmp_path):
    assert _kind(tmp_path / "a") == "experiment"
    # the paper's grid on Natural-TOFU: Intervention Score and the ten baselines under one objective
    assert _kind(tmp_path / "b", methods=("intervention_score", *BASELINES)) == "paper"
    # one baseline short is not the paper's grid
    assert _kind(tmp_path / "c", methods=("intervention_score", *BASELINES[1:])) == "experiment"
    # the controlled construction is Table 1's experiment
    assert _kind(tmp_path / "d", controlled=("backbone", "lora")) == "paper"
    # one interface of the controlled benchmark (a user trying a new one) is not Table 1's grid
    assert _kind(tmp_path / "e", controlled=("lora",)) == "experiment"


def test_kind_can_be_chosen_and_a_bad_one_is_refused(tmp_path, capsys):
    db = _registry(tmp_path)
    st = report(db, tmp_path / "p", kind="paper")
    assert st["kind"] == "paper" and set(st["tables"]) == set(TABLES)
    assert "chosen with --kind paper" in st["kind_rule"]
    with pytest.raises(SystemExit):
        main(["report", "--registry", str(db), "--out", str(tmp_path / "x"), "--kind", "papr"])
    assert "invalid choice: 'papr'" in capsys.readouterr().err
    from supportbench.errors import ReportError

    with pytest.raises(ReportError, match="--kind 'papr' is not a report kind; it takes one of"):
        report(db, tmp_path / "y", kind="papr")


def test_the_report_shows_the_audit_with_and_without_the_spec(tmp_path):
    db = _registry(tmp_path)
    st = report(db, tmp_path / "o")
    # 6 units x 2 methods
    assert st["audit"]["line"].startswith("PASS: 12 of 12 expected cells present")
    assert "without the experiment's spec" in st["audit"]["line"]
    md = (tmp_path / "o" / "report.md").read_text()
    assert "Audit (`supportbench audit`): PASS" in md
    st = report(_registry(tmp_path / "gap", skip={("random", 2)}), tmp_path / "g", html=True)
    assert st["audit"]["ok"] is False
    assert st["audit"]["line"].startswith(
        "FAIL: 11 of 12 expected cells present; missing cells (not imputed): 1"
    )
    assert "FAIL: 11 of 12" in (tmp_path / "g" / "index.html").read_text()


def test_a_spec_of_another_experiment_is_refused(tmp_path):
    from supportbench.errors import ReportError
    from supportbench.experiments.plan import ExperimentSpec

    spec = ExperimentSpec.from_toml("mini-paper")
    with pytest.raises(ReportError, match="--spec names experiment 'mini-paper' but the report"):
        report(_registry(tmp_path), tmp_path / "o", experiment="mine", spec=spec)
    # without --experiment the spec's experiment is the one reported: this registry has none
    from supportbench.errors import RegistryError

    with pytest.raises(RegistryError, match="no experiment 'mini-paper'"):
        report(_registry(tmp_path / "b"), tmp_path / "p", spec=spec)


def _dirr_registry(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """Intervention Score static and + DIR-R and Random under NPO on Natural-TOFU, three builds of
    four units; the paired gaps DIR-R − Random, unit by unit."""
    res, gaps = tmp_path / "res", []
    for b in range(3):
        for i, (f, s) in enumerate((f, s) for f in FIELDS[:2] for s in SEEDS[:2]):
            arms = {
                ("intervention_score", "static"): 1.0 + 0.3 * i,
                ("intervention_score", "dirr"): 1.0 + 0.3 * i + 0.1 * (i % 3) - 0.05,
                ("random", "static"): 1.0 + 0.3 * i - 0.2 + 0.1 * i + 0.01 * b,
            }
            for (m, v), J in arms.items():
                rec = syn.record(
                    experiment="mine", field=f, seed=s, method=m, variant=v, J=J, build=b,
                    triggered=True if v == "dirr" else None, selection="development",
                )  # fmt: skip
                syn.write(res, rec)
            gaps.append(arms["intervention_score", "dirr"] - arms["random", "static"])
    db = tmp_path / "r.duckdb"
    con = connect(db)
    ingest(con, res, allow_unknown=True)
    con.close()
    return db, np.array(gaps)


def test_an_experiment_report_grades_only_what_it_ran_and_names_both_arms(tmp_path, capsys):
    """Review of issue 36: an experiment of DIR-R and Random under NPO graded the ten-baseline claim
    by listing the 19 comparisons it never ran (SimNPO's among them) as 'no matched units', and the
    claim values carried no sign convention of their own. Now the report counts what it did not ask
    for, shows what it ran as method − reference with both arms named, and grades no claim whose
    comparisons it never ran (the support claim needs a second objective)."""
    db, gaps = _dirr_registry(tmp_path)
    out = tmp_path / "out"
    assert main(["report", "--registry", str(db), "--out", str(out)]) == 0
    capsys.readouterr()
    text = (out / "findings.md").read_text()
    graded = text.split("| claim | verdict |")[1]
    for never in ("simnpo", "SimNPO:", "wagle", "memflex", "no matched units", "no paired runs"):
        assert never not in graded.replace("under NPO and SimNPO", ""), never
    assert "19 of the claim's 20 comparisons not run by this experiment" in text
    assert "1 of the claim's 2 comparisons not run by this experiment" in text
    assert "npo: inconclusive (Intervention Score + DIR-R − Intervention Score: mean" in text
    assert "Not asked by this experiment" in text
    assert "## Natural-TOFU: the initial support depends on the objective" not in text
    # the comparison it ran: DIR-R − Random, pooled over the three builds' means (t, df = 2)
    per_build = gaps.reshape(3, 4).mean(axis=1)
    assert f"npo: Intervention Score + DIR-R − Random: {per_build.mean():+.4f}" in text
    assert "method − reference" in text
    # the paper report of the same registry names every comparison it lacks
    paper = tmp_path / "paper"
    assert main(["report", "--registry", str(db), "--out", str(paper), "--kind", "paper"]) == 0
    capsys.readouterr()
    full = (paper / "findings.md").read_text()
    assert "comparisons with no runs of one arm: npo:activation" in full
    assert "simnpo:projected_causal" in full


def test_the_page_shows_the_claims_numbers_and_no_gates_it_never_asked_for(tmp_path, capsys):
    """Review of issue 36: the page's claims table gave 'per setting (below)' with nothing below,
    showed a 'Construction gates' section for an experiment that never ran the construction, and
    printed a caption's LaTeX escape (95\\%)."""
    from supportbench.reports.html import detex

    db, gaps = _dirr_registry(tmp_path)
    out = tmp_path / "out"
    assert main(["report", "--registry", str(db), "--out", str(out), "--html"]) == 0
    capsys.readouterr()
    page = (out / "index.html").read_text()
    mean = gaps.reshape(3, 4).mean(axis=1).mean()
    assert f"npo: Intervention Score + DIR-R − Random: {mean:+.4f}" in page
    assert "npo: Intervention Score + DIR-R − Intervention Score: mean" in page
    assert 'id="gates"' not in page and "Construction gates" not in page
    # a claim decided per setting points at where its settings are: the "numbers" box
    assert "per setting (below)" not in page
    row = page[page.index("per setting (under numbers)") :]
    assert row.index("<summary>numbers</summary>") < row.index("</tr>")
    # the DIR-R runs' gate decisions have their section
    assert 'id="gate-events"' in page
    assert "95\\%" not in page and "95% t interval" in page
    assert detex("the tables' 95\\% $t$ interval of eval\\_every") == (
        "the tables' 95% t interval of eval_every"
    )


def test_an_experiment_report_says_nothing_it_never_asked_for(tmp_path, capsys):
    """Second review of issue 36: an experiment without DIR-R listed dirr-gain as 'missing', a
    benchmark the reference never ran on had a ΔJ column of 'no reference runs' in every row, a page
    with no graded claim showed an empty claims table, report.md left out the gates the page showed,
    and the figure captions deferred the reference's name to the title."""
    db = _registry(tmp_path, methods=("wagle", "activation"), controlled=["lora"])
    out = tmp_path / "out"
    assert main(["report", "--registry", str(db), "--out", str(out), "--html"]) == 0
    printed = capsys.readouterr().out
    assert "missing dirr-gain" not in printed and "missing curves" not in printed
    assert "Not drawn, as this experiment has none of the runs they need: " in printed
    assert "dirr-gain (needs paired DIR-R and static runs of one method" in printed
    md, tex = (out / "report.md").read_text(), (out / "paper.tex").read_text()
    page = (out / "index.html").read_text()
    assert "missing: needs" not in md and "not drawn: needs" not in tex
    # the controlled benchmark, where the reference (Activation here) never ran: no ΔJ columns
    assert "no reference runs" not in md + tex + page
    ctl = (out / "tables" / "tab-methods-controlled.tex").read_text()
    assert r"\begin{tabular}{@{}llrlll@{}}" in ctl and r"\Delta J" not in ctl.split(r"\toprule")[1]
    assert "the reference (Activation) has no run here, so no paired $\\Delta J$" in ctl
    ctl_md = md[md.index("`tab:methods:controlled`") :].split("\n\n")[1].splitlines()
    assert ctl_md[0] == "| objective | method | n | mean J [95% CI] | SD | median J |"
    assert 'the reference (<strong class="ref-name">Activation</strong>) has no run here' in page
    # the natural-TOFU table keeps its ΔJ against the reference
    assert "ΔJ vs Activation [95% CI]" in page
    # no claim graded: a sentence, not an empty table
    assert "No claim is graded here" in page and '<th data-type="text">claim</th>' not in page
    # the gates the page shows are in report.md too (the construction ran, one interface only)
    assert "## Construction gates (controlled benchmark)" in md
    assert 'id="gates"' in page
    # the captions name the reference
    assert (
        "method $-$ Activation (the report's reference; positive = better than Activation)" in tex
    )
    assert (
        "method - Activation (the report&#39;s reference; positive = better than Activation)"
        in (page)
    )


def test_a_leaderboard_of_an_objective_the_reference_never_ran_under_has_no_delta(tmp_path):
    """Re-check of issue 36: the page's leaderboards are per objective, and one whose objective the
    reference never ran under showed a ΔJ column of 'no reference runs' in every row."""
    res = tmp_path / "res"
    for i, (f, s) in enumerate(_units()):
        for obj, methods in (
            ("npo", ("intervention_score", "random")),
            ("simnpo", ("random", "wagle")),
        ):
            for m in methods:
                J = 1.0 + 0.5 * i + (GAPS[i] if m != "intervention_score" else 0.0)
                rec = syn.record(experiment="mine", field=f, seed=s, objective=obj, method=m, J=J)
                syn.write(res, rec)
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res, allow_unknown=True)
    con.close()
    report(tmp_path / "r.duckdb", tmp_path / "out", html=True)
    page = (tmp_path / "out" / "index.html").read_text()
    npo = page[page.index("natural_tofu · NPO</h3>") : page.index("natural_tofu · SimNPO</h3>")]
    simnpo = page[page.index("natural_tofu · SimNPO</h3>") :].split("</table>")[0]
    assert "ΔJ vs Intervention Score [95% CI]" in npo
    assert "ΔJ vs" not in simnpo and "no reference runs" not in simnpo
    assert "has no run here, so no paired ΔJ" in simnpo
