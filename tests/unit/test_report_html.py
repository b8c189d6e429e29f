"""`supportbench report --html` (issue 36): index.html, written only when asked, is self-contained
(nothing loaded from elsewhere, figures inlined as PNG data: URIs), escapes the names it takes from
the registry, names the reference in every leaderboard caption, shows every mean with its interval,
and its numbers are the ones numpy/scipy compute from the runs' J."""

import base64
import json
import math
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from supportbench.cli import main
from supportbench.registry import synthetic as syn
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect
from supportbench.reports import html as html
from supportbench.reports import stats
from supportbench.reports.ownership import MARKER
from supportbench.reports.report import report

EVIL = "<script>alert(1)</script>"  # a method name from a user's file
FIELDS, SEEDS = ("Email_Address", "Phone_Number"), (1, 2, 3)


def _ref_J(i: int) -> float:
    return 0.5 + 0.25 * i


def _evil_J(i: int) -> float:  # paired gaps vary, so the interval has a width
    return _ref_J(i) + (0.1, -0.3, 0.45, 0.05, 0.2, -0.15)[i]


def _units():
    return [(f, s) for f in FIELDS for s in SEEDS]


def _registry(tmp_path: Path, dirr: bool = False, status: str = "ok") -> Path:
    """Intervention Score (the reference) and a method named EVIL under NPO on LACUNA, 6 units; with
    ``dirr`` also Intervention Score's DIR-R runs (half of them triggered)."""
    res = tmp_path / "res"
    for i, (f, s) in enumerate(_units()):
        common = dict(experiment="e", benchmark="lacuna", field=f, objective="npo", seed=s)
        syn.write(
            res, syn.record(method="intervention_score", J=_ref_J(i), status=status, **common)
        )
        syn.write(res, syn.record(method=EVIL, J=_evil_J(i), status=status, **common))
        if dirr:
            trig = i % 2 == 0
            cands = {a: _ref_J(i) + (0.125 if trig and a == "0.05" else 0.0) for a in syn.ACTIONS}
            syn.write(
                res,
                syn.record(
                    method="intervention_score",
                    variant="dirr",
                    J=max(cands.values()),
                    candidates=cands,
                    triggered=trig,
                    probe_signal=0.5 if trig else 0.01,
                    decision_hash="d" * 64,
                    selection="development",
                    **common,
                ),
            )
    db = tmp_path / "r.duckdb"
    con = connect(db)
    ingest(con, res, allow_unknown=True)
    con.close()
    return db


class Tables(HTMLParser):
    """Every <table> of a page: its caption, header texts and rows of (text, attributes) cells; and
    every <img>'s and <script>'s attributes."""

    def __init__(self):
        super().__init__()
        self.tables, self.imgs, self.scripts, self.links = [], [], [], []
        self._cell = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"class": a.get("class", ""), "caption": "", "head": [], "rows": []})
        elif tag == "caption":
            self._cell = ["caption", ""]
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th"):
            self._cell = [tag, "", a]
        elif tag == "img":
            self.imgs.append(a)
        elif tag == "script":
            self.scripts.append(a)
        elif tag == "link":
            self.links.append(a)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data

    def handle_endtag(self, tag):
        if self._cell is None or tag not in ("td", "th", "caption"):
            return
        t = self.tables[-1]
        if tag == "caption":
            t["caption"] = self._cell[1].strip()
        elif tag == "th":
            t["head"].append(self._cell[1].strip())
            t["rows"].pop() if t["rows"] == [[]] else None
        else:
            t["rows"][-1].append((self._cell[1].strip(), self._cell[2]))
        self._cell = None


def _page(tmp_path: Path, **kw) -> tuple[str, Tables, dict]:
    st = report(_registry(tmp_path, **kw), tmp_path / "out", html=True)
    text = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    p = Tables()
    p.feed(text)
    return text, p, st


def _leaderboards(p: Tables) -> list[dict]:
    return [t for t in p.tables if "leaderboard" in t["class"]]


NUM = r"([−+]?\d+\.\d+)"


def _number(s: str) -> float:
    return float(s.replace("−", "-"))


def _mean_and_interval(cell: str) -> tuple[float, float, float]:
    m = re.fullmatch(NUM + r" \[" + NUM + ", " + NUM + r"\]", cell)
    assert m, f"no 'mean [lo, hi]' in {cell!r}"
    return tuple(_number(g) for g in m.groups())


def test_index_html_is_written_only_with_html(tmp_path):
    db = _registry(tmp_path)
    st = report(db, tmp_path / "plain")
    assert not (tmp_path / "plain" / "index.html").exists() and "html" not in st
    st = report(db, tmp_path / "page", html=True)
    assert st["html"] == tmp_path / "page" / "index.html" and st["html"].is_file()
    # the report's manifest lists the page, so the next report may replace the folder
    manifest = json.loads((tmp_path / "page" / MARKER).read_text())
    assert "index.html" in manifest["entries"]
    report(db, tmp_path / "page", html=True)
    assert (tmp_path / "page" / "index.html").is_file()


def test_report_command_takes_html_and_names_the_page(tmp_path, capsys):
    db, out = _registry(tmp_path), tmp_path / "cli"
    assert main(["report", "--registry", str(db), "--out", str(out)]) == 0
    assert "index.html" not in capsys.readouterr().out and not (out / "index.html").exists()
    assert main(["report", "--registry", str(db), "--out", str(out), "--html"]) == 0
    assert f"{out / 'index.html'}" in capsys.readouterr().out
    assert (out / "index.html").is_file()


