import math

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from supportbench.reports import stats as stats


def frame(rows):
    base = {
        "experiment": "e",
        "benchmark": "b",
        "build": 0,
        "split": "final",
        "status": "ok",
        "variant": "static",
        "triggered": None,
        "probe_signal": None,
        "chosen_rho": None,
        "available_gain": None,
        "rho0_J": None,
        "selection": None,
        "complete": None,
        "post_hoc": None,
        "decision_hash": None,
        "run_key": "",
    }
    out = [{**base, **r, "ingest_seq": i} for i, r in enumerate(rows)]
    return pl.DataFrame(out)


def test_paired_gap_mean_median_wtl_and_unmatched():
    a = frame(
        [
            {"method": "A", "field": f, "objective": "npo", "seed": s, "J": j}
            for f, s, j in [("x", 1, 3.0), ("x", 2, 1.0), ("y", 1, 2.0), ("y", 9, 7.0)]
        ]
    )
    b = frame(
        [
            {"method": "B", "field": f, "objective": "npo", "seed": s, "J": j}
            for f, s, j in [("x", 1, 1.0), ("x", 2, 1.0), ("y", 1, 3.5), ("z", 1, 0.0)]
        ]
    )
    p = stats.paired(a, b)
    assert sorted(p.diffs.tolist()) == [-1.5, 0.0, 2.0]
    assert p.unmatched_a["seed"].to_list() == [9] and p.unmatched_b["field"].to_list() == ["z"]
    s = stats.summarize(p.diffs)
    assert (
        s.mean == pytest.approx(0.5 / 3)
        and s.median == 0.0
        and (s.wins, s.ties, s.losses) == (1, 1, 1)
    )
    assert stats.wtl(np.array([0.001, -0.002, 0.5]), tol=0.01) == (1, 2, 0)


def test_median_odd_and_even():
    assert stats.summarize(np.array([3.0, 1.0, 2.0])).median == 2.0
    assert stats.summarize(np.array([4.0, 1.0, 2.0, 3.0])).median == 2.5


def test_loo_range_by_hand():
    assert stats.loo_range(np.array([1.0])) is None  # n = 1: undefined
    assert stats.loo_range(np.array([1.0, 4.0])) == (1.0, 4.0)  # n = 2: the other value
    # n = 4, sum 10: deleting 1 -> 3.0, deleting 4 -> 2.0
    assert stats.loo_range(np.array([1.0, 2.0, 3.0, 4.0])) == pytest.approx((2.0, 3.0))


def test_t_interval_by_hand():
    d = np.array([1.0, 2.0, 3.0])
    half = sps.t.ppf(0.975, 2) * 1.0 / math.sqrt(3)  # sd = 1
    assert stats.t_interval(d) == pytest.approx((2 - half, 2 + half))
    assert stats.t_interval(np.array([1.0])) is None


def test_bootstrap_is_seeded_and_brackets_the_mean():
    d = np.array([0.1, 0.4, -0.2, 0.3, 0.25])
    a, b = stats.bootstrap_interval(d, seed=3), stats.bootstrap_interval(d, seed=3)
    assert a == b and a[0] < d.mean() < a[1]
    assert stats.bootstrap_interval(np.array([0.1, 0.1])) == pytest.approx((0.1, 0.1))


def test_dedup_keeps_first_ok_run_per_cell():
    df = frame(
        [
            {
                "method": "A",
                "field": "x",
                "objective": "npo",
                "seed": 1,
                "J": 1.0,
                "status": "failed",
            },
            {"method": "A", "field": "x", "objective": "npo", "seed": 1, "J": 2.0},
            {"method": "A", "field": "x", "objective": "npo", "seed": 1, "J": 3.0},
        ]
    )
    u = stats.usable(df)
    assert u["J"].to_list() == [2.0]
    m = stats.method_means(df)
    assert m.row(0, named=True)["n"] == 1


