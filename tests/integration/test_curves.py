"""Curves (issue 35): ``eval_every`` = K evaluates J's components on a fixed slice of the
evaluation split after every K-th step and the last; the points travel in the record and the
registry's metrics view with their step, the terminal model and its row are exactly those of the
run without a curve, and the report draws them. Refused where the runner has no one training path
to watch (DIR-R); a benchmark's own interventions draw theirs through ``intervene(on_step=...)``
(tests/integration/test_controlled.py). The relearning attack (same issue) runs after
the terminal score."""

import weakref

import pytest
import torch

import supportbench.harness.runner as runner_module
from supportbench.benchmarks.base import curve_point
from supportbench.errors import SpecError
from supportbench.experiments.record import RunRecord
from supportbench.experiments.spec import RunSpec
from supportbench.harness.resolve import resolve
from supportbench.harness.runner import Runner
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect
from supportbench.unlearning.relearn import RESURFACING

pytestmark = pytest.mark.slow


def _spec(**hp):
    return RunSpec(
        "tofu", "forget01", "npo", "random", seed=0, T=5, experiment="curves", hyperparameters=hp
    )


def _registry(tmp_path):
    """The runs under ``tmp_path/results`` ingested into a fresh registry file; its path."""
    reg = tmp_path / "reg.duckdb"
    con = connect(reg)
    ingest(con, tmp_path / "results")
    con.close()
    return reg


def test_a_curve_reads_the_model_and_never_changes_the_terminal_run(tofu, cache, tmp_path):
    runner = Runner(tmp_path / "results", cache_dir=cache, progress=False)
    plain = runner.run(_spec()).record
    curved = runner.run(_spec(eval_every=2, curve_items=3)).record
    assert plain.status == curved.status == "ok", (plain.error, curved.error)
    # the terminal model and its score are the same to the bit: the curve only reads the model
    assert curved.outcome.J == plain.outcome.J and curved.outcome.G_F == plain.outcome.G_F
    assert {k: v for k, v in curved.outcome.components.items()} == plain.outcome.components
    # every K-th step and the last, each J = G_F - D_coll on its slice
    assert [p.step for p in curved.outcome.curve] == [2, 4, 5]
    for p in curved.outcome.curve:
        assert pytest.approx(p.G_F - p.D_coll, abs=1e-12) == p.J
        assert {"forget_prob", "retain_prob", "protected_prob"} <= set(p.components)
    assert curved.compute.wall_s["curve"] > 0
    # the trained model is left as inference expects it: the geometry frozen, no gradient held
    live = runner.live_model(_spec())
    assert not any(p.requires_grad or p.grad is not None for p in live.parameters())
    # a run without a curve keeps its file and its key as before curves existed
    assert plain.outcome.curve is None and "curve" not in plain.to_dict()["outcome"]
    assert _spec(eval_every=0).run_key == _spec().run_key != _spec(eval_every=2).run_key
    assert RunRecord.from_json(curved.to_json()).outcome.curve == curved.outcome.curve

    # the last point, recomputed by hand on the terminal model: the slice is the split's first
    # records, against theta_0's NLLs of the same records; the reset also drops every gradient an
    # earlier phase left (a whole model's, after an in-process fine-tune)
    for p in runner.live_model(_spec()).parameters():
        p.grad = torch.ones_like(p)
    bench, model = runner.theta0(_spec())
    assert all(p.grad is None for p in model.parameters())
    roles = bench.roles("forget01", 0)
    assert curve_point(model, roles, 3)["J"] == 0.0  # theta_0 itself: nothing changed

    reg = _registry(tmp_path)
    con = connect(reg, read_only=True)
    rows = con.execute(
        "SELECT step, value FROM metrics WHERE run_key = ? AND name = 'J' ORDER BY step",
        [curved.run_key],
    ).fetchall()
    assert rows == [(p.step, p.J) for p in curved.outcome.curve]
    # the terminal rows (step NULL) are those of the run without a curve, name for name
    term = "SELECT name, value FROM metrics WHERE run_key = ? AND step IS NULL ORDER BY name"
    assert (
        con.execute(term, [curved.run_key]).fetchall()
        == con.execute(term, [plain.run_key]).fetchall()
    )
    con.close()

    from supportbench.reports.figures import Missing, curves
    from supportbench.reports.tables import Context

    con = connect(reg, read_only=True)
    fig = curves(Context.from_registry(con, "curves"), con)
    lines = fig.axes[0].get_lines()
    assert [list(ln.get_xdata()) for ln in lines if len(ln.get_xdata()) > 2] == [[2, 4, 5]]
    with pytest.raises(Missing):
        curves(Context.from_registry(con, "curves"), None)
    con.close()


