"""The demo's extras (issue 35): one cell per benchmark, never all; a curve on each (a selection
method's run where the benchmark has one, else its own intervention's), the relearning attack
wherever a benchmark names its data; its own experiment, so the paper's cells are untouched."""

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
                if k not in ("eval_every", "curve_metrics", "relearn_steps")
            },
        )
        assert twin in final  # the extras run a cell of the paper's, again
    # a curve on every benchmark; controlled's through its own interface (intervene's on_step)
    for b in ("natural_tofu", "lacuna", "controlled"):
        assert by[b].hp("eval_every") == max(1, by[b].T // 10)
        assert by[b].hp("curve_metrics") is True  # the benchmark's own metrics on the curve
        assert (by[b].method in ("backbone", "lora")) == (b == "controlled")


def test_a_cell_under_a_frozen_decision_takes_the_settings_its_final_run_ran_under():
    from types import SimpleNamespace

    from supportbench.harness.extras import DECIDED, as_ran

    spec = ExperimentSpec.from_toml("mini-paper")
    cells = extras_cells(spec)
    ctl = next(c for c in cells if c.benchmark == "controlled")
    decided = {"lr": 0.003, "benchmark.primary_locator": "ig", "benchmark.decision": "d" * 64}

    def rec(experiment, **hp):
        s = ctl.canonical()  # as a record keeps it (build 0 left out)
        s["experiment"], s["hyperparameters"] = experiment, {**s["hyperparameters"], **hp}
        return SimpleNamespace(spec=s)

    other = {**decided, "lr": 0.5, "benchmark.decision": "e" * 64}
    results = SimpleNamespace(
        records=lambda: iter([rec(spec.name, **decided), rec("another", **other)])
    )
    got = {c.benchmark: c for c in as_ran(cells, results, spec.name)}
    assert {k: got["controlled"].hp(k) for k in DECIDED} == decided
    # the extras' own settings stay, and the attack with them
    assert got["controlled"].hp("relearn_steps") == RELEARN_STEPS
    assert got["controlled"].experiment == "mini-paper-extras"
    # a benchmark that freezes no controlled decision is left as it was
    assert [c for c in cells if c.benchmark != "controlled"] == [
        c for b, c in got.items() if b != "controlled"
    ]
    # no final run recorded yet: the cell as planned
    empty = SimpleNamespace(records=lambda: iter([]))
    assert as_ran(cells, empty, spec.name) == cells
