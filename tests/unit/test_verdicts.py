"""Verdicts on pre-registered claims (reports/verdicts.py) on synthetic registries: each rule of the
four verdicts, the hierarchical bootstrap, power and the controlled claim's comparators, each able
to fail."""

from __future__ import annotations

import itertools
import math
import random
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from supportbench.experiments import claims as claims
from supportbench.registry import synthetic as syn
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect
from supportbench.reports import tables as tables
from supportbench.reports import verdicts as verdicts

DEFAULTS = {**claims.DEFAULTS, "n_boot": 2000, "seed": 7}
PAPER = claims.load()


def _registry(tmp_path: Path, write) -> tables.Context:
    res = tmp_path / "res"
    write(lambda **kw: syn.write(res, syn.record(experiment="e", **kw)))
    db = tmp_path / "r.duckdb"
    con = connect(db)
    ingest(con, res)
    con.close()
    con = connect(db, read_only=True)
    return tables.Context.from_registry(con, "e"), con


def _dirr_pair(
    w, build, field, obj, seed, gain, triggered=True, selection="development", bench="natural_tofu"
):
    w(benchmark=bench, build=build, field=field, objective=obj, seed=seed, J=1.0)
    w(
        benchmark=bench,
        build=build,
        field=field,
        objective=obj,
        seed=seed,
        variant="dirr",
        J=1.0 + gain,
        candidates={"0.0": 1.0, "0.05": 1.0 + gain},
        triggered=triggered,
        selection=selection,
        decision_hash="x",
    )


# ---- the rules -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("interval", "side", "fails_below", "want"),
    [
        ((0.1, 0.3), "above", None, verdicts.HOLDS),
        ((-0.3, -0.1), "above", None, verdicts.FAILS),
        ((-0.1, 0.1), "above", None, verdicts.INCONCLUSIVE),
        ((0.02, 0.06), "above", 0.05, verdicts.HOLDS),
        (
            (0.01, 0.04),
            "above",
            0.05,
            verdicts.FAILS,
        ),  # surely above 0, surely negligible: does not hold
        ((-0.01, 0.04), "above", 0.05, verdicts.FAILS),
        ((-0.01, 0.06), "above", 0.05, verdicts.INCONCLUSIVE),
        ((0.5, 0.7), "below", None, verdicts.HOLDS),
        ((0.75, 0.9), "below", None, verdicts.FAILS),
        ((0.6, 0.8), "below", None, verdicts.INCONCLUSIVE),
        (None, "above", None, verdicts.INCONCLUSIVE),
    ],
)
def test_the_interval_rule(interval, side, fails_below, want):
    th = 0.75 if side == "below" else 0.0
    assert verdicts.side_verdict(interval, th, side, fails_below) == want


def test_builds_that_disagree_make_any_verdict_inconclusive():
    per = [{"verdict": verdicts.HOLDS}, {"verdict": verdicts.FAILS}, {"verdict": verdicts.HOLDS}]
    v, why = verdicts.combine(verdicts.HOLDS, per, 0.99, DEFAULTS, 3, "r")
    assert v == verdicts.INCONCLUSIVE and "the builds disagree" in why
    # a pooled "does not hold" too, powered (review: only the "holds" case was tested)
    v, why = verdicts.combine(verdicts.FAILS, per, 0.99, DEFAULTS, 3, "r")
    assert (
        v == verdicts.INCONCLUSIVE
        and "the builds disagree" in why
        and "pooled: does not hold" in why
    )
    # agreeing builds leave the verdict alone; inconclusive builds are no disagreement
    assert (
        verdicts.combine(
            verdicts.HOLDS,
            [{"verdict": verdicts.HOLDS}, {"verdict": verdicts.INCONCLUSIVE}] * 2,
            0.99,
            DEFAULTS,
            4,
            "r",
        )[0]
        == verdicts.HOLDS
    )


