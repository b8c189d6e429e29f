"""Which of the pre-registered claims one experiment's registry supports, with the numbers that
decided it.

Written by ``supportbench report`` as ``findings.md`` (and by ``--findings PATH`` wherever asked).
The claims are the ones the experiment registered before its first run (``experiments.claims``);
each verdict is ``reports.verdicts``': a statistic, its interval over theta_0 builds, its threshold,
its power, and one of holds / does not hold / inconclusive / not tested. It reports; it never tunes.
"""

from __future__ import annotations

import hashlib
import json

from supportbench._io import loads_json
from supportbench.experiments.claims import Claims
from supportbench.experiments.claims import load as load_claims
from supportbench.experiments.claims import parse as parse_claims
from supportbench.experiments.identity import source_hash
from supportbench.registry import ledger
from supportbench.reports import tables, verdicts


def registered_claims(con, experiment: str | None) -> tuple[Claims, str]:
    """The claims ``experiment`` is judged on: the claims decision registered for it in the registry
    (what the sweep froze before its first run), else the shipped claims file, said to be
    unregistered."""
    if con is not None:
        rows = con.execute(
            """SELECT content, frozen_at::VARCHAR FROM decisions
            WHERE json_extract_string(content, '$.kind') = 'claims'
              AND ($exp IS NULL OR json_extract_string(content, '$.experiment') = $exp)
            ORDER BY frozen_at""",
            {"exp": experiment},
        ).fetchall()
        if rows:
            dec = json.loads(rows[0][0])
            return (
                parse_claims(dec["text"], dec.get("source") or "registered claims"),
                f"registered for the experiment at {rows[0][1]} UTC, "
                f"{_order(con, experiment, dec['hash'])} (claims decision `{dec['hash'][:12]}`)",
            )
    claims = load_claims()
    return claims, (
        "**not registered** in this registry (the runs were not made by a sweep that registers its "
        "claims first): judged under the shipped claims file, which proves nothing about when it "
        "was written"
    )


def _order(con, experiment: str | None, claims_hash: str) -> str:
    """When the claims were frozen relative to the first final run's start, as the records date
    them (the audit's own rule; review: the sentence said 'before' without looking)."""
    from supportbench.registry.audit import claims_order

    first = claims_order(con, experiment, claims_hash)
    if first is None or first[0] is None:
        return "before any final run (none records its start)"
    if first[1]:
        return (
            f"**after its first final run started** ({first[0]}): `supportbench audit` fails this "
            "experiment, and these verdicts are not pre-registered"
        )
    return f"before its first final run started ({first[0]})"


def statistic_text(v: verdicts.Verdict, per_setting: str = "per setting (below)") -> str:
    """A verdict's statistic with its interval (a count: how many comparisons lie above 0); a
    verdict decided setting by setting has none of its own and says where its settings are
    listed (``per_setting``: below the table in findings.md, in the page's "numbers" box)."""
    if v.statistic is None:
        return per_setting if v.detail else "n/a"
    if v.claim.kind == "count":
        return (
            f"{v.statistic:.0f} of {v.total} with an interval above 0 [at most {v.interval[1]:.0f} "
            f"can be positive]; required {v.claim['required']}"
        )
    ci = f" [{v.interval[0]:+.3f}, {v.interval[1]:+.3f}]" if v.interval else ""
    return f"{v.statistic:+.3f}{ci}"


def _per_build_table(v: verdicts.Verdict) -> list[str]:
    if not v.per_build:
        return []
    out = [
        "",
        "| build | n | statistic | interval | verdict (interval rule alone) |",
        "|---|---|---|---|---|",
    ]
    for b in v.per_build:
        st = (
            "-"
            if b["statistic"] is None
            else (f"{b['statistic']:.0f}" if v.claim.kind == "count" else f"{b['statistic']:+.4f}")
        )
        iv = b["interval"]
        iv = (
            "-"
            if iv is None
            else (
                f"{iv[0]:.0f}..{iv[1]:.0f} comparisons"
                if v.claim.kind == "count"
                else f"[{iv[0]:+.4f}, {iv[1]:+.4f}]"
            )
        )
        out.append(f"| {b['build']} | {b['n']} | {st} | {iv} | {b['verdict']} |")
    return out


