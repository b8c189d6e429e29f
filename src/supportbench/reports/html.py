"""``index.html``: the report as one self-contained page (``supportbench report --html``).

Everything is inlined -- the data as table cells, the CSS, a small sorting script, and the report's
PNG figures as ``data:image/png;base64`` URIs -- so the page opens from a file with no server and no
network. It shows what the report already computed, never a statistic of its own: the overview and
provenance (``findings.registry_stamp``), one leaderboard per benchmark x objective from the
per-method tables (``overview.method_tables``: mean J with its 95% t interval, SD, median, and the
paired gap to the reference), the claims' verdicts (``findings.judged``), the construction gates
(``tables.controlled_main``), the DIR-R gate decisions per run (``gate_events``), a per-run identity
table and the figures.

Sign convention: the page shows ΔJ = J(method) − J(reference) on matched units (positive: better
than the reference) and the method's W/T/L against the reference, as report.md, the per-method LaTeX
tables and the figures do (``overview``: one convention per report). Every text
that comes from the registry is HTML-escaped (Jinja autoescape).

Self-test: opened as ``index.html#selftest``, the page records window errors and console.error
calls, sorts the first sortable table by its first numeric column ascending then descending and
checks the order, checks that every image decoded with a width and drew more than one colour, and
writes the result as JSON (keys errors, sorted, images, ok) into ``<pre id="selftest-result">``
(tests/integration/test_report_browser.py reads it from headless Chromium).
"""

from __future__ import annotations

import base64
import math
import re
from pathlib import Path

import polars as pl
from jinja2 import Environment, StrictUndefined

from supportbench._io import write_text_atomic
from supportbench.reports.findings import (
    column_or_null,
    columns,
    judged,
    registry_stamp,
    shown,
    split_asked,
    statistic_text,
)
from supportbench.reports.latex import OBJECTIVE_NAMES, template_text
from supportbench.reports.names import J_MEANING
from supportbench.reports.overview import MethodTable, has_reference, reference_of
from supportbench.reports.tables import Context, Missing, controlled_main

PAGE = "report.html.j2"
ROW_LIMIT = 5000  # per-run tables list at most this many runs; the page says how many it left out
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ---- formatting (Jinja filters) ------------------------------------------------------------------
def num(x, digits: int = 4) -> str:
    """A number as text; an absent or non-finite one as an en dash."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{_unsigned_zero(x, digits):.{digits}f}".replace("-", "−")


def signed(x, digits: int = 4) -> str:
    """A gap with its sign (+ / −)."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{_unsigned_zero(x, digits):+.{digits}f}".replace("-", "−")


def _unsigned_zero(x, digits: int):
    """0 for what rounds to zero at ``digits``: no "−0.0000" for a gap of −1e-12."""
    return 0.0 if round(x, digits) == 0 else x


def interval(ci, digits: int = 4, sign: bool = False) -> str:
    """A 95% interval as ``[lo, hi]``; ``n/a (n < 2)`` where it is undefined."""
    if ci is None:
        return "[n/a: n < 2]"
    f = signed if sign else num
    return f"[{f(ci[0], digits)}, {f(ci[1], digits)}]"


def sort_key(x) -> str:
    """A cell's ``data-sort`` value: the number, or empty (sorted last) where there is none."""
    if x is None or isinstance(x, bool) or (isinstance(x, float) and not math.isfinite(x)):
        return ""
    return repr(float(x))


def detex(text: str) -> str:
    """A LaTeX caption as plain text (the figure captions report.py writes into paper.tex)."""
    text = text.replace("$\\Delta J$", "ΔJ").replace("~", " ")
    text = re.sub(r"\\([%_&#])", r"\1", text)  # LaTeX's escaped characters, as printed
    return re.sub(r"\$([^$]*)\$", r"\1", text)


def plain(md: str) -> str:
    """A Markdown sentence of findings.md as plain text."""
    return md.replace("**", "").replace("`", "")


def environment() -> Environment:
    env = Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=True)
    env.filters.update(
        num=num, signed=signed, interval=interval, sort_key=sort_key, objective=_objective
    )
    return env


def _objective(key: str) -> str:
    return OBJECTIVE_NAMES.get(key, key)


