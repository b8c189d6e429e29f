"""One metric vocabulary (issue 36): `run`, the registry's views and the metric tables name a metric
the same way (open-unlearning's name where it has one), J is printed with its direction, and TOFU's
forget quality and model utility are on by default where a retain model exists, or `run` says why
not."""

from types import SimpleNamespace

from supportbench.cli import _print_outcome
from supportbench.experiments import metric_names as MN
from supportbench.experiments.spec import RunSpec
from supportbench.registry import synthetic as syn
from supportbench.registry.ingest import ingest
from supportbench.registry.store import connect


def test_the_registry_view_is_the_vocabulary(tmp_path):
    con = connect(tmp_path / "r.duckdb")
    assert dict(con.execute("SELECT component, name FROM metric_names").fetchall()) == (
        MN.OPEN_UNLEARNING
    )
    res = tmp_path / "res"
    comps = {"forget_rouge": 0.25, "forget_prob": 0.5, "protected_increase": 0.125}
    syn.write(res, syn.record(components=comps))
    ingest(con, res)
    got = dict(con.execute("SELECT name, value FROM metrics").fetchall())
    # each component under the name `run` prints for it
    assert got == {MN.display_name(k): v for k, v in comps.items()}
    assert set(got) == {"forget_Q_A_ROUGE", "forget_Q_A_Prob", "protected_increase"}


def _outcome(**components):
    return SimpleNamespace(J=0.5, G_F=0.75, D_coll=0.25, components=components)


def test_run_prints_j_with_its_direction_and_the_vocabulary(capsys):
    spec = RunSpec("lacuna", "Email_Address", "npo", "random")
    _print_outcome(spec, _outcome(forget_rouge=0.25, retain_increase=0.125))
    out = capsys.readouterr().out
    assert "J = +0.500000" in out and "forgetting gain minus collateral damage" in out
    assert "higher = better" in out
    assert "forget_Q_A_ROUGE" in out and "forget_rouge" not in out
    assert "retain_increase" in out  # no open-unlearning name: its own
    assert "forget_quality" not in out  # not TOFU's evaluation: nothing said about it


def test_tofu_forget_quality_is_on_with_a_retain_model_and_otherwise_explained(capsys):
    given = RunSpec(
        "tofu", "forget01", "npo", "random", hyperparameters={"benchmark.retain_model": "/m"}
    )
    assert given.hp("eval_full") is True
    off = {"benchmark.retain_model": "/m", "eval_full": False}
    assert (
        RunSpec("tofu", "forget01", "npo", "random", hyperparameters=off).hp("eval_full") is False
    )
    plain = RunSpec("tofu", "forget01", "npo", "random")
    assert plain.hp("eval_full") is False  # no retain model: training one is not free
    assert RunSpec("natural_tofu", "forget01", "npo", "random").hp("eval_full") is False
    natural = {"benchmark.retain_model": "/m"}
    assert RunSpec("natural_tofu", "forget01", "npo", "random", hyperparameters=natural).hp(
        "eval_full"
    )
    _print_outcome(RunSpec("natural_tofu", "forget01", "npo", "random"), _outcome())
    assert "forget_quality, model_utility: not computed: eval_full is off" in (
        capsys.readouterr().out
    )
    _print_outcome(RunSpec("tofu", "forget01", "npo", "random", hyperparameters=off), _outcome())
    assert "not computed: eval_full = false was given" in capsys.readouterr().out
    _print_outcome(plain, _outcome(forget_prob=0.5))
    out = capsys.readouterr().out
    assert "forget_quality, model_utility: not computed: eval_full is off" in out
    assert "--retain-model PATH" in out
    _print_outcome(given, _outcome(forget_quality=0.0123, model_utility=0.456))
    out = capsys.readouterr().out
    assert "forget_quality = 0.0123: KS-test p-value" in out
    assert "model_utility = 0.456: harmonic mean" in out
    _print_outcome(given, _outcome(forget_quality=0.5, model_utility=float("nan")))
    assert "model_utility = nan: not defined: fewer than its nine" in capsys.readouterr().out
