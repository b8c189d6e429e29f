"""Reports are written whole or not at all: TeX specials, a failing report that leaves the previous
one, and an --out folder the report does not own, which it never replaces."""

import subprocess
import sys

import pytest

from supportbench.registry import synthetic as syn
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect

CLI = [sys.executable, "-m", "supportbench.cli"]


# ---- reports -------------------------------------------------------------------------------------
def test_report_with_tex_specials_is_written_whole(tmp_path):
    from supportbench.reports.report import report

    odd = "m$_x^{2}$ & 100% #1 \\relax ~"
    res = tmp_path / "res"
    for seed in (1, 2):
        syn.write(res, syn.record(experiment="e", seed=seed, J=1.0 + seed))
        syn.write(res, syn.record(experiment="e", seed=seed, method=odd, J=0.5))
    weird_dir = tmp_path / "a_b&c%"
    weird_dir.mkdir()
    db = weird_dir / "r.duckdb"
    con = connect(db)
    ingest(con, res, allow_unknown=True)  # the odd method is no registered name: stored as asked
    con.close()
    st = report(db, tmp_path / "out", "e")
    assert st["figures"]
    paper = (tmp_path / "out" / "paper.tex").read_text()
    assert r"a\_b\&c\%" in paper
    for f in (tmp_path / "out" / "tables").glob("*.tex"):
        assert odd not in f.read_text()  # only the escaped form may appear


def test_a_failing_report_leaves_the_previous_one(tmp_path, monkeypatch):
    from supportbench.reports import report as report_module

    res = tmp_path / "res"
    syn.write(res, syn.record(experiment="e"))
    db = tmp_path / "r.duckdb"
    con = connect(db)
    ingest(con, res)
    con.close()
    report_module.report(db, tmp_path / "out", "e")
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "out").rglob("*"))

    def boom(*a, **k):
        raise RuntimeError("figure failed")

    monkeypatch.setattr(report_module, "render_figures", boom)
    with pytest.raises(RuntimeError):
        report_module.report(db, tmp_path / "out", "e")
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "out").rglob("*")) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def _tree(root) -> dict:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("res", "holds the registry"),  # the results directory itself
        (".", "holds the registry"),  # the current folder
        ("res/runs", "is a folder with other content"),  # a folder of the user's
        ("notes.txt", "is a file, not a folder"),  # a user's file
        ("link", "is a symbolic link"),  # a link to a folder
    ],
)
def test_report_out_never_replaces_what_it_does_not_own(tmp_path, monkeypatch, out, message):
    """A command only ever creates or replaces its own output folder: pointed at anything else,
    `report --out` is a clear error before any work, and every run, the registry and the user's
    files are left as they were."""
    res = tmp_path / "res"
    for seed in (1, 2):
        syn.write(res, syn.record(experiment="e", seed=seed, J=1.0 + seed))
    db = res / "registry.duckdb"
    con = connect(db)
    ingest(con, res)
    con.close()
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    r = subprocess.run(
        CLI + ["report", "--registry", str(db), "--out", out],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert _tree(tmp_path) == before


def test_report_replaces_its_own_previous_report(tmp_path):
    """Replaced whole while it holds exactly what the last report wrote; a file anyone else put
    there makes it not the report's any more (issue 33: a marker alone let a report delete runs and
    a registry)."""
    from supportbench.errors import ReportError
    from supportbench.reports.report import MARKER, report

    res = tmp_path / "res"
    syn.write(res, syn.record(experiment="e"))
    con = connect(res / "registry.duckdb")
    ingest(con, res)
    con.close()
    report(res / "registry.duckdb", res / "report", "e")
    assert (res / "report" / MARKER).is_file()
    report(res / "registry.duckdb", res / "report", "e")  # its own folder, unchanged: replaced
    assert (res / "report" / "report.md").is_file()
    (res / "report" / "stale.txt").write_text("not from a report")
    with pytest.raises(ReportError, match="holds what no report wrote: stale.txt"):
        report(res / "registry.duckdb", res / "report", "e")
    assert (res / "report" / "stale.txt").read_text() == "not from a report"
    assert (res / "runs").is_dir() and (res / "registry.duckdb").is_file()