# ---- the page's parts ----------------------------------------------------------------------------
def leaderboards(methods: list[MethodTable], reference: str) -> list[dict]:
    """One leaderboard per benchmark (and split) x objective from the per-method tables (ΔJ =
    method − reference, positive: better than the reference)."""
    out = []
    for t in methods:
        if t.kind != "methods":
            continue
        for obj in dict.fromkeys(r["objective"] for r in t.rows):  # the table's order
            rows = [_leader_row(r) for r in t.rows if r["objective"] == obj]
            where = t.benchmark + ("" if t.split == "final" else f" ({t.split} split)")
            out.append(
                {
                    "id": f"lb-{len(out) + 1}",
                    "benchmark": t.benchmark,
                    "split": t.split,
                    "objective": obj,
                    "title": f"{where} · {_objective(obj)}",
                    "reference": reference,
                    # False: the reference never ran under this objective here, no ΔJ columns
                    "paired": has_reference(rows),
                    "rows": rows,
                }
            )
    return out


def _leader_row(r: dict) -> dict:
    """A per-method table row as the page shows it (ΔJ = method − reference, the method's W/T/L,
    as every table of the report)."""
    keys = ("name", "arm", "is_ref", "n", "mean", "ci", "sd", "median", "delta", "delta_ci")
    return {
        **{k: r[k] for k in keys},
        "median_delta": r["median_delta"],
        "wtl": r["wtl"],
        "note": r["note"],
        "evaluation": r.get("evaluation", 0),
    }


def dirr_rows(methods: list[MethodTable]) -> list[dict]:
    """The per-method DIR-R table's rows (DIR-R − static on matched units)."""
    return [r for t in methods if t.kind == "dirr" for r in t.rows]


def claims_part(ctx: Context, con, experiment: str | None, kind: str = "paper") -> dict:
    """The registered claims and their verdicts, as findings.md has them (computed once); in an
    experiment report only those its runs can judge, the others named in ``not_asked``."""
    claims, registered, verdict_list = judged(ctx, con, experiment)
    verdict_list, left = split_asked(verdict_list, ctx, kind)
    return {
        "not_asked": left,
        "source": claims.source,
        "hash": claims.hash[:16],
        "registered": plain(registered),
        "rows": [_claim_row(v, kind) for v in verdict_list],
    }


def _claim_row(v, kind: str) -> dict:
    why, numbers = shown(v, kind)
    return {
        "title": v.claim.title,
        "verdict": v.verdict,
        "statistic": statistic_text(v, per_setting="per setting (under numbers)"),
        "power": v.power,
        "detectable": v.detectable,
        "why": why,
        # the numbers findings.md lists under the claim (one line each, nesting dropped)
        "detail": [line.strip().removeprefix("- ") for line in numbers],
    }


def gates_part(ctx: Context, kind: str = "paper") -> dict | None:
    """The controlled construction's validity gates (Table 1's), or why there are none; None in an
    experiment report of an experiment that never ran the construction (nothing it asked for)."""
    try:
        return {"rows": ctx.built(controlled_main).get("gates", []), "missing": None}
    except Missing as m:
        ran = ctx.results.filter(pl.col("benchmark") == ctx.bench["controlled"]).height
        return None if kind != "paper" and not ran else {"rows": [], "missing": str(m)}


def _query(con, sql: str, experiment: str | None) -> tuple[list[dict], int]:
    """The rows of ``sql`` (which selects from ``runs r``, with a ``{where}`` slot) for the
    experiment, at most ROW_LIMIT of them, and how many there are."""
    where = "WHERE r.experiment = $exp" if experiment else ""
    params = {"exp": experiment} if experiment else None
    query = sql.format(where=where)
    total = con.execute(f"SELECT count(*) FROM ({query})", params).fetchall()[0][0]
    df = con.sql(f"{query} LIMIT {ROW_LIMIT}", params=params).pl()
    return df.to_dicts(), total