def test_too_few_builds_or_too_little_power_is_inconclusive_never_does_not_hold():
    assert verdicts.combine(verdicts.FAILS, [], 0.99, DEFAULTS, 2, "r")[0] == verdicts.INCONCLUSIVE
    v, why = verdicts.combine(
        verdicts.FAILS, [{"verdict": verdicts.FAILS}] * 3, 0.3, DEFAULTS, 3, "r"
    )
    assert v == verdicts.INCONCLUSIVE and "underpowered: power 0.30" in why
    assert (
        verdicts.combine(verdicts.FAILS, [{"verdict": verdicts.FAILS}] * 3, 0.9, DEFAULTS, 3, "r")[
            0
        ]
        == verdicts.FAILS
    )
    # a "holds" is not demoted for low power (its interval bounds its error); the low power is said
    v, why = verdicts.combine(
        verdicts.HOLDS, [{"verdict": verdicts.HOLDS}] * 3, 0.3, DEFAULTS, 3, "r"
    )
    assert v == verdicts.HOLDS and "power at the effect of interest only 0.30" in why


def test_power_and_detectable_effect_by_hand():
    se, level = 0.1, 0.95
    zc, tc = sps.norm.ppf(0.975), sps.t.ppf(0.975, 2)  # within one build / over three builds
    for crit in (zc, tc):
        e = verdicts.Estimate(0.0, (-1.0, 1.0), se, 1.0, 30, crit)
        assert verdicts.power_at(0.3, e, level) == pytest.approx(sps.norm.cdf(3 - crit))
        assert verdicts.detectable(e, {"level": level, "power": 0.8}) == pytest.approx(
            (crit + sps.norm.ppf(0.8)) * se
        )
        # at the detectable effect the power is the stated one
        assert verdicts.power_at(
            verdicts.detectable(e, {"level": level, "power": 0.8}), e, level
        ) == pytest.approx(0.8)


def test_the_pooled_interval_is_a_t_interval_on_the_builds_statistics_by_hand():
    vals = np.array([1.0, 3.0, 2.0, 2.0, 6.0, 8.0])  # builds 0, 1, 2: means 2, 2, 7
    e = verdicts.estimate(
        vals, verdicts.Nested([0, 0, 1, 1, 2, 2], [0] * 6, list("abcdef")), DEFAULTS
    )
    se = np.std([2.0, 2.0, 7.0], ddof=1) / np.sqrt(3)
    half = sps.t.ppf(0.975, 2) * se
    assert e.value == pytest.approx(vals.mean()) and e.se == pytest.approx(se) and e.builds == 3
    assert e.interval == pytest.approx((vals.mean() - half, vals.mean() + half))


def test_the_pooled_interval_covers_at_its_level_with_three_builds():
    """Build effects as large as the noise: the interval over three builds covers the true mean
    about 95% of the time (the hierarchical bootstrap over builds covered 76-86% here: issue 32's
    review)."""
    rng = np.random.default_rng(0)
    b, s, u = (
        np.repeat(np.arange(3), 8),
        np.tile(np.repeat(np.arange(2), 4), 3),
        np.tile(np.arange(4), 6),
    )
    nested, hits, sims = verdicts.Nested(b.tolist(), s.tolist(), u.tolist()), 0, 400
    for _ in range(sims):
        vals = rng.normal(0, 1, 3)[b] + rng.normal(0, 1, len(b))
        lo, hi = verdicts.estimate(vals, nested, DEFAULTS).interval
        hits += lo <= 0.0 <= hi
    assert hits / sims >= 0.92


def test_poisson_binomial_tail_against_enumeration():
    p = [0.9, 0.5, 0.2, 0.99, 0.7]
    for k in range(len(p) + 2):
        brute = sum(
            math.prod(q if x else 1 - q for q, x in zip(p, xs))
            for xs in itertools.product([0, 1], repeat=len(p))
            if sum(xs) >= k
        )
        assert verdicts.poisson_binomial_tail(p, k) == pytest.approx(brute)
    # the example: 20 comparisons each positive with probability 0.9, at least 19 of them
    assert verdicts.poisson_binomial_tail([0.9] * 20, 19) == pytest.approx(0.3917, abs=1e-4)


# ---- the hierarchical bootstrap ------------------------------------------------------------------
def test_resamples_draw_builds_then_seeds_then_units():
    """One build, seed 5 with one unit (row 0), seed 6 with three (rows 1-3): a resample draws two
    seeds, then each drawn seed's units, so it has 2, 4 or 6 rows -- a flat resample of the four
    rows always has 4."""
    nested = verdicts.Nested([0, 0, 0, 0], [5, 6, 6, 6], ["a", "a", "b", "c"])
    rng = np.random.default_rng(0)
    sizes, repeats = set(), 0
    for _ in range(300):
        idx = nested.draw(rng)
        sizes.add(len(idx))
        assert set(idx) <= {0, 1, 2, 3}
        repeats += len(set(idx[idx > 0])) < int(
            (idx > 0).sum()
        )  # a unit drawn twice within its seed
    assert sizes == {2, 4, 6} and repeats > 0
    # builds first: three one-row builds give three rows per resample, drawn with replacement
    three = verdicts.Nested([0, 1, 2], [0, 0, 0], ["a", "a", "a"])
    draws = [tuple(sorted(three.draw(rng))) for _ in range(200)]
    assert {len(d) for d in draws} == {3} and any(len(set(d)) < 3 for d in draws)


