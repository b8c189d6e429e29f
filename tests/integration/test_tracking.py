"""Optional live logging (issue 35, ``harness.tracking``): one tracker per executed run gets every
curve point at its step and the terminal outcome, under the record's own numbers; the record is the
same with a tracker or without, a failing tracker never fails the run, and a tracker whose package
is missing is refused before anything runs. Fakes stand in for the packages (neither is a
dependency); where TensorBoard or W&B is installed, the files they write are read back too."""

import sys
import types

import pytest

from supportbench.errors import SpecError
from supportbench.experiments.metric_names import display_name
from supportbench.experiments.spec import RunSpec
from supportbench.harness.runner import Runner

pytestmark = pytest.mark.slow


def _spec(**hp):
    return RunSpec(
        "tofu", "forget01", "npo", "random", seed=0, T=5, experiment="track", hyperparameters=hp
    )


class _Calls:
    def __init__(self):
        self.opened, self.logged, self.closed = [], [], 0


def _fake_wandb(calls: _Calls, fail_on_log: bool = False) -> types.ModuleType:
    class Run:
        def log(self, values, step):
            if fail_on_log:
                raise RuntimeError("the server went away")
            calls.logged.append((step, dict(values)))

        def finish(self):
            calls.closed += 1

    def init(**kwargs):
        calls.opened.append(kwargs)
        return Run()

    mod = types.ModuleType("wandb")
    mod.init = init
    return mod


def _fake_tensorboard(calls: _Calls) -> types.ModuleType:
    class SummaryWriter:
        def __init__(self, log_dir):
            calls.opened.append({"log_dir": log_dir})
            self.points: dict[int, dict] = {}

        def add_text(self, tag, text, step):
            assert tag == "spec" and "run_key" in text

        def add_scalar(self, tag, value, step):
            calls.logged.append((step, {tag: value}))

        def close(self):
            calls.closed += 1

    mod = types.ModuleType("torch.utils.tensorboard")
    mod.SummaryWriter = SummaryWriter
    return mod


def _by_step(logged) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for step, values in logged:
        out.setdefault(step, {}).update(values)
    return out


@pytest.mark.parametrize("kind", ["wandb", "tensorboard"])
def test_the_tracker_gets_the_records_numbers_and_changes_nothing(
    kind, tofu, cache, tmp_path, monkeypatch
):
    calls = _Calls()
    module = "wandb" if kind == "wandb" else "torch.utils.tensorboard"
    fake = _fake_wandb(calls) if kind == "wandb" else _fake_tensorboard(calls)
    monkeypatch.setitem(sys.modules, module, fake)
    spec = _spec(eval_every=2, curve_items=3)
    plain = Runner(tmp_path / "plain", cache_dir=cache, progress=False).run(spec).record
    tracked_runner = Runner(tmp_path / "tracked", cache_dir=cache, progress=False, tracker=kind)
    tracked = tracked_runner.run(spec).record
    assert plain.status == tracked.status == "ok", (plain.error, tracked.error)
    # a view, never the record: the same outcome, curve and key with it or without
    assert tracked.outcome == plain.outcome and tracked.run_key == plain.run_key

    assert len(calls.opened) == 1 and calls.closed == 1
    if kind == "wandb":
        assert calls.opened[0]["name"] == spec.run_key[:12]
        assert calls.opened[0]["config"]["run_key"] == spec.run_key
        assert calls.opened[0]["config"]["lr"] == spec.hp("lr")
    else:
        assert calls.opened[0]["log_dir"].endswith(f"tracking/tensorboard/{spec.run_key[:12]}")
    steps = _by_step(calls.logged)
    # every curve point at its step, then the terminal outcome at step T
    assert sorted(steps) == [2, 4, 5]
    for p in tracked.outcome.curve:
        got = steps[p.step]
        assert (got["curve/J"], got["curve/G_F"], got["curve/D_coll"]) == (p.J, p.G_F, p.D_coll)
        # components under the one metric vocabulary (open-unlearning's names where it has one)
        assert got[f"curve/{display_name('forget_prob')}"] == p.components["forget_prob"]
    final = steps[spec.T]
    o = tracked.outcome
    assert (final["final/J"], final["final/G_F"], final["final/D_coll"]) == (o.J, o.G_F, o.D_coll)
    assert final["final/changed_outside"] == 0  # the enforcement count travels with the outcome

    # a run reused from its record is not logged again
    assert tracked_runner.run(spec).skipped and len(calls.opened) == 1


def test_a_failing_tracker_is_dropped_and_the_run_goes_on(
    tofu, cache, tmp_path, monkeypatch, capsys
):
    calls = _Calls()
    monkeypatch.setitem(sys.modules, "wandb", _fake_wandb(calls, fail_on_log=True))
    spec = _spec(eval_every=2, curve_items=3)
    rec = Runner(tmp_path / "r", cache_dir=cache, progress=False, tracker="wandb").run(spec).record
    assert rec.status == "ok" and [p.step for p in rec.outcome.curve] == [2, 4, 5]
    err = capsys.readouterr().err
    # reported once, at the first failure; then dropped (never closed: it is gone)
    assert err.count("wandb tracker failed to log") == 1 and "the server went away" in err
    assert calls.closed == 0


def test_a_missing_or_unknown_tracker_is_refused_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.raises(SpecError, match=r"needs the 'wandb' package.*pip install wandb"):
        Runner(tmp_path, progress=False, tracker="wandb")
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(SpecError, match=r"pip install tensorboard"):
        Runner(tmp_path, progress=False, tracker="tensorboard")
    with pytest.raises(SpecError, match=r"'mlflow'.*allowed: tensorboard, wandb"):
        Runner(tmp_path, progress=False, tracker="mlflow")
    assert not (tmp_path / "runs").exists()


def test_the_cli_names_the_allowed_trackers(capsys):
    from supportbench.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["run", "--benchmark", "tofu", "--log-to", "mlflow"])
    assert exc.value.code == 2
    assert "invalid choice: 'mlflow'" in capsys.readouterr().err


def test_tensorboard_event_files_hold_the_curve(tofu, cache, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    spec = _spec(eval_every=2, curve_items=3)
    runner = Runner(tmp_path, cache_dir=cache, progress=False, tracker="tensorboard")
    rec = runner.run(spec).record
    acc = EventAccumulator(str(tmp_path / "tracking" / "tensorboard" / spec.run_key[:12]))
    acc.Reload()
    events = acc.Scalars("curve/J")
    assert [e.step for e in events] == [p.step for p in rec.outcome.curve]
    # TensorBoard stores float32
    assert [e.value for e in events] == pytest.approx([p.J for p in rec.outcome.curve], rel=1e-6)
    assert acc.Scalars("final/J")[0].value == pytest.approx(rec.outcome.J, rel=1e-6)


def test_wandb_offline_writes_its_run(tofu, cache, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    spec = _spec(eval_every=2, curve_items=3)
    rec = Runner(tmp_path, cache_dir=cache, progress=False, tracker="wandb").run(spec).record
    assert rec.status == "ok"
    runs = list((tmp_path / "tracking" / "wandb").glob("wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0
