"""`supportbench report` writes only what it owns (issue 33). Every bad --out, --findings or
--registry is refused before any work with one line naming the path and why (exit 2), and every file
around it is left as it was — checked by content (sha256 of every entry before and after), including
the two sequences that lost data: --findings naming the registry, and a second report into a results
folder a first report had marked. A report killed with -9 leaves staging folders that the next start
removes once their process is gone."""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from supportbench.cli import main
from supportbench.experiments.decisions import freeze_decision
from supportbench.registry import synthetic as syn
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect
from supportbench.reports import ownership as own

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "supportbench.cli"]
REG = "res/registry.duckdb"
LONG = "n" * 300  # one name over NAME_MAX (255 bytes)
DEEP = "/".join(["d" * 250] * 17)  # names that fit, a path over PATH_MAX (4095 bytes)


def write_results(res: Path, registry: Path | None = None, runs: int = 8) -> Path:
    """``runs`` synthetic run records and a frozen decision in ``res`` (what `sweep` leaves),
    ingested into ``registry`` (what `registry ingest` does)."""
    for seed in range(runs):
        syn.write(res, syn.record(experiment="e", seed=seed, J=1.0 + seed / 8))
    freeze_decision(
        res / "decisions",
        tau=0.02,
        rho_p=0.01,
        d=20,
        t=160,
        T=200,
        actions=[0.0, 0.01],
        admissible_range=[0.2, 0.8],
        calibration_seeds=[1],
        baselines=["memflex"],
        benchmark="lacuna",
        objective="graddiff",
        selection="evaluation",
        calibration_runs=[],
    )
    registry = registry or res / "registry.duckdb"
    con = connect(registry)
    ingest(con, res)
    con.close()
    return registry


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("built")
    write_results(root / "res")
    return root / "res"


@pytest.fixture()
def work(tmp_path, built, monkeypatch) -> Path:
    """tmp_path holding res/ (8 runs, decisions, the registry), a user's notes.txt, and as cwd."""
    shutil.copytree(built, tmp_path / "res")
    (tmp_path / "notes.txt").write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (links not followed): a folder, a link and its target, or a
    file's sha256."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = f"link -> {os.readlink(p)}"
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def content(path: Path) -> str | dict:
    return snapshot(path) if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()


def cli(capsys, *argv: str) -> tuple[int, str]:
    rc = main(["report", *argv])
    return rc, capsys.readouterr().err


@pytest.fixture()
def lock(request):
    """lock(folder): nothing can be created in ``folder`` for the rest of the test — chmod 0o555
    for a user, the immutable attribute for root (whom permission bits do not stop); skips where
    neither works."""

    def _lock(folder: Path) -> None:
        if os.geteuid() != 0:
            folder.chmod(0o555)
            request.addfinalizer(lambda: folder.chmod(0o755))
            return
        if shutil.which("chattr") is None:
            pytest.skip("running as root without chattr: no folder can be made unwritable here")
        r = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"running as root and chattr +i fails here ({r.stderr.strip()})")
        request.addfinalizer(lambda: subprocess.run(["chattr", "-i", str(folder)], check=True))

    return _lock


def _mkdir(t: Path, name: str) -> Path:
    (t / name).mkdir()
    return t / name


def _report_folder(t: Path, then=None) -> None:
    """A report written into t/rep by this command, then changed by ``then`` (as a user might)."""
    assert main(["report", "--registry", REG, "--out", "rep"]) == 0
    if then:
        then(t / "rep")


def _legacy_report_folder(t: Path, extra: str | None) -> None:
    """A report folder as reports before manifests left it (the one-line marker), plus ``extra``."""
    _report_folder(t)
    (t / "rep" / own.MARKER).write_text(own.LEGACY_MARKER_TEXT)
    if extra:
        (t / "rep" / extra).mkdir()
        (t / "rep" / extra / "a.json").write_text("{}")