def _design_line(judged: list, defaults: dict) -> list[str]:
    """What the design can decide: a claim whose power is below its minimum cannot read 'does not
    hold', so where that is every powered claim, no claim could have been refuted at this scale."""
    low = [
        v.power
        for v in judged
        if v.power is not None and v.power < v.claim.settings(defaults)["power"]
    ]
    powered = [v for v in judged if v.power is not None]
    if not powered or len(low) < len(powered):
        return []
    return [
        "",
        f"**This design cannot refute any claim**: every claim's power at its effect of interest "
        f"({min(low):.2f}-{max(low):.2f}) is below its stated minimum, so none can read 'does not "
        "hold'; an 'inconclusive' here says this experiment is too small to decide, not that a "
        "claim fails. Deciding them needs more builds, seeds or units (each claim's detectable "
        "effect says how large an effect this design would see).",
    ]


def judged(
    ctx: tables.Context, con=None, experiment: str | None = None
) -> tuple[Claims, str, list[verdicts.Verdict]]:
    """The claims ``experiment`` is judged on, how they were registered, and every claim's verdict;
    computed once per report (``ctx``): findings.md and index.html show the same verdicts."""
    got = ctx.built_for(_judged, con, experiment)
    return got["claims"], got["registered"], got["verdicts"]


def _judged(ctx: tables.Context, con, experiment: str | None) -> dict:
    claims, registered = registered_claims(con, experiment)
    return {
        "claims": claims,
        "registered": registered,
        "verdicts": verdicts.judge(claims, ctx, con),
    }


def findings(
    ctx: tables.Context,
    con=None,
    experiment: str | None = None,
    registry: str = "",
    kind: str = "paper",
) -> str:
    """findings.md: every registered claim's verdict (``reports.verdicts``) with the numbers that
    decided it. In an experiment report (``kind="experiment"``) only the claims the experiment's
    runs can judge are graded; those whose runs it never produced are named in one line."""
    stamp = registry_stamp(con, experiment) if con is not None else None
    claims, registered, verdict_list = judged(ctx, con, experiment)
    d = claims.defaults
    asked, left = split_asked(verdict_list, ctx, kind)
    out = [
        "# Findings: the paper's claims at this registry's scale"
        if kind == "paper"
        else f"# Findings of experiment `{experiment}`",
        "",
        *_experiment_preamble(verdict_list, asked, left, kind),
        f"Generated by `supportbench report` from `{registry}`"
        + (f", experiment `{experiment}`" if experiment else "")
        + ". Do not edit by hand: "
        "regenerate it. Methods, defaults and seeds were fixed before "
        "the outcomes they judge; these rules were registered before this registry's runs, "
        "after earlier demos' verdicts had been seen "
        '(docs/benchmarks.md, "Decision log", says what was seen at each choice).',
        "",
        f"Claims: `{claims.source}`, sha256 `{claims.hash[:16]}`, {registered}. Each verdict is "
        "one of holds / does not hold / inconclusive / not tested; pooled intervals are "
        f"{d['level']:.0%} t intervals on the theta_0 builds' own statistics (df = builds - 1; "
        "the standard error floored by one build's sampling error), per-build intervals t "
        "intervals over units for a mean, else percentile intervals of a hierarchical bootstrap "
        f"over seeds and units ({d['n_boot']} resamples); a claim needs at least {d['builds']} "
        "builds, and a "
        f"'does not hold' needs power {d['power']:.0%} at its effect of interest (a mean: d_z = "
        f"{d['effect_dz']}), else it reads inconclusive "
        '(docs/reports.md, "Verdicts", states each rule). Signs: every difference of two '
        "methods in this report is method − reference (positive: the method did better than "
        "its reference) and names both: a claim's method is the one the paper claims for, its "
        "reference the method it is compared with (npo: Intervention Score + DIR-R − Random); "
        "a table's method is its row, its reference the one its caption names (C − DIR-R in the "
        "paper's tables).",
        "",
    ]
    if asked:
        out += [
            "| claim | verdict | statistic [interval] | power | detectable effect |",
            "|---|---|---|---|---|",
        ]
    else:
        out.append("None of the claims can be judged on this experiment's runs.")
    for v in asked:
        power = "-" if v.power is None else f"{v.power:.2f}"
        out.append(
            f"| {v.claim.title} | {v.verdict} | {statistic_text(v)} | {power} | "
            f"{v.detectable or '-'} |"
        )
    out += _design_line(asked, d)
    for v in asked:
        c = v.claim
        why, detail = shown(v, kind)
        out += [
            "",
            f"## {c.title}",
            "",
            f"**{v.verdict}.** {why}.",
            "",
            f"- statistic: {c.statistic}",
            f"- comparator / null: {c.comparator}",
            f"- unit: {c.unit}; replication: {c.replication}; preconditions: "
            f"{'; '.join(c.preconditions)}",
        ]
        if v.power is not None:
            out.append(
                f"- power at the effect of interest: {v.power:.2f} (minimum "
                f"{c.settings(d)['power']:.2f}); "
                f"detectable effect: {v.detectable or 'n/a'}"
            )
        out += [f"- {line}" if not line.startswith("  ") else line for line in detail]
        out += _per_build_table(v)
    if stamp:
        stamp["claims"] = claims.hash
        out += ["", "## Provenance", "", stamp_text(stamp)]
        # the stamp vouches for the text around it: a findings.md edited by hand is no longer the
        # report's
        stamp["body"] = body_hash("\n".join(out) + "\n")
        out[-1] = stamp_text(stamp)
    return "\n".join(out) + "\n"


