"""`supportbench report` describes the user's experiment, not only the paper's (issue 23):
per-method tables for whatever methods, objectives and benchmarks a registry holds, a --reference
with a stated choice rule, display names declared by the methods (plugins included, read without
importing them), figures that say why they are empty, and a paper.tex with a title, the figures and
true minus signs."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import matplotlib
import pytest

from supportbench.errors import RegistryError
from supportbench.registry import synthetic as syn
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect
from supportbench.reports import figures as figures
from supportbench.reports import names
from supportbench.reports.report import TEX_PACKAGES, report
from supportbench.reports.tables import Context

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "supportbench.cli"]
FIELDS, OBJECTIVES, SEEDS = ("Email_Address", "Phone_Number"), ("npo", "simnpo"), (1, 2)
# the sweep's per-unit J: the reference's, and each
# other method's offset from it (known paired gaps)
OFFSET = {"random": -0.25, "snip": 0.125}


def sweep(
    root: Path,
    methods=("intervention_score", "random", "snip"),
    seeds=SEEDS,
    fields=FIELDS,
    objectives=OBJECTIVES,
    triggered=True,
    benchmark="lacuna",
) -> Path:
    """A 3-method sweep (Intervention Score with DIR-R, Random and the plugin method snip) on one
    benchmark."""
    res = root / "res"
    for i, (f, o, s) in enumerate((f, o, s) for f in fields for o in objectives for s in seeds):
        base = 0.5 + 0.125 * i
        for m in methods:
            syn.write(
                res,
                syn.record(
                    experiment="mine",
                    benchmark=benchmark,
                    field=f,
                    objective=o,
                    method=m,
                    seed=s,
                    J=base + OFFSET.get(m, 0.0),
                    groups=(i, 50 + i, 100 if o == "npo" else 200),
                ),
            )
        if "intervention_score" in methods:
            trig = triggered and i % 2 == 0
            cands = {a: base + (0.0625 if trig and a == "0.05" else 0.0) for a in syn.ACTIONS}
            syn.write(
                res,
                syn.record(
                    experiment="mine",
                    benchmark=benchmark,
                    field=f,
                    objective=o,
                    method="intervention_score",
                    variant="dirr",
                    seed=s,
                    J=max(cands.values()),
                    candidates=cands,
                    triggered=trig,
                ),
            )
    db = root / "r.duckdb"
    con = connect(db)
    ingest(con, res, allow_unknown=True)  # snip: a plugin method this process has not installed
    con.close()
    return db


def write_plugin(site: Path) -> Path:
    """An installed plugin method ``snip`` (entry point + source file) whose module imports
    torch."""
    (site / "snip_plugin").mkdir(parents=True)
    (site / "snip_plugin" / "__init__.py").write_text(
        "import torch  # noqa: F401  (a report must never run this)\n"
    )
    (site / "snip_plugin" / "method.py").write_text(
        textwrap.dedent("""
        import torch

        class Snip:
            display_name = "SNIP"
            provenance = "test plugin"
            requires = ("grad:F",)

            def score(self, diag, geometry):
                return torch.zeros(geometry.n_groups)
        """)
    )
    d = site / "snip_plugin-0.1.dist-info"
    d.mkdir()
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: snip_plugin\nVersion: 0.1\n")
    (d / "entry_points.txt").write_text("[supportbench.methods]\nsnip = snip_plugin.method:Snip\n")
    return site


@pytest.fixture()
def plugin(tmp_path, monkeypatch):
    site = write_plugin(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    names.display_names.cache_clear()
    yield site
    names.display_names.cache_clear()


def env_with(site: Path | None = None, path: str | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [
            *([str(site)] if site else []),
            str(ROOT / "src"),
            *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []),
        ]
    )
    if path is not None:
        env["PATH"] = path
    return env


def outside_math(text: str) -> str:
    return re.sub(r"\$[^$]*\$", "", text)


def test_any_registry_gets_per_method_tables_and_every_figure(tmp_path, plugin):
    db = sweep(tmp_path)
    st = report(db, tmp_path / "out")
    out = tmp_path / "out"
    assert set(st["methods"]) == {"tab:methods:lacuna", "tab:methods:dirr"}
    assert all(v is None for v in st["figures"].values()), st["figures"]
    # no run here has a curve: an experiment report names the figure once, as one it never asked
    # for, not as missing
    assert "curves" not in st["figures"] and "eval_every" in st["figures_not_asked"]["curves"]
    md = (out / "report.md").read_text()
    assert "missing: needs" not in md
    assert "Not drawn, as this experiment has none of the runs they need: curves (needs" in md
    tex = (out / "tables" / "tab-methods-lacuna.tex").read_text()
    # one row per method present and objective, the
    # reference first, display names (the plugin's too)
    for obj in ("NPO", "SimNPO"):
        rows = [line for line in tex.splitlines() if line.startswith(obj + " & ")]
        # the synthetic DIR-R runs selected on the evaluation split: their row carries the dagger
        assert [r.split(" & ")[1] for r in rows] == [
            "Intervention Score",
            "Random",
            "SNIP",
            "Intervention Score + DIR-R$^\\dagger$",
        ]
        assert r"\emph{reference}" in rows[0]
        # method - reference on 4 matched units (positive = better than the reference): Random is
        # 0.25 below, SNIP 0.125 above, exactly on every unit; W/T/L of the method
        assert "$-0.2500$ $[-0.2500,-0.2500]$ & $-0.2500$ & 0/0/4" in rows[1]
        assert "$+0.1250$ $[+0.1250,+0.1250]$ & $+0.1250$ & 4/0/0" in rows[2]
    md = (out / "report.md").read_text()
    assert "Reference: Intervention Score, the paper's method (the default)" in md
    assert "| NPO | SNIP | 4 |" in md and "| NPO | Random | 4 |" in md
    dirr = (out / "tables" / "tab-methods-dirr.tex").read_text()
    # DIR-R - static: +0.0625 on the two triggered units of four; t(3) interval by hand
    half = 3.182446 * 0.0625 / 3**0.5 / 2
    assert (
        "lacuna & NPO & Intervention Score$^\\dagger$ & 4 & $+0.0312$ "
        f"$[{0.03125 - half:+.4f},{0.03125 + half:+.4f}]$ & 2/2/0 & 2/4" in dirr
    )
    assert "evaluation split (8 of 8 DIR-R runs)" in dirr  # the caption says what the dagger means
    paper = (out / "paper.tex").read_text()
    assert paper.index(r"\maketitle") < paper.index(r"\input{tables/")
    assert (
        r"\input{tables/tab-methods-lacuna.tex}" in paper
        and r"\input{tables/tab-methods-dirr.tex}" in paper
    )
    for name in figures.FIGURES:
        if name == "curves":  # named once with its reason instead
            assert "none of the runs they need: curves (needs runs with a curve" in paper
            assert "{figures/curves.pdf}" not in paper
            continue
        assert f"{{figures/{name}.pdf}}" in paper and (out / "figures" / f"{name}.pdf").is_file()
    for f in out.rglob("*"):
        if f.suffix in (".md", ".tex"):
            text = f.read_text()
            assert "undefined" not in text, f
            if f.parent.name == "tables":  # every negative number printed with a math-mode minus
                assert not re.search(r"-\d", outside_math(text)), (
                    f,
                    re.findall(r".{20}-\d.{10}", outside_math(text)),
                )


def figure_texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_text()]


def test_figures_never_say_undefined_and_explain_an_untriggered_dirr(tmp_path, plugin):
    con = connect(sweep(tmp_path, triggered=False), read_only=True)
    ctx = Context.from_registry(con, "mine")
    with matplotlib.rc_context(figures.SAFE_TEXT):
        for name, fn in figures.FIGURES.items():
            if name == "curves":  # no run here has a curve: named as missing, never blank
                with pytest.raises(figures.Missing, match="eval_every"):
                    fn(ctx, con)
                continue
            fig = fn(ctx, con) if name in figures._READS_THE_REGISTRY else fn(ctx)
            texts = figure_texts(fig)
            assert not any("undefined" in t for t in texts), (name, texts)
            if name == "dirr-gain":
                assert any("triggered in none of its 8 runs" in t for t in texts), texts
            if (
                name == "support-jaccard"
            ):  # NPO and SimNPO supports never overlap here: 0.000, not a blank cell
                assert texts.count("0.000") == 2 and texts.count("1.000") == 2, texts
            matplotlib.pyplot.close(fig)


def test_loo_forest_draws_the_point_of_a_single_unit(tmp_path, plugin):
    con = connect(
        sweep(
            tmp_path, seeds=(1,), fields=("Email_Address",), objectives=("npo",), triggered=False
        ),
        read_only=True,
    )
    fig = figures.loo_forest(Context.from_registry(con, "mine"))
    ax = fig.axes[0]
    points = [tuple(line.get_xdata()) for line in ax.get_lines() if line.get_marker() == "o"]
    # method − reference (Intervention Score, static): Random −0.25, SNIP +0.125, and its DIR-R
    # arm (never triggered: its static continuation) 0
    assert sorted(points) == [(-0.25,), (0.0,), (0.125,)]
    lo, hi = ax.get_xlim()
    assert lo < -0.25 and hi > 0.125  # every point in view
    matplotlib.pyplot.close(fig)


def test_heatmap_numbers_take_the_colour_that_reads_on_their_cell(tmp_path, plugin):
    assert (
        figures.text_colour((0.0, 0.0, 0.2, 1.0)) == "white"
        and figures.text_colour((1.0, 1.0, 0.9, 1.0)) == "black"
    )
    fig = figures.field_gap_heatmap(
        Context.from_registry(connect(sweep(tmp_path), read_only=True), "mine")
    )
    ax = fig.axes[0]
    im = ax.get_images()[0]
    for t in ax.texts:
        value = float(t.get_text())
        assert t.get_color() == figures.text_colour(im.cmap(im.norm(value)))
    assert {t.get_color() for t in ax.texts} == {
        "white",
        "black",
    }  # the darkest cells get white numbers
    matplotlib.pyplot.close(fig)


def test_reference_option_and_a_bad_one_names_the_choices(tmp_path, plugin):
    db = sweep(tmp_path)
    env = env_with(plugin)
    r = subprocess.run(
        CLI
        + ["report", "--registry", str(db), "--out", str(tmp_path / "o1"), "--reference", "snip"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert "reference: SNIP, chosen with --reference" in r.stdout
    rows = [
        line
        for line in (tmp_path / "o1" / "tables" / "tab-methods-lacuna.tex").read_text().splitlines()
        if line.startswith("NPO & ")
    ]
    assert rows[0].startswith(r"NPO & SNIP & 4 &") and r"\emph{reference}" in rows[0]
    # Intervention Score − SNIP, the method's W/T/L against the reference SNIP
    assert "$-0.1250$ $[-0.1250,-0.1250]$ & $-0.1250$ & 0/0/4" in rows[1]
    r = subprocess.run(
        CLI
        + ["report", "--registry", str(db), "--out", str(tmp_path / "o2"), "--reference", "snpi"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 2
    for arm in (
        "intervention_score (Intervention Score)",
        "random (Random)",
        "snip (SNIP)",
        "intervention_score:dirr (Intervention Score + DIR-R)",
    ):
        assert arm in r.stderr, r.stderr
    assert "'snpi'" in r.stderr and not (tmp_path / "o2").exists()


def test_without_intervention_score_the_reference_is_the_first_method_alphabetically(
    tmp_path, plugin
):
    st = report(sweep(tmp_path, methods=("wagle", "snip", "random")), tmp_path / "out")
    assert st["reference"].startswith(
        "Random: Intervention Score is not among this experiment's runs"
    )
    assert "alphabetical order" in st["reference"] and "--reference" in st["reference"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Reference: Random: Intervention Score is not among" in md
    assert all(v is None for k, v in st["figures"].items() if k not in ("dirr-gain", "curves")), st[
        "figures"
    ]
    assert "| NPO | WAGLE | 4 |" in md and "| NPO | SNIP | 4 |" in md


def test_display_names_are_read_without_importing_torch_or_the_plugin(tmp_path):
    site = write_plugin(tmp_path / "site")
    code = textwrap.dedent("""
        import sys
        from supportbench.reports.names import display_names
        n = display_names()
        print(n["snip"], n["wagle"], n["intervention_score"])
        print("torch" in sys.modules, any(m.startswith("snip_plugin") for m in sys.modules))
    """)
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env_with(site), check=True
    )
    assert r.stdout.splitlines() == ["SNIP WAGLE Intervention Score", "False False"]


def test_every_builtin_method_declares_a_display_name():
    from supportbench import catalog

    builtins = catalog.builtins("method")
    shown = {n: e.attrs.get("display_name") for n, e in builtins.items()}
    assert all(isinstance(v, str) and v for v in shown.values()), shown
    assert names.method_display("not_a_method") == "not_a_method"  # the fallback: its name


def test_pdf_without_pdflatex_exits_2_naming_the_packages(tmp_path):
    db = sweep(tmp_path)
    r = subprocess.run(
        CLI + ["report", "--registry", str(db), "--out", str(tmp_path / "out"), "--pdf"],
        capture_output=True,
        text=True,
        env=env_with(path=str(tmp_path / "empty-bin")),
    )
    assert r.returncode == 2
    assert all(p in r.stderr for p in TEX_PACKAGES), r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_pdf_builds_paper_pdf(tmp_path, plugin):
    db = sweep(tmp_path)
    r = subprocess.run(
        CLI + ["report", "--registry", str(db), "--out", str(tmp_path / "out"), "--pdf"],
        capture_output=True,
        text=True,
        env=env_with(plugin),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    pdf = tmp_path / "out" / "paper.pdf"
    assert pdf.is_file() and pdf.read_bytes().startswith(b"%PDF")
    log = (tmp_path / "out" / "paper.log").read_text(errors="replace")
    assert "LaTeX Warning: Reference" not in log and "Overfull" not in log


def test_metric_only_imports_get_a_metric_table_and_are_counted(tmp_path):
    """A registry holding only imported runs without J (as `registry import` of TOFU's logs makes
    them) reports their metrics per benchmark x objective, one row per method marked as imported,
    and says they are left out of the J statistics."""
    from supportbench.registry.imports import import_table

    (tmp_path / "t.csv").write_text(
        "experiment,benchmark,field,objective,method,variant,seed,split,status,"
        "metric:forget_quality,metric:model_utility,metric:forget_Q_A_Prob\n"
        "e,tofu,forget10,npo,wagle,static,1,final,ok,0.1,0.5,0.2\n"
        "e,tofu,forget10,npo,wagle,static,2,final,ok,0.3,0.7,\n"
        "e,tofu,forget10,npo,random,static,1,final,ok,0.05,0.6,0.4\n"
        "e,tofu,forget10,ga,random,static,1,final,ok,0.01,0.2,0.9\n"
    )
    db = tmp_path / "res" / "registry.duckdb"
    con = connect(db)
    assert import_table(con, tmp_path / "t.csv").new == 4
    con.close()
    st = report(db, tmp_path / "out")
    out = tmp_path / "out"
    assert st["metric_only_runs"] == 4
    assert set(st["metrics"]) == {"tab:metrics:tofu:npo", "tab:metrics:tofu:ga"}
    md = (out / "report.md").read_text()
    assert "Metric-only runs (ok, no J; e.g. imported with `registry import`): 4" in md
    assert "left out of every J statistic" in md
    assert "| method | source | n | forget_quality | model_utility | forget_Q_A_Prob |" in md
    # medians over seeds; a metric carried by fewer runs than the row's n says how many
    assert "| Random | imported | 1 | 0.05 | 0.6 | 0.4 |" in md
    assert "| WAGLE | imported | 2 | 0.2 | 0.6 | 0.2 (1) |" in md
    tex = (out / "tables" / "tab-metrics-tofu-npo.tex").read_text()
    assert r"WAGLE & imported & 2 & $0.2000$ & $0.6000$ & $0.2000$ (1) \\" in tex
    assert r"\input{tables/tab-metrics-tofu-npo.tex}" in (out / "paper.tex").read_text()


def test_api_metrics_holds_imported_runs_that_results_leaves_out(tmp_path):
    import supportbench as sb
    from supportbench.registry.imports import import_table

    (tmp_path / "t.csv").write_text(
        "experiment,benchmark,field,objective,method,variant,seed,split,status,"
        "metric:forget_quality\n"
        "e,tofu,forget10,npo,wagle,static,1,final,ok,0.1\n"
    )
    con = connect(tmp_path / "registry.duckdb")
    import_table(con, tmp_path / "t.csv")
    con.close()
    reg = sb.open_registry(tmp_path / "registry.duckdb")
    assert reg.results().height == 0
    m = reg.metrics("e")
    assert m.select("method", "origin", "name", "value").rows() == [
        ("wagle", "import", "forget_quality", 0.1)
    ]
    with pytest.raises(RegistryError, match="experiment 'other': no such experiment in the"):
        reg.metrics("other")  # as the command line says, not an empty frame (issue 33)


def test_tex_writes_any_name_in_ascii():
    from supportbench.reports.latex import tex

    assert tex("λ_tune") == r"$\lambda$\_tune"
    assert tex("café") == r"caf{\'{e}}" and tex("straße") == r"stra\ss{}e"
    assert tex("☃") == r"\textbackslash{}u2603"
    assert all(tex(s).isascii() for s in ("λ_tune", "café", "☃", "Ωmega", "naïve–x"))


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_pdf_builds_with_a_non_ascii_method_name(tmp_path):
    db = sweep(tmp_path, methods=("intervention_score", "λ_tune"), fields=FIELDS[:1], seeds=(1,))
    r = subprocess.run(
        CLI + ["report", "--registry", str(db), "--out", str(tmp_path / "out"), "--pdf"],
        capture_output=True,
        text=True,
        env=env_with(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "out" / "paper.pdf").read_bytes().startswith(b"%PDF")
    assert (
        r"$\lambda$\_tune" in (tmp_path / "out" / "tables" / "tab-methods-lacuna.tex").read_text()
    )


def test_failed_pdflatex_leaves_the_previous_report_and_says_one_line(tmp_path):
    db = sweep(tmp_path, methods=("intervention_score", "random"), fields=FIELDS[:1], seeds=(1,))
    out = tmp_path / "out"
    assert (
        subprocess.run(
            CLI + ["report", "--registry", str(db), "--out", str(out)], env=env_with()
        ).returncode
        == 0
    )
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "pdflatex").write_text(
        "#!/bin/sh\nprintf 'This is pdfTeX\\n! LaTeX Error: boom.\\nl.12 x\\n' > paper.log\n"
        "echo noise; exit 1\n"
    )
    (fake / "pdflatex").chmod(0o755)
    r = subprocess.run(
        CLI + ["report", "--registry", str(db), "--out", str(out), "--pdf"],
        capture_output=True,
        text=True,
        env=env_with(path=f"{fake}{os.pathsep}{os.environ['PATH']}"),
    )
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    log = tmp_path / "out.paper.log"
    assert len(lines) == 1 and "! LaTeX Error: boom." in lines[0] and str(log) in lines[0], r.stderr
    assert "! LaTeX Error: boom." in log.read_text()
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    if shutil.which("pdflatex"):  # a later success removes the failure's log
        r = subprocess.run(
            CLI + ["report", "--registry", str(db), "--out", str(out), "--pdf"],
            capture_output=True,
            text=True,
            env=env_with(),
        )
        assert r.returncode == 0 and not log.exists(), r.stderr


def test_api_components_speak_the_one_metric_vocabulary(tmp_path):
    """Review of issue 36: ``Registry.components()`` returned the names a record stores
    (forget_prob) beside ``metrics()``'s open-unlearning names (forget_Q_A_Prob). Now both say
    forget_Q_A_Prob; a component open-unlearning has no name for keeps its own."""
    import supportbench as sb
    from supportbench.registry import synthetic as syn
    from supportbench.registry.ingest import ingest

    res = tmp_path / "res"
    syn.write(res, syn.record(experiment="e", components={"forget_prob": 0.25, "odd_metric": 2.0}))
    con = connect(tmp_path / "r.duckdb")
    ingest(con, res)
    con.close()
    reg = sb.open_registry(tmp_path / "r.duckdb")
    got = sorted(reg.components("e").select("name", "value").rows())
    assert got == [("forget_Q_A_Prob", 0.25), ("odd_metric", 2.0)]
    assert sorted(reg.metrics("e").select("name", "value").rows()) == got
