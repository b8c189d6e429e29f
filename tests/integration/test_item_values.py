"""A run keeps the per-item values its outcome was computed from, beside its record: J and forget
quality can be computed again from them (paper Eq. 19; TOFU's forget quality, a KS test of per-item
truth ratios)."""

import polars as pl
import pytest
from scipy.stats import ks_2samp

from supportbench.experiments.results import ResultsDir
from supportbench.experiments.spec import RunSpec
from supportbench.harness.runner import Runner

pytestmark = pytest.mark.slow


def test_a_tofu_run_stores_its_items_and_they_give_its_aggregates_again(tofu, cache, tmp_path):
    spec = RunSpec("tofu", "forget01", "npo", "random", T=2, hyperparameters={"eval_full": True})
    rec = Runner(tmp_path, cache_dir=cache, progress=False).run(spec).record
    assert rec.status == "ok", rec.error
    items = ResultsDir(tmp_path).read_items(rec.run_key)
    assert items.columns == ["metric", "index", "value"] and items.schema["value"] == pl.Float64

    def values(name):
        return items.filter(pl.col("metric") == name).sort("index")["value"].to_list()

    def mean_increase(part):  # Eq. 19's per-part mean increase of summed answer NLL over theta_0
        return sum(
            a - b for a, b in zip(values(f"nll:{part}"), values(f"nll_theta0:{part}"), strict=True)
        ) / len(values(f"nll:{part}"))

    G_F = mean_increase("forget")
    D_coll = max(0.0, mean_increase("retain")) + max(0.0, mean_increase("protected"))
    o = rec.outcome
    assert (o.G_F, o.D_coll, o.J) == pytest.approx((G_F, D_coll, G_F - D_coll), abs=1e-9)
    fq = ks_2samp(values("truth_ratio:forget"), values("truth_ratio_retain_model:forget")).pvalue
    assert o.components["forget_quality"] == pytest.approx(fq, abs=1e-12)
    assert len(values("truth_ratio:forget")) == len(values("nll:forget")) > 0
    text = rec.to_json()
    assert "nll_theta0" not in (
        text.decode() if isinstance(text, bytes) else text
    )  # the record stays small


def test_a_failed_rerun_leaves_no_items_of_the_earlier_run(tofu, cache, tmp_path):
    res = ResultsDir(tmp_path)
    spec = RunSpec("tofu", "forget01", "npo", "random", T=2)
    runner = Runner(tmp_path, cache_dir=cache, progress=False)
    assert runner.run(spec).record.status == "ok" and res.items(spec.run_key).is_file()
    runner.force = True
    original = type(tofu).evaluate
    try:
        type(tofu).evaluate = lambda *a, **k: (_ for _ in ()).throw(
            RuntimeError("evaluation broke")
        )
        assert runner.run(spec).record.status == "failed"
    finally:
        type(tofu).evaluate = original
    assert not res.items(spec.run_key).exists()