# (id, setup(tmp) run before the snapshot, argv, exit code, message fragment, the paths the case
# is about: each must keep its content). Every row also asserts that nothing under tmp changed,
# appeared or vanished.
CASES = [
    # 1. --findings: only a new path or a findings.md a report wrote
    (
        "findings-is-the-registry",
        None,
        ["--out", "rep", "--findings", REG],
        2,
        "is the registry",
        [REG],
    ),
    (
        "findings-is-the-registry-by-another-name",
        None,
        ["--out", "rep", "--findings", "./res/../res/registry.duckdb"],
        2,
        "is the registry",
        [REG],
    ),
    (
        "findings-is-a-hard-link-to-the-registry",
        lambda t: os.link(t / REG, t / "alias.duckdb"),
        ["--out", "rep", "--findings", "alias.duckdb"],
        2,
        "is the registry",
        [REG],
    ),
    (
        "findings-is-another-file",
        None,
        ["--out", "rep", "--findings", "notes.txt"],
        2,
        "without the provenance stamp",
        ["notes.txt"],
    ),
    (
        "findings-is-the-registrys-wal",
        None,
        ["--out", "rep", "--findings", REG + ".wal"],
        2,
        "is the registry's own '.wal' file",
        [REG],
    ),
    (
        "findings-is-the-registrys-owner-note",
        None,
        ["--out", "rep", "--findings", REG + ".owner"],
        2,
        "is the registry's own '.owner' file",
        [REG],
    ),
    ("findings-is-a-folder", None, ["--out", "rep", "--findings", "res"], 2, "is a folder", [REG]),
    (
        "findings-under-a-file",
        None,
        ["--out", "rep", "--findings", "notes.txt/f.md"],
        2,
        "lies under",
        ["notes.txt"],
    ),
    (
        "findings-name-over-255-bytes",
        None,
        ["--out", "rep", "--findings", LONG],
        2,
        "longer than 255 bytes",
        [],
    ),
    (
        "findings-path-over-4095-bytes",
        None,
        ["--out", "rep", "--findings", f"{DEEP}/f.md"],
        2,
        "the path is longer than 4095 bytes",
        [],
    ),
    (
        "findings-folder-missing",
        None,
        ["--out", "rep", "--findings", "nodir/f.md"],
        2,
        "does not exist",
        [],
    ),
    (
        "findings-inside-out",
        None,
        ["--out", "rep", "--findings", "rep/f.md"],
        2,
        "inside --out",
        [],
    ),
    (
        "findings-is-a-link",
        lambda t: (t / "link.md").symlink_to(t / "notes.txt"),
        ["--out", "rep", "--findings", "link.md"],
        2,
        "is a symbolic link",
        ["notes.txt"],
    ),
    (
        "findings-in-an-unwritable-folder",
        "lock",
        ["--out", "rep", "--findings", "locked/f.md"],
        2,
        "nothing can be created in",
        [],
    ),
    # a stamped findings.md a person edited since is theirs
    # now; one stamped before body hashes is unprovable
    (
        "findings-stamped-then-edited-by-hand",
        lambda t: (
            main(["report", "--registry", REG, "--out", "rep0", "--findings", "f.md"]),
            (t / "f.md").write_text(
                (t / "f.md").read_text().replace("# Findings", "# My findings")
            ),
        ),
        ["--out", "rep", "--findings", "f.md"],
        2,
        "edited since the report wrote it",
        ["f.md"],
    ),
    (
        "findings-stamped-without-a-body-hash",
        lambda t: (t / "old.md").write_text(
            '# Findings\n\n<!-- supportbench-stamp {"records": 1} -->\n'
        ),
        ["--out", "rep", "--findings", "old.md"],
        2,
        "from before stamps held the text's hash",
        ["old.md"],
    ),
    (
        "findings-with-a-stamp-nested-deep",
        lambda t: (t / "deep.md").write_text(
            "<!-- supportbench-stamp " + "[" * 200_000 + "]" * 200_000 + " -->\n"
        ),
        ["--out", "rep", "--findings", "deep.md"],
        2,
        "without the provenance stamp",
        ["deep.md"],
    ),
    # 1. --out: never the registry or a folder holding it
    ("out-is-the-registry", None, ["--out", REG], 2, "is the registry", [REG]),
    ("out-holds-the-registry", None, ["--out", "res"], 2, "holds the registry", [REG]),
    # 2. a marker proves nothing by itself: the folder must hold exactly what the report wrote
    (
        "out-report-folder-that-received-results",
        lambda t: _report_folder(t, lambda rep: write_results(rep, t / "other.duckdb")),
        ["--registry", "other.duckdb", "--out", "rep"],
        2,
        "holds what no report wrote: decisions/",
        ["other.duckdb", "rep/runs", "rep/decisions"],
    ),
    (
        "out-report-folder-with-a-user-file",
        lambda t: _report_folder(t, lambda rep: (rep / "mine.txt").write_text("x")),
        ["--out", "rep"],
        2,
        "holds what no report wrote: mine.txt",
        ["rep/mine.txt"],
    ),
    (
        "out-report-folder-with-an-empty-subfolder",
        lambda t: _report_folder(t, lambda rep: (rep / "extra").mkdir()),
        ["--out", "rep"],
        2,
        "holds what no report wrote: extra/",
        [],
    ),
    (
        "out-report-folder-edited-by-hand",
        lambda t: _report_folder(t, lambda rep: (rep / "report.md").write_text("my notes")),
        ["--out", "rep"],
        2,
        "changed since: report.md",
        ["rep/report.md"],
    ),
    (
        "out-report-folder-missing-a-file",
        lambda t: _report_folder(t, lambda rep: (rep / "paper.tex").unlink()),
        ["--out", "rep"],
        2,
        "missing: paper.tex",
        ["rep/report.md"],
    ),
    (
        "out-report-folder-with-a-forged-marker",
        lambda t: (_mkdir(t, "rep") / own.MARKER).write_text('{"format": 2, "entries": "all"}'),
        ["--out", "rep"],
        2,
        "not a report this command wrote",
        [],
    ),
    (
        "out-legacy-marker-folder-with-runs",
        lambda t: _legacy_report_folder(t, "runs"),
        ["--out", "rep"],
        2,
        "from before manifests",
        ["rep/runs/a.json"],
    ),
    # a one-line marker proves nothing about the files beside it: a hand-edited report.md is kept
    (
        "out-legacy-marker-folder-with-an-edited-report",
        lambda t: (
            _legacy_report_folder(t, None),
            (t / "rep" / "report.md").write_text("my notes"),
        ),
        ["--out", "rep"],
        2,
        "from before manifests",
        ["rep/report.md"],
    ),
    (
        "out-legacy-marker-folder-as-the-report-left-it",
        lambda t: _legacy_report_folder(t, None),
        ["--out", "rep"],
        2,
        "move or delete it",
        ["rep/report.md", "rep/findings.md"],
    ),
    # 4. what used to be an internal error (exit 1)
    ("out-under-a-file", None, ["--out", "notes.txt/rep"], 2, "lies under", ["notes.txt"]),
    ("out-name-over-255-bytes", None, ["--out", LONG], 2, "longer than 255 bytes", []),
    (
        "out-path-over-4095-bytes",
        None,
        ["--out", f"{DEEP}/rep"],
        2,
        "the path is longer than 4095 bytes",
        [],
    ),
    (
        "out-in-an-unwritable-folder",
        "lock",
        ["--out", "locked/rep"],
        2,
        "nothing can be created in",
        [],
    ),
    (
        "out-where-nothing-can-be-created",
        None,
        ["--out", "/proc/x"],
        2,
        "nothing can be created in '/proc'",
        [],
    ),
    (
        "registry-under-a-file",
        None,
        ["--registry", "notes.txt/r.duckdb", "--out", "rep"],
        2,
        "lies under",
        ["notes.txt"],
    ),
    (
        "registry-name-over-255-bytes",
        None,
        ["--registry", LONG, "--out", "rep"],
        2,
        "longer than 255 bytes",
        [],
    ),
]