def test_build_level_variation_widens_the_interval():
    rng = random.Random(1)
    rows = [
        (b, s, f, [-1.0, 0.0, 1.0][b] + rng.gauss(0, 0.01))
        for b in range(3)
        for s in range(4)
        for f in "xy"
    ]
    vals = np.array([r[3] for r in rows])
    hier = verdicts.estimate(
        vals,
        verdicts.Nested([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
        DEFAULTS,
    )
    flat = verdicts.estimate(
        vals, verdicts.Nested([0] * len(rows), [0] * len(rows), list(range(len(rows)))), DEFAULTS
    )
    width = lambda e: e.interval[1] - e.interval[0]  # noqa: E731
    assert width(hier) > 2 * width(flat)  # 3 builds that disagree: the mean is poorly known
    assert hier.interval[0] < -0.3 and hier.interval[1] > 0.3


# ---- claims on synthetic registries --------------------------------------------------------------
def test_a_never_triggered_setting_is_not_tested(tmp_path):
    def write(w):
        for b, f, s in itertools.product(range(3), ("forget05", "forget10"), (1, 2)):
            _dirr_pair(w, b, f, "npo", s, 0.5 + 0.1 * s)
            _dirr_pair(w, b, f, "simnpo", s, 0.0, triggered=False)

    ctx, con = _registry(tmp_path, write)
    v = verdicts.paired_mean(PAPER.by_id("natural-dirr"), DEFAULTS, ctx, con)
    assert v.verdict == verdicts.NOT_TESTED
    assert "simnpo: not tested (DIR-R never triggered" in v.why
    assert any(
        line.startswith("npo: Intervention Score + DIR-R − Intervention Score: mean +0.")
        for line in v.detail
    )


def test_a_setting_missing_from_a_build_is_not_judged_on_the_benchmarks_build_count(tmp_path):
    """simnpo ran on builds 0 and 1 only: two builds of that setting, fewer than the claims file
    asks, so it cannot hold however clear its mean (review: it read 'holds')."""

    def write(w):
        for b, f, s in itertools.product(range(3), ("forget05", "forget10"), (1, 2)):
            _dirr_pair(w, b, f, "npo", s, 0.5 + 0.1 * s)
            if b < 2:
                _dirr_pair(w, b, f, "simnpo", s, 0.5 + 0.1 * s)

    ctx, con = _registry(tmp_path, write)
    v = verdicts.paired_mean(PAPER.by_id("natural-dirr"), DEFAULTS, ctx, con)
    assert v.verdict == verdicts.INCONCLUSIVE
    assert "simnpo: inconclusive (2 theta_0 build(s); the claims file asks for at least 3" in v.why
    assert "npo: holds" in v.why


def test_builds_that_agree_by_chance_do_not_narrow_the_interval_below_one_builds_noise():
    """Three builds with the same mean, each of two units +-1 around it: the builds' spread is 0,
    the interval's se is the within-build floor sqrt(mean(s^2/n) / B) = sqrt(1/3), at t's critical
    value for the 6 - 3 units' degrees of freedom (review: the interval was a point)."""
    vals = np.array([3.0, 1.0, 3.0, 1.0, 3.0, 1.0])
    e = verdicts.estimate(
        vals, verdicts.Nested([0, 0, 1, 1, 2, 2], [0] * 6, list("abcdef")), DEFAULTS
    )
    half = sps.t.ppf(0.975, 3) * np.sqrt(1 / 3)
    assert e.se == pytest.approx(np.sqrt(1 / 3)) and e.interval == pytest.approx(
        (2 - half, 2 + half)
    )


def test_the_interval_over_builds_is_centred_on_the_builds_statistics():
    """A correlation that is 0 within each build but strongly negative pooled (the builds sit at
    different offsets): the interval is built from the builds' correlations, so it is centred on
    their mean, not on the pooled value (review: pooled -0.88 with an interval from per-build
    r near 0)."""
    x = np.tile([0.0, 1.0, 0.0, 1.0], 3) + np.repeat([0.0, 5.0, 10.0], 4)
    y = np.tile([0.0, 0.0, 1.0, 1.0], 3) - np.repeat([0.0, 5.0, 10.0], 4)
    n = len(x)
    nested = verdicts.Nested(np.repeat([0, 1, 2], 4).tolist(), [0] * n, list(range(n)))

    def r(idx):
        return float(np.corrcoef(x[idx], y[idx])[0, 1]) if len(idx) > 2 else float("nan")

    assert r(np.arange(n)) < -0.9
    e = verdicts.estimate(np.zeros(n), nested, DEFAULTS, stat=r)
    assert e.value == pytest.approx(0.0, abs=1e-12) and e.interval[0] < 0 < e.interval[1]


def test_evaluation_selected_dirr_is_not_tested(tmp_path):
    def write(w):
        for b, f, s in itertools.product(range(3), ("forget05", "forget10"), (1, 2)):
            for obj in ("npo", "simnpo"):
                _dirr_pair(w, b, f, obj, s, 0.5, selection="evaluation")

    ctx, con = _registry(tmp_path, write)
    v = verdicts.paired_mean(PAPER.by_id("natural-dirr"), DEFAULTS, ctx, con)
    assert (
        v.verdict == verdicts.NOT_TESTED
        and "selected their candidate on the evaluation split" in v.why
    )


def test_a_straddling_interval_is_inconclusive_and_a_clear_one_holds(tmp_path):
    rng = random.Random(3)

    def write(w):
        for b, f, s in itertools.product(
            range(3), ("forget01", "forget05", "forget10"), range(1, 9)
        ):
            _dirr_pair(w, b, f, "npo", s, rng.gauss(0.0, 1.0))  # no effect: straddles 0
            _dirr_pair(w, b, f, "simnpo", s, 2.0 + rng.gauss(0, 0.5))  # a large one: holds

    ctx, con = _registry(tmp_path, write)
    v = verdicts.paired_mean(PAPER.by_id("natural-dirr"), DEFAULTS, ctx, con)
    assert v.verdict == verdicts.INCONCLUSIVE
    assert "npo: inconclusive" in v.why and "simnpo: inconclusive" not in v.why
    assert any(line.startswith("simnpo:") and line.endswith("verdict: holds") for line in v.detail)


def test_disagreeing_builds_make_the_claim_inconclusive_end_to_end(tmp_path):
    rng = random.Random(5)

    def write(w):
        for b, f, s in itertools.product(range(6), ("forget05", "forget10"), range(1, 7)):
            gain = (
                -0.05 if b == 1 else 1.0
            )  # six builds: the pooled interval clears 0, build 1 alone does not
            for obj in ("npo", "simnpo"):
                _dirr_pair(w, b, f, obj, s, gain + rng.gauss(0, 0.005))

    ctx, con = _registry(tmp_path, write)
    v = verdicts.paired_mean(PAPER.by_id("natural-dirr"), DEFAULTS, ctx, con)
    assert {r["build"]: r["verdict"] for r in v.per_build if r["build"].endswith("(npo)")} == {
        f"{b} (npo)": verdicts.FAILS if b == 1 else verdicts.HOLDS for b in range(6)
    }
    assert all(r["statistic"] is not None and r["interval"] is not None for r in v.per_build)
    assert v.verdict == verdicts.INCONCLUSIVE and "the builds disagree" in v.why


def _controlled(w, builds=3, n=20, lora_wins=True, informative=False, gap=0.5, gaps=None):
    """Targets whose storage is perfectly localized (score sign = injecting interface); the better
    intervention is always LoRA (``lora_wins``), or the storing interface (``informative``), by
    ``gap`` (``gaps``: one per build)."""
    rng = random.Random(11)
    for b in range(len(gaps) if gaps else builds):
        gap = gaps[b] if gaps else gap
        for k in range(n):
            backbone = k % 2 == 0
            score = (1.0 if backbone else -1.0) * (0.5 + rng.random())
            lora_better = (not backbone) if informative else lora_wins
            jb = {
                "backbone": 1.0,
                "lora": 1.0 + (gap if lora_better else -gap) + rng.gauss(0, 0.01),
            }
            comps = {
                "storage_score": score,
                "injected_backbone": float(backbone),
                "pair": float(k // 2),
                "recall": 0.9,
            }
            for m in ("backbone", "lora"):
                w(
                    benchmark="controlled",
                    build=b,
                    field=f"t{k:02d}",
                    objective="npo",
                    method=m,
                    seed=0,
                    J=jb[m],
                    components={**comps, "J_bounded": jb[m]},
                )


def test_a_constant_rule_that_beats_storage_is_named_in_the_controlled_verdict(tmp_path):
    ctx, con = _registry(tmp_path, _controlled)
    v = verdicts.agreement(PAPER.by_id("controlled"), DEFAULTS, ctx, con)
    assert v.statistic == pytest.approx(0.5)  # storage right on the LoRA-stored half only
    assert v.verdict == verdicts.HOLDS  # agreement [~0.4, ~0.6] < 0.75, powered, 3 builds
    rule = next(line for line in v.detail if line.startswith("best constant rule (always LoRA)"))
    assert "right on 60/60, storage on 30/60" in rule and "the constant rule beats storage" in rule
    assert any(
        "the paper's direction is reversed" not in line
        and line.startswith("direction: LoRA wins 60/60")
        for line in v.detail
    )


def test_informative_storage_fails_the_controlled_claim_and_shows_the_interaction(tmp_path):
    ctx, con = _registry(tmp_path, lambda w: _controlled(w, informative=True))
    v = verdicts.agreement(PAPER.by_id("controlled"), DEFAULTS, ctx, con)
    assert v.statistic == pytest.approx(1.0) and v.verdict == verdicts.FAILS
    inter = next(line for line in v.detail if line.startswith("storage x interface interaction"))
    assert ": +1.0" in inter  # LoRA better by 0.5 on its targets, worse on the others
    assert any("storage beats the constant rule" in line for line in v.detail)


def test_the_controlled_claim_is_not_tested_when_a_gate_fails(tmp_path):
    def write(w):
        _controlled(w)

    ctx, con = _registry(tmp_path, write)
    flat = ctx.components.with_columns(
        ctx.components["value"].zip_with(
            ctx.components["name"] != "storage_score", ctx.components["value"] * 0
        )
    )
    v = verdicts.agreement(
        PAPER.by_id("controlled"), DEFAULTS, tables.Context(ctx.results, ctx.decisions, flat), con
    )
    assert v.verdict == verdicts.NOT_TESTED and "storage localizable" in v.why
    # the numbers are still shown, marked as not judged
    assert (
        "Reported, not judged: agreement" in v.why
        and v.statistic is not None
        and v.interval is not None
    )
    assert any(line.startswith("best constant rule") for line in v.detail)
    assert all(r["verdict"].startswith("not judged") for r in v.per_build)


def test_count_claims_need_every_comparison_in_every_build(tmp_path):
    claim = PAPER.by_id("lacuna-named")

    def write(w):
        for b, f in itertools.product(range(3), ("Email_Address", "Phone_Number")):
            for obj in ("npo", "simnpo"):
                w(
                    benchmark="lacuna",
                    build=b,
                    field=f,
                    objective=obj,
                    seed=1,
                    variant="dirr",
                    J=2.0,
                    candidates={"0.0": 2.0},
                    triggered=False,
                    selection="development",
                    decision_hash="x",
                )
                for m in ("projected_causal", "memflex", "activation", "fila", "activation_down"):
                    if not (b == 2 and m == "fila"):
                        w(
                            benchmark="lacuna",
                            build=b,
                            field=f,
                            objective=obj,
                            seed=1,
                            method=m,
                            J=1.0,
                        )

    ctx, con = _registry(tmp_path, write)
    v = verdicts.count(claim, DEFAULTS, ctx, con)
    assert (
        v.verdict == verdicts.NOT_TESTED
        and "simnpo: Intervention Score + DIR-R − FILA (builds [0, 1])" in v.why
    )


def _count_registry(w, gain_of, same_noise=True, selection="development"):
    """LACUNA records: DIR-R and the five named baselines on three builds, two fields, four seeds;
    DIR-R's paired gain against each baseline is ``gain_of(objective, baseline)`` plus small
    noise."""
    for b, f, s in itertools.product(range(3), ("Email_Address", "Phone_Number"), range(1, 13)):
        # the same noise in every build: the builds agree; 24 units per build power each comparison
        # at d_z 0.5 (0.99: the within-build floor of the interval counts them); else fresh noise
        rng = random.Random(f"{f}{s}" + ("" if same_noise else str(b)))
        for obj in ("npo", "simnpo"):
            w(
                benchmark="lacuna",
                build=b,
                field=f,
                objective=obj,
                seed=s,
                variant="dirr",
                J=2.0,
                candidates={"0.0": 2.0},
                triggered=False,
                selection=selection,
                decision_hash="x",
            )
            for m in ("projected_causal", "memflex", "activation", "fila", "activation_down"):
                w(
                    benchmark="lacuna",
                    build=b,
                    field=f,
                    objective=obj,
                    seed=s,
                    method=m,
                    J=2.0 - gain_of(obj, m) + rng.gauss(0, 0.01),
                )


@pytest.mark.parametrize(
    ("gain_of", "same_noise", "want"),
    [
        (lambda o, m: 1.0, True, verdicts.HOLDS),  # all six named comparisons positive
        (
            lambda o, m: -1.0 if m == "memflex" else 1.0,
            True,
            verdicts.FAILS,
        ),  # two of six surely negative
        (lambda o, m: 0.0, False, verdicts.INCONCLUSIVE),
    ],
)  # no effect: neither reaches
def test_a_count_claim_holds_fails_or_is_inconclusive_by_its_comparisons(
    tmp_path, gain_of, same_noise, want
):
    ctx, con = _registry(tmp_path, lambda w: _count_registry(w, gain_of, same_noise))
    v = verdicts.count(PAPER.by_id("lacuna-named"), DEFAULTS, ctx, con)
    assert v.verdict == want, v.why
    assert v.total == 6 and len(v.per_build) == 3


@pytest.mark.parametrize(
    ("overlap", "want"), [("objective", verdicts.HOLDS), ("none", verdicts.INCONCLUSIVE)]
)
def test_the_support_contrast_against_seed_to_seed_overlap(tmp_path, overlap, want):
    """Supports that depend on the objective (each objective its own groups, shared across seeds)
    hold; supports drawn afresh per seed whatever the objective have no contrast."""
    rng = random.Random(4)

    def write(w):
        for b, f, s in itertools.product(range(3), ("forget05", "forget10"), range(1, 4)):
            for k, obj in enumerate(("npo", "simnpo")):
                base = list(range(10 * k, 10 * k + 8)) if overlap == "objective" else []
                groups = sorted(set(base + rng.sample(range(100), 2 if base else 8)))
                w(
                    benchmark="natural_tofu",
                    build=b,
                    field=f,
                    objective=obj,
                    seed=s,
                    J=1.0,
                    groups=groups,
                )

    ctx, con = _registry(tmp_path, write)
    v = verdicts.contrast(PAPER.by_id("natural-support"), DEFAULTS, ctx, con)
    assert v.verdict == want, v.why
    assert len(v.per_build) == 3


# ---- a claim's own minimum power (review: claims.toml could state it only file-wide) -------------
def _one_claim(extra: str) -> str:
    paper = claims.load()
    text = paper.text.split("[[claim]]")[0] + "[[claim]]" + paper.text.split("[[claim]]")[1]
    return text.replace('kind = "agreement"', f'kind = "agreement"\n{extra}', 1)


def test_a_claim_may_state_its_own_power_effect_level_and_builds():
    c = claims.parse(_one_claim("power = 0.95\neffect_dz = 0.3\nbuilds = 5")).claims[0]
    got = c.settings(claims.DEFAULTS)
    assert (got["power"], got["effect_dz"], got["builds"]) == (0.95, 0.3, 5)
    assert got["level"] == claims.DEFAULTS["level"] and got["n_boot"] == claims.DEFAULTS["n_boot"]
    assert claims.parse(_one_claim("")).claims[0].settings(claims.DEFAULTS) == claims.DEFAULTS


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("power = 1.5", "power = 1.5 must be a number in (0, 1)"),
        ("builds = 0", "builds = 0 must be a whole number >= 1"),
        ("effect_dz = -1", "effect_dz = -1 must be a number > 0"),
        ("n_boot = 500", "may override level, power, effect_dz, builds"),  # file-wide only
    ],
)
def test_a_claims_own_settings_are_checked(extra, message):
    with pytest.raises(claims.SpecError, match=re.escape(message)):
        claims.parse(_one_claim(extra))


def test_judge_applies_a_claims_own_minimum_power(monkeypatch):
    """A 'does not hold' at power 0.9 stands under the file's 0.8 and is inconclusive under the
    claim's own 0.95."""
    seen = {}

    def fake(claim, defaults, ctx, con=None):
        seen[claim.id] = defaults
        per = [{"verdict": verdicts.FAILS}] * 3
        v, why = verdicts.combine(verdicts.FAILS, per, 0.9, defaults, 3, "r")
        return verdicts.Verdict(claim, v, why, power=0.9)

    monkeypatch.setitem(verdicts.KINDS, "agreement", fake)
    for extra, want in (("", verdicts.FAILS), ("power = 0.95", verdicts.INCONCLUSIVE)):
        (v,) = verdicts.judge(claims.parse(_one_claim(extra)), ctx=None)
        assert v.verdict == want and seen["controlled"]["power"] == (0.95 if extra else 0.8)


def test_a_count_claim_over_evaluation_selected_dirr_is_not_tested(tmp_path):
    """Review: the count claims judged DIR-R runs that selected on the evaluation split (they
    cannot lose there) as if selected honestly; the same registry with development selection
    holds."""
    ctx, con = _registry(
        tmp_path, lambda w: _count_registry(w, lambda o, m: 1.0, selection="evaluation")
    )
    v = verdicts.count(PAPER.by_id("lacuna-named"), DEFAULTS, ctx, con)
    assert v.verdict == verdicts.NOT_TESTED and "evaluation split" in v.why


def test_a_build_where_dirr_never_triggered_is_not_tested_in_the_per_build_table(tmp_path):
    def write(w):
        for b, f, s in itertools.product(range(3), ("forget05", "forget10"), range(1, 5)):
            for obj in ("npo", "simnpo"):
                _dirr_pair(w, b, f, obj, s, 0.0 if b == 1 else 1.0, triggered=b != 1)

    ctx, con = _registry(tmp_path, write)
    v = verdicts.paired_mean(PAPER.by_id("natural-dirr"), DEFAULTS, ctx, con)
    rows = {r["build"]: r["verdict"] for r in v.per_build}
    assert rows["1 (npo)"] == verdicts.NOT_TESTED and rows["0 (npo)"] != verdicts.NOT_TESTED, rows
    # review (issue 32): the quiet build's zeros stay out of the pooled estimate (the mean is the
    # tested builds' +1, not 2/3) and out of the build count (2 builds: below the minimum)
    npo = next(
        d
        for d in v.detail
        if d.startswith("npo: Intervention Score + DIR-R − Intervention Score: mean")
    )
    assert npo.startswith("npo: Intervention Score + DIR-R − Intervention Score: mean +1.0000"), npo
    assert "npo: inconclusive (2 theta_0 build(s)" in v.why, v.why
    # the claim's power is its most powerful setting's, and each setting's is said
    assert v.power is not None and "per setting: npo" in v.detectable


def test_the_contrast_claims_power_is_at_its_own_negligible_bound(tmp_path):
    """Review: power at d_z x sd put the effect of interest below the claim's own fails_below, so
    no 'does not hold' could be powered; the power now grows with the distance to that bound."""
    import dataclasses

    rng = random.Random(4)

    def write(w):
        for b, f, s in itertools.product(range(3), ("forget05", "forget10"), range(1, 4)):
            for obj in ("npo", "simnpo"):
                groups = sorted(rng.sample(range(100), 8))
                w(benchmark="natural_tofu", build=b, field=f, objective=obj, seed=s, groups=groups)

    ctx, con = _registry(tmp_path, write)
    claim = PAPER.by_id("natural-support")
    near, far = (
        verdicts.contrast(
            dataclasses.replace(claim, params={**claim.params, "fails_below": fb}),
            DEFAULTS,
            ctx,
            con,
        ).power
        for fb in (0.01, 0.5)
    )
    assert near < far and far > 0.99, (near, far)


def test_table_1_pools_the_paired_difference_over_builds_not_targets(tmp_path):
    """Three builds whose LoRA - backbone gaps sit at 0.1, 0.5 and 0.9 (20 targets each, noise
    sd 0.01): Table 1's pooled difference is the mean of the builds' means with the t interval over
    the three builds (t_2 * sd(build means) / sqrt(3), hand-computed), not the 60 targets' t
    interval, which treats targets sharing a theta_0 as independent and is ten times narrower."""
    ctx, _ = _registry(tmp_path, lambda w: _controlled(w, gaps=(0.1, 0.5, 0.9)))
    q = tables.controlled_main(ctx)
    units = tables.controlled_units(ctx)
    d = (units["J_lora"] - units["J_backbone"]).to_numpy()
    builds = units["build"].to_numpy()
    means = np.array([d[builds == b].mean() for b in range(3)])
    half = sps.t.ppf(0.975, 2) * means.std(ddof=1) / math.sqrt(3)
    assert q["pooled"] and q["diff"] == pytest.approx(means.mean())
    assert q["diff_ci"] == pytest.approx((means.mean() - half, means.mean() + half))
    naive = sps.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    assert q["diff_ci"][1] - q["diff_ci"][0] > 10 * 2 * naive
    assert q["bounded"]["diff_ci"] == pytest.approx(q["diff_ci"])  # J_bounded = J here


def test_the_interval_over_builds_floors_at_the_builds_own_noise():
    """Builds whose means agree exactly cannot make the interval narrower than one build's
    sampling error: se^2 = mean(s_b^2 / n_b) / B, t at the units' degrees of freedom (N - B)."""
    from supportbench.reports import stats

    values = np.array([0.0, 2.0, 0.0, 2.0, 0.0, 2.0])
    centre, (lo, hi) = stats.mean_over_builds(values, np.array([0, 0, 1, 1, 2, 2]))
    se = math.sqrt(np.mean([2.0 / 2] * 3) / 3)  # s^2 = 2 per build of two units
    half = sps.t.ppf(0.975, 3) * se
    assert centre == pytest.approx(1.0) and (lo, hi) == pytest.approx((1 - half, 1 + half))
    assert stats.mean_over_builds(values[:2], np.array([0, 0])) is None


def test_a_build_of_one_unit_adds_nothing_to_the_floor_in_verdicts_and_table_1_alike():
    """One rule for verdicts and Table 1 (stats.over_builds): a build holding a single unit keeps
    its statistic in the spread over builds but has no sampling error to floor by, so the floor is
    the mean of the other builds' s^2/n (the estimate once counted such a build as 0, lowering the
    floor; Table 1 dropped the build). By hand: build means 1, 2, 1.5 (between 0.25), s^2/n = 1
    in builds 0 and 1: the floor 1 decides, se = sqrt(1/3), t at 5 units - 3 builds = 2 df."""
    from supportbench.reports import stats

    values = np.array([0.0, 2.0, 1.0, 3.0, 1.5])
    builds = [0, 0, 1, 1, 2]  # build 2: one unit
    e = verdicts.estimate(values, verdicts.Nested(builds, [0] * 5, list("abcde")), DEFAULTS)
    centre, interval = stats.mean_over_builds(values, np.array(builds))
    half = sps.t.ppf(0.975, 2) * math.sqrt(1 / 3)
    assert e.builds == 3 and e.value == pytest.approx(centre) == pytest.approx(1.5)
    assert e.se == pytest.approx(math.sqrt(1 / 3))
    assert e.interval == pytest.approx(interval)
    assert e.interval == pytest.approx((1.5 - half, 1.5 + half))


def test_a_build_whose_statistic_is_undefined_leaves_the_others_their_own_noise():
    """A non-mean statistic undefined in the first build (NaN) must not shift which build's rows
    the within-build bootstrap of the others resamples: each kept build is floored by its own
    noise (builds 1 and 2 are identical here, so the floor equals either one's alone)."""
    x = np.array([0.0, 1.0, 0.0, 1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0])
    nested = verdicts.Nested([0, 0, 1, 1, 1, 1, 2, 2, 2, 2], [0] * 10, list(range(10)))

    def spread(idx):
        return float(np.ptp(x[idx])) if len(idx) > 2 else float("nan")

    def spread_one(idx):
        return float(np.ptp(x[2:6][idx]))

    e = verdicts.estimate(x, nested, DEFAULTS, stat=spread)
    one = verdicts.estimate(
        x[2:6], verdicts.Nested([0] * 4, [0] * 4, list(range(4))), DEFAULTS, spread_one
    )
    assert e.builds == 2 and e.value == pytest.approx(3.0)
    assert e.se == pytest.approx(one.se / math.sqrt(2), rel=0.2)
