"""index.html (`supportbench report --html`) in a real browser: headless Chromium opens the page as
a file with ``#selftest``; the page's own script sorts a leaderboard both ways, decodes every image
and records any error, and this test reads its verdict from the dumped DOM. The page broken on
purpose (a script error, a sort that does nothing, a corrupt figure) must fail the same check.

Skipped when Chromium is not on PATH (Debian: ``apt-get install chromium``; ``make test`` tries to
install it). Each test starts a browser process: they run on one pytest-xdist worker."""

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from supportbench.registry import synthetic as syn
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect
from supportbench.reports.report import report

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.xdist_group("browser"),
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="chromium is not on PATH (Debian: apt-get install chromium; `make browser`)",
    ),
]
RESULT = re.compile(r'<pre id="selftest-result">(.*?)</pre>', re.S)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    """index.html of a small registry: three methods and DIR-R runs under two objectives, so the
    leaderboards have rows to sort and the figures are drawn."""
    root = tmp_path_factory.mktemp("browser")
    res = root / "res"
    offsets = {"intervention_score": 0.0, "random": -0.25, "wagle": 0.125}
    units = [
        (f, o, s)
        for f in ("Email_Address", "Phone_Number")
        for o in ("npo", "simnpo")
        for s in (1, 2)
    ]
    for i, (f, o, s) in enumerate(units):
        base = 0.5 + 0.1 * ((7 * i) % 5)
        common = dict(experiment="e", benchmark="lacuna", field=f, objective=o, seed=s)
        for m, off in offsets.items():
            syn.write(res, syn.record(method=m, J=base + off * (1 + i % 3), **common))
        cands = {a: base + (0.0625 if i % 2 == 0 and a == "0.05" else 0.0) for a in syn.ACTIONS}
        syn.write(
            res,
            syn.record(
                method="intervention_score",
                variant="dirr",
                J=max(cands.values()),
                candidates=cands,
                triggered=i % 2 == 0,
                **common,
            ),
        )
    con = connect(root / "r.duckdb")
    ingest(con, res)
    con.close()
    st = report(root / "r.duckdb", root / "out", html=True)
    assert any(why is None for why in st["figures"].values()), st["figures"]
    return st["html"].read_text(encoding="utf-8")


def selftest(text: str, tmp_path: Path) -> dict:
    """Open ``text`` as a file in headless Chromium with #selftest; the page's JSON verdict."""
    path = tmp_path / "index.html"
    path.write_text(text, encoding="utf-8")
    r = subprocess.run(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            path.as_uri() + "#selftest",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = RESULT.search(r.stdout)
    assert found and found.group(1).strip(), (
        f"no self-test result in the DOM chromium dumped (exit {r.returncode}); "
        f"stderr: {r.stderr[-2000:]}"
    )
    return json.loads(html.unescape(found.group(1)))


def test_page_passes_its_selftest_in_chromium(page, tmp_path):
    got = selftest(page, tmp_path)
    assert got["errors"] == []
    assert got["sorted"] is True and got["sorted_column"] == "mean J [95% CI]"
    assert got["images"]["total"] >= 1
    assert got["images"]["rendered"] == got["images"]["total"], got["images"]
    assert got["ok"] is True


def test_selftest_reports_a_script_error(page, tmp_path):
    broken = page.replace("</body>", "<script>notAFunction();</script>\n</body>")
    got = selftest(broken, tmp_path)
    assert got["ok"] is False
    assert any("notAFunction" in e for e in got["errors"]), got["errors"]


def test_selftest_reports_a_console_error(page, tmp_path):
    broken = page.replace("</body>", "<script>console.error('lost data');</script>\n</body>")
    got = selftest(broken, tmp_path)
    assert got["ok"] is False and any("lost data" in e for e in got["errors"])


def test_selftest_reports_a_sort_that_does_not_sort(page, tmp_path):
    assert "window.supportbenchSort = sortBy;" in page
    broken = page.replace(
        "window.supportbenchSort = sortBy;", "window.supportbenchSort = function () {};"
    )
    got = selftest(broken, tmp_path)
    assert got["sorted"] is False and got["ok"] is False


def test_selftest_reports_a_figure_that_does_not_decode(page, tmp_path):
    prefix = 'src="data:image/png;base64,'
    start = page.index(prefix) + len(prefix)
    broken = page[:start] + "iVBORw0KGgoAAAANSUhEUgAA" + page[page.index('"', start) :]
    got = selftest(broken, tmp_path)
    assert got["images"]["rendered"] == got["images"]["total"] - 1
    assert got["ok"] is False


def test_selftest_reports_a_blank_figure(page, tmp_path):
    """Review of issue 36: a figure replaced by a blank white PNG decoded, so it counted as
    rendered. Its pixels are now read: one colour is not a figure."""
    import base64
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(2, 2))
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    blank = base64.b64encode(buf.getvalue()).decode("ascii")
    prefix = 'src="data:image/png;base64,'
    start = page.index(prefix) + len(prefix)
    got = selftest(page[:start] + blank + page[page.index('"', start) :], tmp_path)
    assert got["images"]["rendered"] == got["images"]["total"] - 1, got["images"]
    assert got["ok"] is False