def test_ranks_and_field_decomposition_and_setting_wins():
    rows = []
    for f, (ja, jb) in {"x": (1.0, 0.0), "y": (0.0, 2.0)}.items():
        for s in (1, 2):
            rows += [
                {"method": "A", "field": f, "objective": "npo", "seed": s, "J": ja},
                {"method": "B", "field": f, "objective": "npo", "seed": s, "J": jb},
            ]
    df = frame(rows)
    r = stats.ranks(df).sort("method")
    assert r["rank"].to_list() == [2, 1]  # means: A 0.5, B 1.0
    p = stats.paired(stats.pick(df, "A"), stats.pick(df, "B"))
    fd = stats.field_decomposition(p)
    assert fd["mean_gap"].to_list() == [1.0, -2.0]
    sw = stats.setting_wins(p)
    assert sw["wins"] == 1 and sw["n"] == 2


def test_dirr_metrics_available_and_captured_gain():
    static = frame(
        [{"method": "is", "field": "x", "objective": "npo", "seed": s, "J": 1.0} for s in (1, 2)]
    )
    dirr = frame(
        [
            {
                "method": "is",
                "variant": "dirr",
                "field": "x",
                "objective": "npo",
                "seed": 1,
                "J": 1.3,
                "triggered": True,
                "available_gain": 0.4,
                "complete": True,
                "selection": "evaluation",
            },
            {
                "method": "is",
                "variant": "dirr",
                "field": "x",
                "objective": "npo",
                "seed": 2,
                "J": 1.0,
                "triggered": False,
                "available_gain": 0.2,
                "complete": True,
                "selection": "evaluation",
            },
        ]
    )
    m = stats.dirr_metrics(dirr, static)
    assert (
        m.delta == pytest.approx(0.15)
        and m.trigger_rate == 0.5
        and (m.wins, m.ties, m.losses) == (1, 1, 0)
    )
    assert m.available_gain == pytest.approx(0.3)  # Eq. 20: mean of (0.4, 0.2)
    assert m.captured == pytest.approx(0.3 / 0.6)  # Eq. 21: sum diffs / sum available
    incomplete = dirr.with_columns(pl.Series("complete", [True, False]))
    m2 = stats.dirr_metrics(incomplete, static)
    assert m2.available_gain is None and m2.captured is None  # undefined, shown as such


def _paired_of(units, diffs) -> stats.Paired:
    frame = pl.DataFrame({"field": units, "seed": [0] * len(units), "diff": diffs})
    return stats.Paired(frame, frame.clear(), frame.clear())


def test_composed_margin_reproduces_paper_full_column():
    """The paper's Natural-TOFU row: Static-IV - C = 0.002789, DIR-R - Static-IV = 0.002010, full
    DIR-R - C = 0.004799; from the method's side C - full = (C - Static) - (DIR-R - Static)."""
    got = stats.composed_ci(_paired_of(["a"], [-0.002789]), _paired_of(["b"], [0.002010]))
    assert got.value == pytest.approx(-0.004799, abs=2e-6) and got.ci is None


def test_composed_margin_is_paired_where_the_gaps_share_their_units():
    """Both gaps on units {u, v, w}: C - DIR-R per unit is (1 - 0.5, 3 - 2.5, 2 - 1.0) = (0.5, 0.5,
    1.0): mean 2/3, s = sqrt(1/12), t(0.975, 2) = 4.302652729749464; the same gaps on different
    units take Welch's interval (wider here: the gaps move together)."""
    c, d = [1.0, 3.0, 2.0], [0.5, 2.5, 1.0]
    shared = stats.composed_ci(_paired_of(["u", "v", "w"], c), _paired_of(["u", "v", "w"], d))
    half = 4.302652729749464 * (1 / 12) ** 0.5 / 3**0.5
    assert shared.value == pytest.approx(2 / 3)
    assert shared.ci == pytest.approx((2 / 3 - half, 2 / 3 + half))
    apart = stats.composed_ci(_paired_of(["u", "v", "w"], c), _paired_of(["x", "y", "z"], d))
    assert apart == stats.sum_ci(c, [-x for x in d])
    assert apart.ci[1] - apart.ci[0] > shared.ci[1] - shared.ci[0]


