from pathlib import Path

import pytest

from supportbench.errors import SpecError
from supportbench.experiments.plan import ExperimentSpec

BASE = {"experiment": {"name": "x", "benchmarks": ["tofu"], "fields": ["forget01", "forget10"],
                       "objectives": ["npo"], "methods": ["intervention_score", "random", "wagle"],
                       "seeds": {"calibration": [1], "final": [2, 3]}}}


def test_grid_and_order():
    s = ExperimentSpec.from_dict(BASE)
    cal, fin = s.runs("calibration"), s.runs("final")
    assert len(cal) == 2 and all(r.variant == "dirr" for r in cal)
    assert len(fin) == 2 * 2 * (3 + 1)
    # runs of one cell are adjacent (they share diagnostics)
    assert [(r.field, r.seed) for r in fin[:4]] == [("forget01", 2)] * 4
    assert len(s.expected_cells()) == len(set(s.expected_cells())) == 18


def test_shipped_mini_paper_spec_parses():
    from importlib import resources

    s = ExperimentSpec.from_toml(resources.files("supportbench.experiments").joinpath("mini-paper.toml"))
    assert len(s.methods) == 11 and s.objectives == ("npo", "simnpo")


@pytest.mark.parametrize("mutate,msg", [
    (lambda e: e["seeds"].update(final=[1]), r"calibration seeds \[1\] also appear among final"),
    (lambda e: e["seeds"].update(test=[5]), "unknown seed split"),
    (lambda e: e.update(budgett=1), "unknown \\[experiment\\] key"),
    (lambda e: e.pop("fields"), "lacks \\['fields'\\]"),
])
def test_bad_specs(mutate, msg):
    import copy

    raw = copy.deepcopy(BASE)
    mutate(raw["experiment"])
    with pytest.raises(SpecError, match=msg):
        ExperimentSpec.from_dict(raw)


def test_shipped_spec_by_name_and_unknown_name(tmp_path, monkeypatch):
    from supportbench.experiments.plan import resolve_spec_path, shipped_specs

    assert "mini-paper" in shipped_specs()
    assert ExperimentSpec.from_toml("mini-paper").name == "mini-paper"
    assert resolve_spec_path("mini-paper.toml") == shipped_specs()["mini-paper"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mini-paper.toml").write_text("x")          # a file that exists wins over the shipped name
    assert resolve_spec_path("mini-paper.toml") == Path("mini-paper.toml")
    with pytest.raises(SpecError, match="shipped: .*mini-paper"):
        resolve_spec_path("mini-papre")
