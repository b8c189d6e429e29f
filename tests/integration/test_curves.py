"""Curves (issue 35): ``eval_every`` = K evaluates J's components on a fixed slice of the
evaluation split after every K-th step and the last; the points travel in the record and the
registry's metrics view with their step, the terminal model and its row are exactly those of the
run without a curve, and the report draws them. Refused where a run has no one training path."""

import pytest

from supportbench.benchmarks.base import curve_point
from supportbench.errors import SpecError
from supportbench.experiments.record import RunRecord
from supportbench.experiments.spec import RunSpec
from supportbench.harness.resolve import resolve
from supportbench.harness.runner import Runner
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect

pytestmark = pytest.mark.slow


def _spec(**hp):
    return RunSpec(
        "tofu", "forget01", "npo", "random", seed=0, T=5, experiment="curves", hyperparameters=hp
    )


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
    # a run without a curve keeps its file and its key as before curves existed
    assert plain.outcome.curve is None and "curve" not in plain.to_dict()["outcome"]
    assert _spec(eval_every=0).run_key == _spec().run_key != _spec(eval_every=2).run_key
    assert RunRecord.from_json(curved.to_json()).outcome.curve == curved.outcome.curve

    # the last point, recomputed by hand on the terminal model: the slice is the split's first
    # records, against theta_0's NLLs of the same records
    bench, model = runner.theta0(_spec())
    roles = bench.roles("forget01", 0)
    assert curve_point(model, roles, 3)["J"] == 0.0  # theta_0 itself: nothing changed

    reg = tmp_path / "reg.duckdb"
    con = connect(reg)
    ingest(con, tmp_path / "results")
    con.close()
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


@pytest.mark.parametrize(
    "spec, why",
    [
        (_spec(eval_every=2).replace(variant="dirr"), "DIR-R run trains several branches"),
        (
            RunSpec(
                "controlled", "t00", "npo", "backbone", seed=0, hyperparameters={"eval_every": 2}
            ),
            "own interventions",
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