def gate_events_part(con, experiment: str | None, kind: str = "paper") -> dict | None:
    """Each DIR-R run's gate decision: its probe signal against tau, whether it triggered, the
    candidate rho it chose and on which split it selected; None in an experiment report of an
    experiment that ran no DIR-R (nothing it asked for)."""
    build = "r.build" if "build" in columns(con, "runs") else "0::BIGINT AS build"
    rows, total = _query(
        con,
        f"""SELECT r.run_key, r.benchmark, r.split, {build}, r.field, r.objective, r.method,
        r.seed, g.decision_hash, g.tau, g.probe_signal, g.triggered, g.chosen_rho, g.selection,
        g.complete FROM gate_events g JOIN runs r USING (run_key) {{where}}
        ORDER BY r.benchmark, r.split, r.method, r.objective, r.field, r.seed, r.run_key""",
        experiment,
    )
    if kind != "paper" and not total:
        return None
    return {"rows": rows, "total": total, "limit": ROW_LIMIT}


def identity_part(con, experiment: str | None) -> dict:
    """What identifies each run: its key, its spec's fields, the fingerprint of the code behind it
    and the theta_0 (model) and data hashes."""
    build = "r.build" if "build" in columns(con, "runs") else "0::BIGINT AS build"
    rows, total = _query(
        con,
        f"""SELECT r.run_key, r.benchmark, {build}, r.field, r.objective, r.method, r.variant,
        r.seed, r.split, r.budget, r.horizon, r.checkpoint, r.model, o.status,
        {column_or_null(con, "p", "provenance", "fingerprint")}, p.model_hash, p.data_hash
        FROM runs r LEFT JOIN outcomes o USING (run_key)
        LEFT JOIN provenance p USING (run_key) {{where}}
        ORDER BY r.benchmark, r.split, r.method, r.variant, r.objective, r.field, r.seed,
        r.run_key""",
        experiment,
    )
    return {"rows": rows, "total": total, "limit": ROW_LIMIT}


def figures_part(folder: Path, figures: dict, captions: dict) -> list[dict]:
    """Every figure the report rendered, its PNG inlined as a data: URI; the others with the reason
    they were not drawn."""
    out = []
    for name, why in figures.items():
        item = {"name": name, "caption": detex(captions.get(name, name)), "why": why, "src": None}
        if why is None:
            data = (folder / f"{name}.png").read_bytes()
            if not data.startswith(PNG_MAGIC):
                raise ValueError(f"figure '{folder / name}.png' is not a PNG file")
            item["src"] = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        out.append(item)
    return out


# ---- the page ------------------------------------------------------------------------------------
def page(
    ctx: Context,
    con,
    experiment: str | None,
    registry,
    methods: list[MethodTable],
    figures: dict,
    figure_folder: Path,
    captions: dict,
    report: dict | None = None,
) -> str:
    """index.html's text for one experiment of the registry (``report._write`` computed
    ``methods``, ``figures`` and ``report``: the report's kind, the rule that chose it and the
    audit's summary; the findings are reused from ``findings.judged``)."""
    report = report or {"kind": "paper", "rule": None, "audit": None}
    ref = reference_of(ctx)
    stamp = registry_stamp(con, experiment)
    ok = ctx.results.filter(pl.col("status") == "ok") if not ctx.results.is_empty() else ctx.results
    overview = {
        "registry": str(registry),
        "experiment": experiment,
        "records": stamp["records"],
        "digest": stamp["registry"],
        "fingerprints": stamp["fingerprints"],
        "theta0": stamp["theta0"],
        "cpu_modes": stamp["cpu_modes"],
        "reports_code": stamp["reports_code"],
        "ingest_log_head": stamp["ingest_log_head"],
        "results": ctx.results.height,
        "not_ok": ctx.results.height - ok.height,
        "reference_rule": ref.rule,
        "kind_rule": report["rule"],
        "audit": report["audit"],
        "j_meaning": J_MEANING,
    }
    return (
        environment()
        .from_string(template_text(PAGE))
        .render(
            overview=overview,
            reference=ref.name,
            leaderboards=leaderboards(methods, ref.name),
            dirr=dirr_rows(methods),
            claims=claims_part(ctx, con, experiment, report["kind"]),
            gates=gates_part(ctx, report["kind"]),
            gate_events=gate_events_part(con, experiment, report["kind"]),
            identity=identity_part(con, experiment),
            figures=figures_part(figure_folder, figures, captions),
            figures_not_asked=report.get("figures_not_asked", ""),
        )
    )


def write_html(out: Path, text: str) -> Path:
    """Write the page into the report folder ``out`` (the staging folder, before its marker)."""
    return write_text_atomic(out / "index.html", text)