def shown(v: verdicts.Verdict, kind: str) -> tuple[str, list[str]]:
    """A verdict's why and detail as a report of ``kind`` prints them: an experiment report says
    only how many of a claim's comparisons it never ran (``Verdict.scoped``)."""
    return v.scoped if kind != "paper" and v.scoped else (v.why, v.detail)


def split_asked(verdict_list: list, ctx: tables.Context, kind: str) -> tuple[list, list]:
    """The verdicts a report grades and the claims' titles it only names. A paper report grades
    every claim; an experiment report leaves out a claim the registry lacks the runs for
    (``absent``), whose benchmark the experiment ran no final ok run on, or none of whose
    comparisons it ran (``verdicts.comparisons``: an arm of each has no run)."""
    if kind == "paper":
        return verdict_list, []
    ok = ctx.results.filter((ctx.results["split"] == "final") & (ctx.results["status"] == "ok"))
    ran = set(ok["benchmark"].unique().to_list()) if ok.height else set()
    asked = [
        v
        for v in verdict_list
        if not v.absent
        and v.claim.benchmark in ran
        and len(v.unrun) < (len(verdicts.comparisons(v.claim)) or 1)
    ]
    kept = {id(v) for v in asked}
    return asked, [v.claim.title for v in verdict_list if id(v) not in kept]


def _experiment_preamble(verdict_list: list, asked: list, left: list, kind: str) -> list[str]:
    """An experiment report's opening lines: what it grades and which claims it leaves out."""
    if kind == "paper":
        return []
    return [
        "An experiment report: this experiment did not run the paper's grid, so only the paper's "
        f"claims its runs can judge are graded here ({len(asked)} of {len(verdict_list)})."
        + (
            f" Not asked by this experiment (no runs of what they need): {'; '.join(left)}."
            if left
            else ""
        ),
        "",
    ]


def _is_stamp_line(line: str) -> bool:
    return line.startswith(f"<!-- {STAMP_MARK} ") and line.endswith(" -->")


def body_hash(text: str) -> str:
    """sha256 of a findings.md's every line but its stamp line (which holds this hash)."""
    return hashlib.sha256(
        "\n".join(ln for ln in text.splitlines() if not _is_stamp_line(ln)).encode()
    ).hexdigest()


STAMP_MARK = "supportbench-stamp"


