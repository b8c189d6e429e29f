"""The demo's extras (issue 35): one cell per benchmark, never all; a curve where a benchmark has a
selection method's run, the relearning attack wherever a benchmark names its data; its own
experiment, so the paper's cells are untouched."""

from supportbench.experiments.plan import ExperimentSpec
from supportbench.harness.extras import RELEARN_STEPS, extras_cells


def test_one_cell_per_benchmark_with_what_each_supports():
    spec = ExperimentSpec.from_toml("mini-paper")
    cells = extras_cells(spec)
    final = spec.runs("final")
    assert sorted(c.benchmark for c in cells) == sorted({r.benchmark for r in final})
    by = {c.benchmark: c for c in cells}
    for c in cells:
        assert c.experiment == "mini-paper-extras" and c.variant == "static"
        assert c.hp("relearn_steps") == RELEARN_STEPS  # every demo benchmark names its data
        twin = c.replace(
            experiment=spec.name,
            hyperparameters={
                k: v
                for k, v in dict(c.hyperparameters).items()
                if k not in ("eval_every", "relearn_steps")
            },
        )
        assert twin in final  # the extras run a cell of the paper's, again
    # controlled's final runs are its own interfaces: no one training path, no curve
    assert not by["controlled"].hp("eval_every")
    for b in ("natural_tofu", "lacuna"):
        assert by[b].hp("eval_every") == max(1, by[b].T // 10)
        assert by[b].method not in ("backbone", "lora")
