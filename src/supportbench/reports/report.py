"""``supportbench report``: every table of the paper (LaTeX), per-method tables for whatever the
experiment holds (``overview.py``), the figures, ``report.md`` and a ``paper.tex`` that \\inputs
every table and includes every figure, so ``pdflatex paper.tex`` (or ``report --pdf``) builds one
document; with ``--html`` also ``index.html``, the report as one self-contained page
(``html.py``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import polars as pl

from supportbench._io import write_text_atomic
from supportbench.catalog import BASELINES
from supportbench.errors import RegistryError, ReportError
from supportbench.registry.audit import CHECKS as AUDIT_CHECKS
from supportbench.registry.audit import audit
from supportbench.registry.store import connect
from supportbench.reports import ownership as own
from supportbench.reports import stats
from supportbench.reports.console import controlled_text
from supportbench.reports.figures import render_figures
from supportbench.reports.findings import findings
from supportbench.reports.html import gates_part, write_html
from supportbench.reports.html import page as html_page
from supportbench.reports.latex import tex
from supportbench.reports.metric_tables import load as load_metrics
from supportbench.reports.metric_tables import metric_only_count, metric_tables
from supportbench.reports.metric_tables import render_markdown as metrics_markdown
from supportbench.reports.metric_tables import render_tex as metrics_tex
from supportbench.reports.names import J_MEANING
from supportbench.reports.overview import (
    DEFAULT_REFERENCE,
    method_tables,
    reference_of,
    render_markdown,
    render_tex,
)
from supportbench.reports.tables import TABLES, Context, file_name, render_all

PAPER_TEX = r"""\documentclass{article}
\usepackage[T1]{fontenc}
\usepackage[utf8]{inputenc}
\usepackage{booktabs,adjustbox,amsmath,amssymb,graphicx,float}
\usepackage[margin=2cm]{geometry}
\title{supportbench report%s}
\author{}
\date{}
\begin{document}
\maketitle
\noindent Generated from \texttt{%s}. %s Reference for the per-method tables and figures: %s;
$\Delta J$ = method $-$ reference on matched units, positive = better than the reference.