def test_page_is_self_contained_and_inlines_png_figures(tmp_path):
    text, p, st = _page(tmp_path)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert not re.search(r"""<script[^>]*\bsrc\s*=""", text, re.I)
    assert not p.links and all("src" not in s for s in p.scripts)
    drawn = [name for name, why in st["figures"].items() if why is None]
    assert drawn, "the synthetic registry should draw at least one figure"
    assert len(p.imgs) == len(drawn)
    for img in p.imgs:
        prefix = "data:image/png;base64,"
        assert img["src"].startswith(prefix), img["src"][:40]
        png = base64.b64decode(img["src"][len(prefix) :], validate=True)
        assert png.startswith(html.PNG_MAGIC)
        assert png == (tmp_path / "out" / "figures" / f"{img['alt']}.png").read_bytes()


def test_registry_text_is_escaped(tmp_path):
    text, p, _ = _page(tmp_path)
    assert EVIL not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert len(p.scripts) == 2  # the page's own two scripts, none from the registry
    names = [row[0][0] for t in _leaderboards(p) for row in t["rows"]]
    assert EVIL in names  # shown as text, verbatim


def test_leaderboard_names_the_reference_and_every_mean_has_an_interval(tmp_path):
    _, p, _ = _page(tmp_path)
    boards = _leaderboards(p)
    assert len(boards) == 1  # one benchmark x one objective
    for t in boards:
        assert "reference: Intervention Score" in t["caption"]
        assert "ΔJ vs Intervention Score [95% CI]" in t["head"]
        for row in t["rows"]:
            means = [text for text, attrs in row if "mean" in attrs.get("class", "").split()]
            assert len(means) == 2, row  # mean J and ΔJ
            _mean_and_interval(means[0])
            if row[0][0] != "Intervention Score":
                _mean_and_interval(means[1])


def test_leaderboard_numbers_match_numpy(tmp_path):
    """The row of EVIL: mean J and its 95% t interval, SD, and ΔJ = EVIL − reference with its t
    interval, computed here from the J the registry was given."""
    _, p, _ = _page(tmp_path)
    (board,) = _leaderboards(p)
    head = board["head"]
    row = {
        head[i]: cell
        for i, (cell, _) in enumerate(next(r for r in board["rows"] if r[0][0] == EVIL))
    }
    j = np.array([_evil_J(i) for i in range(len(_units()))])
    d = j - np.array([_ref_J(i) for i in range(len(_units()))])

    def t95(x):
        half = sps.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
        return x.mean(), x.mean() - half, x.mean() + half

    got = _mean_and_interval(row["mean J [95% CI]"])
    assert got == pytest.approx(t95(j), abs=1e-4)
    assert _number(row["SD"]) == pytest.approx(j.std(ddof=1), abs=1e-4)
    assert _number(row["median J"]) == pytest.approx(np.median(j), abs=1e-4)
    got = _mean_and_interval(row["ΔJ vs Intervention Score [95% CI]"])
    assert got == pytest.approx(t95(d), abs=1e-4)
    assert got[0] > 0  # method − reference: EVIL is better on average (mean gap +0.0583)
    wins, ties, losses = (int(x) for x in row["W/T/L"].split("/"))
    assert (wins, ties, losses) == ((d > 0).sum(), (d == 0).sum(), (d < 0).sum()) == (4, 0, 2)


def test_dirr_runs_show_gate_decisions_and_dirr_gap(tmp_path):
    text, p, _ = _page(tmp_path, dirr=True)
    events = next(t for t in p.tables if "probe signal" in t["head"])
    assert len(events["rows"]) == len(_units())
    col = {h: i for i, h in enumerate(events["head"])}
    triggered = [r[col["triggered"]][0] for r in events["rows"]]
    assert sorted(triggered) == ["no"] * 3 + ["yes"] * 3
    assert {r[col["chosen ρ"]][0] for r in events["rows"]} == {"0.050", "0.000"}
    dirr = next(t for t in p.tables if "ΔJ DIR-R − static [95% CI]" in t["head"])
    # two cells show a mean: ΔJ DIR-R − static, then the available gain (Eq. 20), each with its
    # interval
    (delta, _), (avail, _) = [c for c in dirr["rows"][0] if "mean" in c[1].get("class", "").split()]
    gaps = np.array([0.125 if i % 2 == 0 else 0.0 for i in range(len(_units()))])
    assert _mean_and_interval(delta)[0] == pytest.approx(gaps.mean(), abs=1e-4)
    assert _mean_and_interval(delta)[1:] == pytest.approx(stats.t_interval(gaps), abs=1e-4)
    # every candidate but ρ = 0.05 equals the static continuation, so each unit's available gain
    # (best candidate − the static continuation) is its captured gap here
    assert _mean_and_interval(avail)[0] == pytest.approx(gaps.mean(), abs=1e-4)
    assert _mean_and_interval(avail)[1] == pytest.approx(stats.t_interval(gaps)[0], abs=1e-4)


def test_page_for_a_registry_without_ok_runs(tmp_path):
    text, p, _ = _page(tmp_path, status="failed")
    assert not _leaderboards(p)
    assert "No ok runs with J in this experiment" in text
    identity = next(t for t in p.tables if "code fingerprint" in t["head"])
    assert len(identity["rows"]) == 2 * len(_units())
    assert not p.imgs


@pytest.mark.parametrize(
    ("value", "want"), [(None, "–"), (float("nan"), "–"), (-1.5, "−1.5000"), (2.0, "2.0000")]
)
def test_number_format(value, want):
    assert html.num(value) == want


def test_interval_format():
    assert html.interval(None) == "[n/a: n < 2]"
    assert html.interval((-0.5, 0.25), sign=True) == "[−0.5000, +0.2500]"


def test_a_gap_that_rounds_to_zero_has_no_minus_sign():
    assert html.signed(-1e-12) == "+0.0000" and html.num(-1e-12) == "0.0000"
    assert html.signed(-0.00006) == "−0.0001"