def test_curve_metrics_are_the_benchmarks_own_evaluation_of_the_slice(tofu, cache, tmp_path):
    """``curve_metrics``: every point also carries TOFU's own metrics (truth ratios, forget
    quality, ROUGE, model utility) on the slice; its J is the plain curve's to the bit, the terminal
    run is unchanged, the rows reach the registry with their step and the figure draws forget
    quality under J. The slice's evaluation is the whole evaluation's first records, the retain
    model's truth ratios included (its cache is kept per slice length)."""
    runner = Runner(tmp_path / "results", cache_dir=cache, progress=False)
    plain = runner.run(_spec(eval_every=2, curve_items=3)).record
    rich = runner.run(_spec(eval_every=2, curve_items=3, curve_metrics=True)).record
    assert rich.status == "ok", rich.error
    assert rich.outcome.J == plain.outcome.J and rich.outcome.components == plain.outcome.components
    assert [(p.step, p.J, p.G_F, p.D_coll) for p in rich.outcome.curve] == [
        (p.step, p.J, p.G_F, p.D_coll) for p in plain.outcome.curve
    ]
    for p, q in zip(rich.outcome.curve, plain.outcome.curve, strict=True):
        assert {k: p.components[k] for k in q.components} == q.components
        assert {"forget_quality", "forget_rouge", "forget_truth_ratio", "retain_rouge"} <= set(
            p.components
        )
        assert 0.0 <= p.components["forget_quality"] <= 1.0
        assert 0.0 <= p.components["forget_rouge"] <= 1.0
    assert _spec(eval_every=2, curve_metrics=False).run_key == _spec(eval_every=2).run_key
    assert _spec(eval_every=2, curve_metrics=True).run_key != _spec(eval_every=2).run_key

    bench, model = runner.theta0(_spec())
    roles = bench.roles("forget01", 0)
    whole = bench.evaluate(model, roles, "eval", full=True)
    head = bench.evaluate(model, roles.head(3), "eval", full=True)
    assert head.J == 0.0  # theta_0 itself
    for name, values in head.items.items():
        assert values == whole.items[name][: len(values)], name
    assert len(head.items["truth_ratio_retain_model:forget"]) == min(
        3, len(whole.items["nll:forget"])
    )

    reg = _registry(tmp_path)
    con = connect(reg, read_only=True)
    rows = con.execute(
        "SELECT step, value FROM metrics WHERE run_key = ? AND name = 'forget_quality' "
        "ORDER BY step",
        [rich.run_key],
    ).fetchall()
    assert rows == [(p.step, p.components["forget_quality"]) for p in rich.outcome.curve]
    from supportbench.reports.figures import CURVE_METRICS, curves

    # the figure asks for its metrics under the view's names: TOFU's two are found there
    found = "SELECT count(*) FROM metrics WHERE run_key = ? AND name = ? AND step IS NOT NULL"
    for name in ("forget_quality", "forget_Q_A_ROUGE"):
        assert name in CURVE_METRICS
        assert con.execute(found, [rich.run_key, name]).fetchone()[0] == len(rich.outcome.curve)
    from supportbench.reports.tables import Context

    fig = curves(Context.from_registry(con, "curves"), con)
    con.close()
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "forget_quality on the curve slice"
    drawn = [ln for ln in fig.axes[1].get_lines() if len(ln.get_xdata()) > 2]
    assert [list(ln.get_xdata()) for ln in drawn] == [[2, 4, 5]]
    assert list(drawn[0].get_ydata()) == [
        p.components["forget_quality"] for p in rich.outcome.curve
    ]


def test_curve_metrics_need_a_curve():
    with pytest.raises(SpecError, match=r"curve_metrics = true .*\(eval_every = 0\)"):
        resolve(_spec(curve_metrics=True), read_inputs=False)
    with pytest.raises(SpecError):
        _spec(eval_every=2, curve_metrics="maybe")