\section*{Methods of this experiment}
%s
\clearpage
\section*{Metrics beyond $J$}
%s
\clearpage
\section*{Figures}
%s
%s
\end{document}
"""
FIGURE_TEX = r"""\begin{figure}[H]
\centering
\includegraphics[width=\linewidth,height=0.42\textheight,keepaspectratio]{figures/%s.pdf}
\caption{%s}
\end{figure}"""
FIGURE_CAPTIONS = {
    "field-gap-heatmap": "Mean paired $\\Delta J$ = method $-$ {ref} (the report's reference; "
    "positive = better than {ref}), per method and field, objectives pooled.",
    "loo-forest": "Mean paired $\\Delta J$ = method $-$ {ref} (the report's reference; positive = "
    "better than {ref}) per method and objective, as in the per-method tables, with the tables' "
    "95\\% $t$ interval (bar) and its leave-one-out range (ticks).",
    "dirr-gain": "DIR-R: available candidate-set gain (Eq.~20) and captured gain, per benchmark "
    "and objective.",
    "support-jaccard": "Support overlap (Jaccard) across objectives.",
    "curves": "$J$ on each run's fixed curve slice against the training step (runs with "
    "eval\\_every $>$ 0), mean per method; shown only: every table scores the terminal model.",
}


def figure_captions(reference: str) -> dict[str, str]:
    """The figures' captions (LaTeX), the report's reference named in each that compares with it."""
    return {name: c.replace("{ref}", tex(reference)) for name, c in FIGURE_CAPTIONS.items()}


KINDS = ("auto", "paper", "experiment")
# where callers imported them from before reports/ownership.py
MARKER, check_output_folder = own.MARKER, own.check_output_folder
TEX_PACKAGES = (
    "texlive-latex-base",
    "texlive-latex-recommended",
    "texlive-latex-extra",
)  # -extra: adjustbox


def report(
    registry: str | Path,
    out: str | Path,
    experiment: str | None = None,
    findings_path: str | Path | None = None,
    reference: str | None = None,
    pdf: bool = False,
    html: bool = False,
    kind: str = "auto",
    spec=None,
) -> dict:
    """Write one experiment's report. ``experiment`` may be left out only when the registry holds
    one: statistics never mix experiments. ``reference`` is the arm the per-method tables compare
    with (``overview.choose_reference``). The report is written whole or not at all: into a
    temporary folder beside ``out``, which replaces ``out`` only once every file is written. ``pdf``
    then builds ``paper.pdf`` with pdflatex, which must be on PATH. Every path is checked before any
    work (``ownership``): the command only writes over what it wrote itself. ``html`` also writes
    ``index.html``, the report as one self-contained page (``reports/html.py``). ``kind`` is
    ``paper`` (the paper's tables and claims), ``experiment`` (only what the experiment ran) or
    ``auto``: chosen by what the registry holds (``report_kind``). ``spec`` (an
    ``ExperimentSpec``) gives the audit the report shows the experiment's expected grid."""
    if spec is not None:  # the spec names the experiment its audit's grid belongs to
        if experiment is not None and experiment != spec.name:
            raise ReportError(
                f"--spec names experiment '{spec.name}' but the report covers '{experiment}': the "
                "audit would check one experiment's runs against another's grid; pass the spec of "
                f"'{experiment}' or leave --spec out"
            )
        experiment = spec.name
    if kind not in KINDS:
        raise ReportError(
            f"--kind '{kind}' is not a report kind; it takes one of: {', '.join(KINDS)}"
        )
    reg = own.check_registry(registry)
    out = own.check_output_folder(out, reg)
    findings_at = own.check_findings_path(findings_path, reg, out) if findings_path else None
    if pdf:
        pdflatex_path()
    own.remove_stale_staging(out)  # what a report killed before it finished left beside out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = own.staging_name(out, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        con = connect(registry, read_only=True)
        try:
            status, text = _write(con, registry, tmp, experiment, reference, html, kind, spec)
        finally:
            con.close()
        if (
            pdf
        ):  # built in the staging folder: a failed pdflatex leaves the previous report as it was
            failed_log = out.parent / f"{out.name}.paper.log"
            build_pdf(tmp, log_copy=failed_log)
            failed_log.unlink(missing_ok=True)  # a previous failure's log, now stale
            status["pdf"] = out / "paper.pdf"
        if html:
            status["html"] = out / "index.html"
        own.write_marker(tmp)  # last: the manifest of everything above, the PDF included
        _replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if findings_at:
        own.check_findings_path(findings_at, reg, out)  # again: it may have changed meanwhile
        write_text_atomic(findings_at, text)
    return status


def _replace(tmp: Path, out: Path) -> None:
    """Put the finished report ``tmp`` in place of ``out``, which is checked again first: a file
    someone put into it while the report was written must not be removed with it."""
    if out.is_dir():
        why = own.why_not_ours(out)
        if why:
            raise ReportError(
                f"--out '{out}' changed while the report was written ({why}): "
                "nothing was replaced; choose an empty or new folder"
            )
    old = own.staging_name(out, "old")
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def pdflatex_path() -> str:
    """pdflatex's path; a ``ReportError`` naming the Debian packages that provide what paper.tex
    needs when it is not on PATH."""
    path = shutil.which("pdflatex")
    if path is None:
        raise ReportError(
            "--pdf needs pdflatex, which is not on PATH; nothing was written. Install it with the "
            f"packages paper.tex uses (Debian/Ubuntu: apt-get install {' '.join(TEX_PACKAGES)}; "
            "-extra provides adjustbox), or leave out --pdf and build paper.tex later"
        )
    return path


def build_pdf(out: Path, timeout: float = 600, log_copy: Path | None = None) -> Path:
    """``pdflatex paper.tex`` twice in ``out`` (the second pass settles references),
    non-interactive: it stops at the first error instead of waiting for input. Returns
    ``out/paper.pdf``. On failure, a one-line ``ReportError`` with the first LaTeX error of
    paper.log and the log's path (``log_copy``, where the log is copied when ``out`` is a staging
    folder about to be removed)."""
    exe = pdflatex_path()
    for _ in range(2):
        try:
            r = subprocess.run(
                [exe, "-interaction=nonstopmode", "-halt-on-error", "paper.tex"],
                cwd=out,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            log = _keep_log(out, log_copy)
            raise ReportError(
                f"pdflatex ran longer than {timeout:.0f} s on paper.tex; no report was replaced; "
                f"log: {log}"
            ) from None
        if r.returncode != 0:
            log = _keep_log(out, log_copy)
            text = log.read_text(errors="replace") if log.is_file() else r.stdout
            first = next(
                (line.strip() for line in text.splitlines() if line.startswith("!")),
                f"no '!' error line (exit {r.returncode})",
            )
            raise ReportError(
                f"pdflatex failed on paper.tex: {first}; no report was replaced; log: {log}"
            )
    return out / "paper.pdf"


def _keep_log(folder: Path, copy: Path | None) -> Path:
    log = folder / "paper.log"
    if copy is None or not log.is_file():
        return log if copy is None else copy
    shutil.copyfile(log, copy)
    return copy


def _write(
    con,
    registry,
    out: Path,
    experiment: str | None,
    reference: str | None = None,
    html: bool = False,
    kind: str = "auto",
    spec=None,
) -> tuple[dict, str]:
    """Write the report of one experiment of the registry into ``out``: its tables, figures,
    paper.tex, report.md and findings.md (and index.html with ``html``). Returns what was rendered
    (or why not) and the findings' text."""
    experiment = _experiment_of(con, registry, experiment)
    ctx = Context.from_registry(con, experiment, reference=reference)
    ref = reference_of(ctx)  # an unknown --reference stops here, before anything is drawn
    kind, kind_rule = report_kind(ctx, kind)
    paper = kind == "paper"
    tables = render_all(ctx, out / "tables") if paper else {}
    methods = method_tables(ctx)
    for t in methods:
        write_text_atomic(out / "tables" / file_name(t.label), render_tex(t))
    metric_tabs = metric_tables(load_metrics(con, experiment))
    for t in metric_tabs:
        write_text_atomic(out / "tables" / file_name(t.label), metrics_tex(t))
    metric_only = metric_only_count(con, experiment)
    no_j = "The experiment has no ok runs with $J$" + (
        f" ({metric_only} metric-only runs: see the metric tables)." if metric_only else "."
    )
    figures = render_figures(ctx, out / "figures", con)
    # an experiment report draws what the experiment's runs allow and names the rest once, as
    # figures it did not ask for, not as missing ones
    not_asked = {} if paper else {n: why for n, why in figures.items() if why is not None}
    figures = {n: why for n, why in figures.items() if n not in not_asked}
    checked = audit_summary(con, experiment, spec)
    write_text_atomic(
        out / "paper.tex",
        _paper_tex(
            registry,
            experiment,
            ref.rule,
            methods,
            metric_tabs,
            figures,
            no_j,
            paper,
            f"{J_MEANING}. Kind: {kind_rule}. Audit: {checked['line']}.",
            not_asked,
            ref.name,
        ),
    )
    md = _markdown_head(registry, experiment, ctx, metric_only, ref.rule, kind_rule, checked)
    md += _markdown_method_and_metric_tables(methods, metric_tabs, no_j)
    if paper:
        md += _markdown_paper_tables(ctx, out, tables)
    else:  # the paper report has them in Table 1 and controlled.md
        md += _markdown_gates(ctx, kind)
    md += _markdown_figures(figures, not_asked)
    text = findings(ctx, con, experiment, str(registry), kind=kind)
    write_text_atomic(out / "findings.md", text)
    md.append(
        "`findings.md`: which of the paper's claims this registry supports, with the numbers.\n"
        if paper
        else "`findings.md`: the paper's claims that this experiment's runs can judge, with the "
        "numbers (the others are listed, not graded).\n"
    )
    write_text_atomic(out / "report.md", "\n".join(md))
    if html:  # after findings: the page shows the verdicts findings.md computed (findings.judged)
        write_html(
            out,
            html_page(
                ctx,
                con,
                experiment,
                registry,
                methods,
                figures,
                out / "figures",
                figure_captions(ref.name),
                report={
                    "kind": kind,
                    "rule": kind_rule,
                    "audit": checked,
                    "figures_not_asked": not_asked_text(not_asked),
                },
            ),
        )
    return {
        "kind": kind,
        "kind_rule": kind_rule,
        "tables": tables,
        "figures": figures,
        "figures_not_asked": not_asked,
        "methods": {t.label: None for t in methods},
        "metrics": {t.label: None for t in metric_tabs},
        "metric_only_runs": metric_only,
        "reference": ref.rule,
        "audit": checked,
    }, text


def report_kind(ctx, requested: str = "auto") -> tuple[str, str]:
    """``paper`` or ``experiment``, and the rule that chose it. ``auto`` picks the paper report
    when the experiment ran the paper's grid somewhere: the controlled construction (Table 1: both
    its interfaces), or on Natural-TOFU or LACUNA the Intervention Score and all ten frozen
    baselines under one objective (final split); anything else gets the experiment report, which
    shows only what was run."""
    if requested != "auto":
        return requested, f"{requested} report, chosen with --kind {requested}"
    ok = stats.usable(ctx.results.filter(pl.col("split") == "final"))
    controlled = ok.filter(pl.col("benchmark") == ctx.bench["controlled"])
    if {"backbone", "lora"} <= set(controlled["method"].to_list()):
        return "paper", (
            "paper report: the experiment ran the controlled construction (Table 1: both frozen "
            "interfaces, backbone and LoRA)"
        )
    need = {DEFAULT_REFERENCE, *BASELINES}
    for key in ("natural", "lacuna"):
        d = ok.filter((pl.col("benchmark") == ctx.bench[key]) & (pl.col("variant") == "static"))
        for obj in d["objective"].unique().to_list():
            if need <= set(d.filter(pl.col("objective") == obj)["method"].to_list()):
                return "paper", (
                    f"paper report: the experiment ran the paper's grid on {ctx.bench[key]} "
                    f"({obj}: Intervention Score and the ten frozen baselines)"
                )
    return "experiment", (
        "experiment report: the experiment did not run the paper's grid (the controlled "
        "construction through both interfaces, or Intervention Score with the ten frozen "
        "baselines on Natural-TOFU or LACUNA), so the report shows only what it ran; --kind "
        "paper gives the paper's tables"
    )


def audit_summary(con, experiment: str | None, spec=None) -> dict:
    """The audit's result as the report shows it (``registry.audit``): PASS/FAIL and each check's
    count. Without the experiment's spec the expected grid is the one its runs imply (every field x
    objective x method x seed any run has), which may count cells the experiment never asked for:
    the line says so."""
    if experiment is None:
        return {"ok": None, "line": "not run: the registry holds no runs", "checks": {}}
    rep = audit(con, experiment, spec)
    checks = {c.title: len(rep.findings.get(c.name, [])) for c in AUDIT_CHECKS}
    found = ", ".join(f"{k}: {v}" for k, v in checks.items() if v)
    line = (
        f"{'PASS' if rep.ok else 'FAIL'}: {rep.observed_cells} of {rep.expected} expected cells "
        "present" + ("" if rep.ok else f"; {found}")
    )
    if spec is None:
        line += (
            " (without the experiment's spec, pass --spec: the expected grid is inferred from the "
            "runs, so missing cells may be cells the experiment never asked for)"
        )
    return {"ok": rep.ok, "line": line, "checks": checks, "spec": spec is not None}


def _experiment_of(con, registry, experiment: str | None) -> str | None:
    """The experiment the report covers: the one named, which the registry must hold, or the
    registry's only one (None for an empty registry)."""
    exps = [r[0] for r in con.execute("SELECT DISTINCT experiment FROM runs ORDER BY 1").fetchall()]
    if experiment is None and len(exps) > 1:
        raise RegistryError(
            f"registry '{registry}' holds {len(exps)} experiments ({', '.join(exps)}); "
            "a report covers one: pass --experiment NAME"
        )
    if experiment is not None and exps and experiment not in exps:
        raise RegistryError(
            f"no experiment '{experiment}' in registry '{registry}'; it holds: {', '.join(exps)}"
        )
    return experiment or (exps[0] if exps else None)


def _inputs(labels) -> str:
    """LaTeX \\input lines for the tables ``labels``, a page break after every third."""
    return "\n".join(
        f"\\input{{tables/{file_name(label)}}}\n\\clearpage"
        if i % 3 == 2
        else f"\\input{{tables/{file_name(label)}}}"
        for i, label in enumerate(labels)
    )


def _paper_tex(
    registry,
    experiment: str | None,
    reference_rule: str,
    methods,
    metric_tabs,
    figures: dict,
    no_j: str,
    paper: bool = True,
    head: str = "",
    not_asked: dict | None = None,
    reference: str = "the reference",
) -> str:
    """paper.tex: every table \\input and every figure included (or why it was not drawn; in an
    experiment report those it never asked for in one line); the paper's tables only in a paper
    report."""
    captions = figure_captions(reference)
    figs = "\n".join(
        FIGURE_TEX % (name, captions.get(name, tex(name)))
        if why is None
        else f"\\paragraph{{{tex(name)}}} not drawn: {tex(why)}.\n"
        for name, why in figures.items()
    )
    if not_asked:
        figs += f"\n\n{tex(not_asked_text(not_asked))}\n"
    return PAPER_TEX % (
        f": \\texttt{{{tex(experiment)}}}" if experiment else "",
        tex(str(registry)),
        tex(head.replace("−", "-")),
        tex(reference_rule),
        _inputs([t.label for t in methods]) or no_j,
        _inputs([t.label for t in metric_tabs])
        or "No run of the experiment carries metrics beyond $J$.",
        figs,
        "\\clearpage\n\\section*{The paper's tables}\n" + _inputs(TABLES) if paper else "",
    )


def _markdown_head(
    registry,
    experiment: str | None,
    ctx,
    metric_only: int,
    reference_rule: str,
    kind_rule: str = "",
    checked: dict | None = None,
) -> list[str]:
    """report.md's opening: the registry and experiment, the kind of report, the runs counted, the
    audit's result, the reference and the sign convention."""
    return [
        f"# supportbench report\n\nRegistry: `{registry}`"
        + (f", experiment `{experiment}`" if experiment else ""),
        f"\nKind: {kind_rule}." if kind_rule else "",
        "\nRuns in the registry view (`results`: runs with J, and runs not ok): "
        f"{ctx.results.height} ({ctx.results.filter(ctx.results['status'] != 'ok').height} not ok; "
        "missing runs are never imputed — see `supportbench audit`).",
        f"\nAudit (`supportbench audit`): {checked['line']}." if checked else "",
        f"\nMetric-only runs (ok, no J; e.g. imported with `registry import`): {metric_only}. They "
        "are left out of every J statistic and table and appear in the metric tables below.",
        "\n## Methods of this experiment\n",
        f"{J_MEANING}.\n",
        f"Reference: {reference_rule}. ΔJ = J(method) − J(reference) on matched units (same "
        "field, objective, seed and θ0 build): **positive = better than the reference**, in every "
        "table and figure of this report; W/T/L counts the method's wins, ties and losses against "
        "the reference. Every mean carries its 95% t interval.\n",
    ]


def _markdown_method_and_metric_tables(methods, metric_tabs, no_j: str) -> list[str]:
    """report.md's per-method tables and metric tables (or why there are none)."""
    md = []
    for t in methods:
        md += [
            f"### `{t.label}` ([tables/{file_name(t.label)}](tables/{file_name(t.label)}))\n",
            *render_markdown(t),
            "",
        ]
    if not methods:
        md.append(no_j.replace("$J$", "J") + "\n")
    md += [
        "\n## Metrics beyond J\n",
        "Median of each metric over a method's runs (seeds and fields pooled), n runs, in brackets "
        "the runs carrying a metric where fewer; source: record (this harness's runs) or imported "
        "(`registry import`).\n",
    ]
    for t in metric_tabs:
        md += [
            f"### `{t.label}` ([tables/{file_name(t.label)}](tables/{file_name(t.label)}))\n",
            *metrics_markdown(t),
            "",
        ]
    if not metric_tabs:
        md.append("No run of the experiment carries metrics beyond J.\n")
    return md


def _markdown_paper_tables(ctx, out: Path, tables: dict) -> list[str]:
    """report.md's list of the paper's tables, rendered or missing; with Table 1 rendered, also
    controlled.md (Table 1 as text), which it links."""
    md = ["\n## The paper's tables\n", "| label | file | status |", "|---|---|---|"]
    for label, why in tables.items():
        md.append(
            f"| `{label}` | [tables/{file_name(label)}](tables/{file_name(label)}) | "
            f"{'rendered' if why is None else 'missing: ' + why} |"
        )
    if "tab:controlled-main" in tables and tables["tab:controlled-main"] is None:
        # Table 1 as text, as `supportbench run --benchmark controlled` prints it (one rendering)
        lines = controlled_text(ctx)
        write_text_atomic(out / "controlled.md", "\n".join(["```", *lines, "```", ""]))
        md.append(
            "\n[controlled.md](controlled.md): Table 1 and the frozen decisions behind it as text, "
            "as `supportbench run --benchmark controlled` prints them."
        )
    return md


def _markdown_gates(ctx, kind: str) -> list[str]:
    """report.md's construction gates (the page's), where the experiment ran the construction."""
    gates = gates_part(ctx, kind)
    if gates is None:
        return []
    md = ["\n## Construction gates (controlled benchmark)\n"]
    if not gates["rows"]:
        why = gates["missing"] or "the controlled runs record no θ0 recall"
        return md + [f"No construction gates: {why}.\n"]
    md += ["| gate | result | value | rule |", "|---|---|---|---|"]
    for g in gates["rows"]:
        result = "passed" if g["passed"] else "FAILED"
        md.append(f"| {g['gate']} | {result} | {g['value']} | {g['rule']} |")
    return md


def not_asked_text(not_asked: dict) -> str:
    """The one line an experiment report gives the figures its runs do not allow."""
    if not not_asked:
        return ""
    return (
        "Not drawn, as this experiment has none of the runs they need: "
        + "; ".join(f"{name} ({why})" for name, why in not_asked.items())
        + "."
    )


def _markdown_figures(figures: dict, not_asked: dict | None = None) -> list[str]:
    """report.md's list of the figures, rendered or missing (an experiment report: those it never
    asked for in one line), and how paper.tex builds one document."""
    md = ["\n## Figures\n"]
    if figures:
        md += ["| figure | files | status |", "|---|---|---|"]
    for name, why in figures.items():
        files = f"[png](figures/{name}.png), [pdf](figures/{name}.pdf)" if why is None else "-"
        md.append(f"| {name} | {files} | {'rendered' if why is None else 'missing: ' + why} |")
    if not_asked:
        md.append(("\n" if figures else "") + not_asked_text(not_asked))
    md.append(
        "\n`paper.tex` inputs every table and includes every figure: `pdflatex paper.tex` in this "
        "folder (or `supportbench report --pdf`) builds one document.\n"
    )
    return md