def stamp_text(stamp: dict) -> str:
    """Human-readable provenance plus one machine-readable line (``read_stamp``)."""
    theta0 = (
        "; ".join(f"{b} {', '.join(h[:12] for h in hs)}" for b, hs in stamp["theta0"].items())
        or "none"
    )
    return (
        f"{stamp['records']} records (registry digest `{stamp['registry']}`); code fingerprints of "
        f"the runs: {len(stamp['fingerprints'])} distinct; θ0: {theta0}; CPU kernels of the runs "
        f"(cpu_mode): {_cpu_modes(stamp)}; reports code "
        f"`{stamp['reports_code']}`.\n\n<!-- {STAMP_MARK} {json.dumps(stamp, sort_keys=True)} -->"
    )


def _cpu_modes(stamp: dict) -> str:
    """``native-avx2 (948 runs)``; a stamp written before the CPU modes were kept says so."""
    modes = stamp.get("cpu_modes")
    if modes is None:
        return "not kept by this stamp"
    return ", ".join(f"{m} ({n} run{'s' if n != 1 else ''})" for m, n in modes.items()) or "none"


def read_stamp(text: str) -> dict | None:
    """The stamp's fields, or None when there is none or it is not a JSON object (read strictly: a
    hand-made stamp nested 200,000 deep is not one)."""
    for line in text.splitlines():
        if _is_stamp_line(line):
            try:
                stamp = loads_json(line[len(f"<!-- {STAMP_MARK} ") : -len(" -->")])
            except ValueError:
                return None
            return stamp if isinstance(stamp, dict) else None
    return None


# a run whose CPU mode the registry lacks: its record names none, or it was stored before the
# registry kept the mode (ingest skips an unchanged record; a new registry ingested from the
# records has every mode they name)
UNKNOWN_MODE = "unknown"


def columns(con, table: str) -> set[str]:
    """The columns ``table`` has in this registry (an older file may lack later ones); a temp
    table or an attached database's table of that name does not count."""
    return {
        r[0]
        for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = $t "
            "AND database_name = current_database() AND schema_name = current_schema()",
            {"t": table},
        ).fetchall()
    }


def column_or_null(con, alias: str, table: str, column: str) -> str:
    """``alias.column`` where ``table`` has it, else ``NULL AS column``: a registry made before
    ``migrate`` added the column and opened read-only (as a report opens it) is never migrated."""
    return f"{alias}.{column}" if column in columns(con, table) else f"NULL AS {column}"


def registry_stamp(con, experiment: str | None) -> dict:
    """What a report was made from: the registry's content (a digest of its runs' keys and content
    hashes, and the head of its ingest log), the code fingerprints of those runs, their theta_0
    hashes, the CPU kernels they computed with (records' ``provenance.cpu_mode``: theta_0's bits,
    so every outcome, differ between CPU kinds; ``supportbench._cpumode``), and the reports code
    itself."""
    where = "WHERE r.experiment = $exp" if experiment else ""
    params = {"exp": experiment} if experiment else None
    fingerprint, mode = (
        column_or_null(con, "p", "provenance", c) for c in ("fingerprint", "cpu_mode")
    )
    rows = con.sql(
        f"SELECT r.run_key, r.content_hash, r.benchmark, {fingerprint}, p.model_hash, {mode} "
        f"FROM runs r LEFT JOIN provenance p USING (run_key) {where} ORDER BY r.run_key",
        params=params,
    ).fetchall()
    digest = hashlib.sha256("".join(f"{k}:{h}\n" for k, h, *_ in rows).encode()).hexdigest()[:16]
    theta0: dict[str, list[str]] = {}
    cpu_modes: dict[str, int] = {}
    for _, _, b, _, m, mode in rows:
        if m and m not in theta0.setdefault(b, []):
            theta0[b].append(m)
        cpu_modes[mode or UNKNOWN_MODE] = cpu_modes.get(mode or UNKNOWN_MODE, 0) + 1
    return {
        "records": len(rows),
        "registry": digest,
        "fingerprints": sorted({f for _, _, _, f, *_ in rows if f}),
        "cpu_modes": dict(sorted(cpu_modes.items())),
        "theta0": {b: sorted(v) for b, v in sorted(theta0.items())},
        "ingest_log_head": ledger.head(
            con
        ),  # pins the registry as it was (docs/registry.md, threat model)
        "reports_code": source_hash("reports"),
    }