@pytest.mark.parametrize(
    ("setup", "argv", "code", "says", "kept"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_report_refuses_before_any_work_and_nothing_changes(
    work, capsys, lock, setup, argv, code, says, kept
):
    if setup == "lock":
        lock(_mkdir(work, "locked"))
    elif setup:
        setup(work)
    if "/proc/x" in argv and not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    capsys.readouterr()
    argv = argv if "--registry" in argv else ["--registry", REG, *argv]
    kept_before = {k: content(work / k) for k in kept}
    before = snapshot(work)
    rc, err = cli(capsys, *argv)
    assert rc == code and says in err, err
    assert len(err.strip().splitlines()) == 1 and "internal error" not in err, err
    assert {k: content(work / k) for k in kept} == kept_before
    assert snapshot(work) == before  # nothing lost, changed or written, hidden files included


# ---- the two data-loss sequences, end to end through the command line --------------------------
def run_cli(*argv: str, cwd: Path, bin_first: Path | None = None) -> subprocess.CompletedProcess:
    """The command line, run from ``cwd`` on this tree's code (``bin_first`` first on PATH)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])
        ),
    }
    if bin_first:
        env["PATH"] = f"{bin_first}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        CLI + list(argv), capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


def test_findings_naming_the_registry_leaves_it_a_registry(work):
    before = snapshot(work)
    r = run_cli("report", "--registry", REG, "--out", "rep", "--findings", REG, cwd=work)
    assert r.returncode == 2, r.stderr
    assert "--findings 'res/registry.duckdb' is the registry" in r.stderr, r.stderr
    assert snapshot(work) == before
    con = connect(work / REG, read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 8
    con.close()


def test_a_second_report_into_a_results_folder_the_first_one_marked_loses_nothing(tmp_path):
    """report --out results; a sweep then writes runs/ and decisions/ there and the registry is
    ingested into it; report --out results again must refuse: the marker no longer describes the
    folder."""
    other = tmp_path / "other"
    write_results(other, runs=2)
    r = run_cli("report", "--registry", "other/registry.duckdb", "--out", "results", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "results" / own.MARKER).is_file()
    write_results(tmp_path / "results")  # what `sweep` and `registry ingest` leave there
    assert len(list((tmp_path / "results" / "runs").glob("*.json"))) == 8
    before = snapshot(tmp_path)
    r = run_cli("report", "--registry", "results/registry.duckdb", "--out", "results", cwd=tmp_path)
    assert r.returncode == 2 and "holds the registry" in r.stderr, r.stderr
    assert snapshot(tmp_path) == before
    # the registry elsewhere: the folder itself must be refused, naming what is not the report's
    r = run_cli("report", "--registry", "other/registry.duckdb", "--out", "results", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "holds what no report wrote: decisions/, registry.duckdb, runs/" in r.stderr, r.stderr
    assert snapshot(tmp_path) == before


# ---- what the command may replace ----------------------------------------------------------------
def test_an_unchanged_report_folder_is_replaced_whole(work):
    assert main(["report", "--registry", REG, "--out", "rep", "--findings", "f.md"]) == 0
    rep = work / "rep"
    # a file an earlier report wrote and this one does not (a table no longer rendered) goes too
    (rep / "tables" / "tab-gone.tex").write_text("old table")
    own.write_marker(rep)
    # rep: as the report left it; f.md: stamped by it
    assert main(["report", "--registry", REG, "--out", "rep", "--findings", "f.md"]) == 0
    assert not (rep / "tables" / "tab-gone.tex").exists() and (rep / "report.md").is_file()
    assert own.why_not_ours(rep) is None
    assert (work / "f.md").read_text() == (rep / "findings.md").read_text()


# ---- kill -9 leftovers --------------------------------------------------------------------------
def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    with pytest.raises(ProcessLookupError):
        os.kill(p.pid, 0)
    return p.pid


def test_staging_folders_of_dead_reports_are_removed_and_nothing_else(work):
    dead, live = dead_pid(), os.getpid()
    names = {
        f".rep.tmp-{dead}": False,
        f".rep.old-{dead}": False,  # a killed report's: removed
        f".rep.tmp-{live}": True,  # a running report's: kept
        f".rep.tmp-{dead}x": True,
        f".other.tmp-{dead}": True,  # not the pattern for rep
        f"rep.tmp-{dead}": True,
        f".rep.tmp-0{dead}": True,
    }
    for name in names:
        (work / name).mkdir()
        (work / name / "report.md").write_text("half")
    (work / f".rep.old-{dead + 1}").write_text("a file, not a folder a report makes")  # kept
    r = run_cli("report", "--registry", REG, "--out", "rep", cwd=work)
    assert r.returncode == 0, r.stderr
    assert {n: (work / n).exists() for n in names} == names
    assert (work / f".rep.old-{dead + 1}").is_file()
    assert (work / "rep" / "report.md").is_file()


def test_a_refused_report_removes_no_staging_folder(work, capsys):
    dead = dead_pid()
    (work / f".rep.tmp-{dead}").mkdir()
    (work / "rep").mkdir()
    (work / "rep" / "mine.txt").write_text("x")
    assert cli(capsys, "--registry", REG, "--out", "rep")[0] == 2
    assert (work / f".rep.tmp-{dead}").is_dir()


def test_the_files_of_a_pdf_build_are_the_reports_too(work, tmp_path_factory):
    """paper.pdf and pdflatex's by-products are written before the manifest: the next report (with
    or without --pdf) still finds the folder as it left it."""
    fake = tmp_path_factory.mktemp("bin")
    (fake / "pdflatex").write_text("#!/bin/sh\nfor e in pdf aux log; do echo x > paper.$e; done\n")
    (fake / "pdflatex").chmod(0o755)
    for extra in (["--pdf"], []):
        r = run_cli("report", "--registry", REG, "--out", "rep", *extra, cwd=work, bin_first=fake)
        assert r.returncode == 0, r.stderr
        assert (work / "rep" / "paper.pdf").is_file() == bool(extra)
        assert own.why_not_ours(work / "rep") is None