@pytest.mark.parametrize(
    "spec, why",
    [
        (_spec(eval_every=2).replace(variant="dirr"), "DIR-R run trains several branches"),
        (
            RunSpec(
                "controlled", "t00", "npo", "backbone", seed=0, hyperparameters={"eval_every": 2}
            ).replace(variant="dirr"),
            "runs its interfaces statically",
        ),
    ],
)
def test_curves_are_refused_where_a_run_has_no_one_path(spec, why):
    with pytest.raises(SpecError, match=why):
        resolve(spec, read_inputs=False)


def test_curve_settings_are_range_checked():
    for bad in ({"eval_every": -1}, {"curve_items": 0}, {"eval_every": 1.5}):
        with pytest.raises(SpecError):
            _spec(**bad)


def test_the_relearning_attack_runs_after_the_score_and_is_keyed(
    tofu, cache, tmp_path, monkeypatch
):
    """``relearn_steps`` = N: the terminal score and the enforcement count are the run's without
    the attack (it comes after them); LACUNA's counts join the components and the registry's
    terminal metrics; the attack's settings are in the key, a run without it keeps its key. TOFU's
    attacker trains on background text no role reads; its units are the forget evaluation
    questions, each answer the target. The run's trainer (its support state) is released before
    the attack, which trains every parameter beside it otherwise."""
    runner = Runner(tmp_path / "results", cache_dir=cache, progress=False)
    plain = runner.run(_spec()).record
    trainers, alive = [], []

    class Recorded(runner_module.SupportTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)  # the trainer, its optimizer and a support leaf
            trainers.extend(weakref.ref(x) for x in (self, self.optimizer, self.leaves.params[0]))

    attack = Runner._relearn

    def watched(*args, **kwargs):
        alive.append(sum(r() is not None for r in trainers))
        return attack(*args, **kwargs)

    monkeypatch.setattr(runner_module, "SupportTrainer", Recorded)
    monkeypatch.setattr(Runner, "_relearn", staticmethod(watched))
    attacked = runner.run(_spec(relearn_steps=3)).record
    assert attacked.status == "ok", attacked.error
    assert len(trainers) == 3 and alive == [0]
    assert attacked.outcome.J == plain.outcome.J
    c = attacked.outcome.components
    counts = {k: c.pop(k) for k in RESURFACING}
    assert c == plain.outcome.components  # nothing else changed
    roles = tofu.roles("forget01", 0)
    forget = roles.splits["eval"]["forget"]
    assert counts["total_forget_people"] == len(forget) and counts["attempts"] == 1
    assert counts["forgotten_by_unlearn"] + counts["still_leaking_after_unlearn"] == len(forget)
    assert 0 <= counts["resurfaced_after_relearn"] <= counts["forgotten_by_unlearn"]
    rs = tofu.relearn_set(roles)
    assert [p.target for p in rs.probes] == [r["answer"] for r in forget.rows]
    background = set(tofu.neutral_texts())
    assert 0 < len(rs.train) < len(background)  # the N diagnostics' sentences are left out
    assert _spec(relearn_steps=0).run_key == _spec().run_key != attacked.run_key
    assert _spec(relearn_steps=3, relearn_batch_size=4).run_key != attacked.run_key

    reg = tmp_path / "reg.duckdb"
    con = connect(reg)
    ingest(con, tmp_path / "results")
    got = dict(
        con.execute(
            "SELECT name, value FROM metrics WHERE run_key = ? AND step IS NULL",
            [attacked.run_key],
        ).fetchall()
    )
    con.close()
    assert {k: got[k] for k in RESURFACING} == counts


def test_the_relearning_attack_is_refused_where_a_benchmark_names_no_data(monkeypatch):
    from supportbench.benchmarks.base import BENCHMARKS

    monkeypatch.delattr(BENCHMARKS.get("tofu"), "relearn_set")
    with pytest.raises(SpecError, match=r"relearn_steps = 2: tofu names no data outside its roles"):
        resolve(_spec(relearn_steps=2), read_inputs=False)
    resolve(_spec(relearn_steps=0), read_inputs=False)