def test_support_jaccard_across_objectives():
    sup = pl.DataFrame(
        [
            {"benchmark": "b", "field": "x", "seed": 1, "method": "is", "objective": o, "groups": g}
            for o, g in (("npo", [1, 2, 3]), ("simnpo", [3, 4]))
        ]
    )
    m = stats.support_jaccard(sup)
    got = {(r["a"], r["b"]): r["jaccard"] for r in m.iter_rows(named=True)}
    assert got[("npo", "simnpo")] == pytest.approx(1 / 4) and got[("npo", "npo")] == 1.0


def test_support_jaccard_never_compares_supports_of_two_builds():
    """Two theta_0 builds with the same field and seed are two units: build 0's overlap is 1/4 and
    build 1's is 1 (mean 5/8); keyed without the build, one build's supports overwrote the
    other's."""
    sup = pl.DataFrame(
        [
            {"benchmark": "b", "build": b, "field": "x", "seed": 1, "method": "is"}
            | {"objective": o, "groups": g}
            for b, pairs in (
                (0, (("npo", [1, 2, 3]), ("simnpo", [3, 4]))),
                (1, (("npo", [7]), ("simnpo", [7]))),
            )
            for o, g in pairs
        ]
    )
    got = {
        (r["a"], r["b"]): (r["jaccard"], r["n"])
        for r in stats.support_jaccard(sup).iter_rows(named=True)
    }
    assert got[("npo", "simnpo")] == (pytest.approx((1 / 4 + 1) / 2), 2)


def test_two_experiments_over_the_same_units_are_never_pooled():
    """The same (benchmark, field, objective, seed) in two experiments are two units, not one unit
    twice."""

    def runs(exp, triggered):
        static = [
            {
                "experiment": exp,
                "method": "is",
                "field": "x",
                "objective": "npo",
                "seed": s,
                "J": 1.0,
            }
            for s in (1, 2, 3)
        ]
        dirr = [
            {
                "experiment": exp,
                "method": "is",
                "variant": "dirr",
                "field": "x",
                "objective": "npo",
                "seed": s,
                "J": 1.0 + 0.1 * t,
                "triggered": bool(t),
                "available_gain": 0.2,
                "complete": True,
                "selection": "evaluation",
            }
            for s, t in zip((1, 2, 3), triggered)
        ]
        return static, dirr

    s1, d1 = runs("e1", (1, 1, 0))
    s2, d2 = runs("e2", (0, 0, 0))
    both = stats.dirr_metrics(frame(d1 + d2), frame(s1 + s2))
    assert both.n == 6 and both.trigger_rate == pytest.approx(2 / 6)
    one = stats.dirr_metrics(
        frame(d1 + d2).filter(pl.col("experiment") == "e1"),
        frame(s1 + s2).filter(pl.col("experiment") == "e1"),
    )
    assert (
        one.n == 3
        and one.trigger_rate == pytest.approx(2 / 3)
        and one.available_gain == pytest.approx(0.2)
    )
    assert (
        stats.paired(frame(s1 + s2), frame(s1 + s2)).frame.height == 6
    )  # no cross-experiment matches


def test_setting_wins_does_not_depend_on_row_order():
    """The bootstrap resamples settings by position: their order must not depend on how the rows (or
    a hash-based group_by) happened to be ordered, or the same registry renders different
    intervals."""
    import numpy as np

    rng = np.random.default_rng(0)
    rows = [
        {
            "benchmark": "lacuna",
            "field": f"f{i}",
            "objective": o,
            "seed": s,
            "diff": float(rng.normal()),
        }
        for i in range(6)
        for o in ("npo", "simnpo")
        for s in range(3)
    ]
    frame = pl.DataFrame(rows)
    want = stats.setting_wins(stats.Paired(frame, frame.head(0), frame.head(0)))
    for k in range(5):
        shuffled = frame.sample(fraction=1.0, shuffle=True, seed=k)
        assert stats.setting_wins(stats.Paired(shuffled, frame.head(0), frame.head(0))) == want
