"""One run end to end (DESIGN data flow): theta_0 -> diagnostics -> method scores -> support ->
support-constrained training (-> DIR-R) -> evaluation -> one self-contained record file.

``Runner`` keeps what runs share in one process: prepared benchmarks, a CPU copy of theta_0 (each
run starts from it), and the Diagnostics of the last (benchmark, field, objective, seed) so methods
scored on the same cell share every gradient pass. ``Runner.run`` returns a ``RunResult``: the typed
``RunRecord`` (written atomically through ``ResultsDir``) and whether a stored one was reused. A run
whose record exists is skipped unless ``force``, the record failed (a failed run is retried), or its
code fingerprint differs from the current code's (a stale record is rerun unless ``reuse_stale``;
see ``harness.fingerprint``). A failing run still writes its record (status failed / diverged, with
the error text and whatever the run produced before it failed).
"""

from __future__ import annotations

import json
import math
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import torch

from supportbench import __version__
from supportbench.benchmarks.base import (
    BENCHMARKS,
    Evaluated,
    InterfaceBenchmark,
    curve_point,
    record_theta0_nll,
    theta0_nll,
)
from supportbench.errors import DecisionError, DivergenceError, SpecError, SupportbenchError
from supportbench.experiments.decisions import check_decision_matches, verify_decision
from supportbench.experiments.record import (
    Compute,
    CurvePoint,
    DirrResult,
    Outcome,
    Provenance,
    RecordError,
    RunRecord,
    SupportInfo,
)
from supportbench.experiments.results import ResultsDir
from supportbench.experiments.spec import RunSpec
from supportbench.harness.fingerprint import fingerprint
from supportbench.harness.resolve import ResolvedRun, resolve
from supportbench.harness.tracking import Guarded, check_tracker, open_tracker
from supportbench.harness.validate import validate_spec
from supportbench.methods.base import compute_scores
from supportbench.methods.diagnostics import Diagnostics
from supportbench.unlearning.column_grads import remove_column_hooks, use_column_grads
from supportbench.unlearning.enforcement import Changes, SupportMasks, count_changes, enforce
from supportbench.unlearning.losses import reference_nll
from supportbench.unlearning.memory import diagnostic_buffers
from supportbench.unlearning.models import cpu_mode, resolve_device
from supportbench.unlearning.relearn import relearning_attack
from supportbench.unlearning.support import select
from supportbench.unlearning.train import (
    SupportTrainer,
    TrainConfig,
    UnlearningData,
    set_activation_checkpointing,
)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def git_commit() -> str:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=5,
                cwd=Path(__file__).parent,
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def resolve_budget(budget: float, total: int) -> int:
    return int(budget) if budget >= 1 else max(1, int(budget * total))


class RunResult(NamedTuple):
    """A run's record, and whether the runner reused a stored one instead of running."""

    record: RunRecord
    skipped: bool = False


@dataclass
class _Draft:
    """What a run has produced so far; a failing run's record keeps what came before the failure."""

    compute: Compute = field(default_factory=Compute)
    outcome: Outcome | None = None
    items: dict[str, list[float]] | None = (
        None  # the outcome's per-item values, stored beside the record
    )
    support: SupportInfo | None = None
    dirr: DirrResult | None = None
    roles: dict | None = None
    data_hash: str | None = None
    model_hash: str | None = None


class Runner:
    def __init__(
        self,
        results_dir: str | Path = "results",
        *,
        cache_dir: str | Path | None = None,
        progress: bool = True,
        force: bool = False,
        device: str | None = "auto",
        reuse_stale: bool = False,
        tracker: str | None = None,
    ):
        check_tracker(tracker)  # an unknown or missing tracker is refused before any run
        self.tracker = tracker  # optional live logging of each run executed (harness.tracking)
        self._track: Guarded | None = None  # the tracker of the run in progress
        self.results = ResultsDir(results_dir)
        self.reuse_stale = reuse_stale
        self.cache_dir = cache_dir
        self.progress = progress
        self.force = force
        self.device = resolve_device(
            device
        )  # where models train and run; not part of a run's identity
        self._benchmarks: dict[str, object] = {}
        self._theta0: dict[tuple, dict] = {}
        self._models: dict[tuple, object] = {}
        self._model_hash: dict[tuple, str] = {}
        self._diag_key = None
        self._diag = None
        self._planned: dict[tuple, set[str]] = {}
        self._planned_methods: dict[tuple, dict[tuple, ResolvedRun]] = {}
        self._scores_cell = None  # the cell whose methods' scores are cached (``scores``)
        self._scores: dict[tuple, torch.Tensor] = {}
        self._scores_geometry = None
        self._git = git_commit()
        self.corrupt: dict[
            str, str
        ] = {}  # record file -> why it could not be read (the run is redone)

    # ---- shared state ----------------------------------------------------------------------------
    def benchmark(self, spec: RunSpec):
        """The spec's benchmark, built once per (name, ``benchmark.*`` options, model, build): a
        benchmark object tokenises and evaluates with the tokenizer of the one model it prepared."""
        key = self.bench_key(spec)
        if key not in self._benchmarks:
            options = spec.benchmark_options()
            cls = BENCHMARKS.get(spec.benchmark)
            try:  # benchmarks that train models of their own do it on the runner's device
                self._benchmarks[key] = cls(
                    cache_dir=self.cache_dir,
                    progress=self.progress,
                    device=self.device,
                    build=spec.build,
                    **options,
                )
            except TypeError as exc:
                raise SpecError(
                    f"benchmark '{spec.benchmark}' rejected its options {options}: {exc}"
                ) from None
        return self._benchmarks[key]

    @staticmethod
    def bench_key(spec: RunSpec) -> tuple:
        return (
            spec.benchmark,
            json.dumps(spec.prefixed("benchmark."), sort_keys=True),
            spec.model,
            spec.hp("dtype"),
            spec.build,
        )

    def live_model(self, spec: RunSpec):
        """The model object runs of ``spec``'s benchmark and model use, as the last run left it."""
        return self._models[self.bench_key(spec)]

    def theta0_hash(self, spec: RunSpec) -> str:
        """The content hash of the run's theta_0 (prepared on first use)."""
        if self.bench_key(spec) not in self._model_hash:
            self.theta0(spec)
        return self._model_hash[self.bench_key(spec)]

    def theta0(self, spec: RunSpec):
        """The run's model, reset to theta_0 (weights copied from the in-memory snapshot)."""
        key = self.bench_key(spec)
        bench = self.benchmark(spec)
        if key not in self._models:
            prepared = bench.prepare(spec.model_path())
            for p in prepared.model.parameters():  # a theta_0 fine-tuned here holds its gradients:
                p.grad = None  # not moved to the device beside the weights
            # frozen weights in the run's dtype (bf16 on a GPU); the support trains in fp32
            # (SupportTrainer)
            self._models[key] = prepared.model.to(self.device, getattr(torch, spec.hp("dtype")))
            # the snapshot waits on the CPU: a GPU holds one copy of a large model, not two
            self._theta0[key] = {
                k: v.detach().to("cpu", copy=True) for k, v in prepared.model.state_dict().items()
            }
            self._model_hash[key] = prepared.model_hash
        model = self._models[key]
        model.load_state_dict(self._theta0[key])
        if hasattr(
            model, "gradient_checkpointing_enable"
        ):  # per run: runs of one model may differ in it
            set_activation_checkpointing(model, bool(spec.hp("activation_checkpointing")))
        for p in model.parameters():
            p.requires_grad_(False)
            # gradients an earlier phase left (a theta_0 built here by fine-tuning keeps its own):
            # every later run would hold them beside its own, a whole model's at 8B
            p.grad = None
        remove_column_hooks(model)  # an earlier column_grads run's, had it failed mid-training
        return bench, model

    @staticmethod
    def _cell(spec: RunSpec) -> tuple:
        """What a Diagnostics depends on: runs with the same cell share one."""
        return (
            *Runner.bench_key(spec),
            spec.field,
            spec.objective,
            spec.seed,
            tuple(sorted(spec.prefixed("objective.").items())),
            spec.hp("diag_batch_size"),
        )

    def plan(self, specs) -> None:
        """Announce the runs that come next: each cell's Diagnostics then computes the union of what
        their methods read in one fused pass, and the first run of a cell scores every announced
        method with the instance resolved here. Runs already recorded, and runs of a benchmark's own
        interfaces, are left out; a spec that does not resolve fails in ``run``."""
        self._planned, self._planned_methods = {}, {}
        for spec in specs:
            try:
                resolved = resolve(spec, read_inputs=False)
            except SupportbenchError:
                continue
            if resolved.interface or self.reusable(resolved) is not None:
                continue
            cell = self._cell(spec)
            self._planned.setdefault(cell, set()).update(resolved.method.requires)
            self._planned_methods.setdefault(cell, {})[self._method_key(spec)] = resolved

    @staticmethod
    def _method_key(spec: RunSpec) -> tuple:
        return spec.method, json.dumps(spec.prefixed("method."), sort_keys=True)

    def scores(self, resolved: ResolvedRun, model, roles):
        """(scores, geometry) of the run's method at theta_0. The first run of a cell computes the
        cell's Diagnostics and, from them, the scores of every method announced for the cell
        (``plan``); then the Diagnostics are dropped, so their full-size buffers (7 GiB each at 8B)
        are not held through training. Every method's scores come from the same buffers whichever
        run of the cell comes first."""
        spec = resolved.spec
        cell = self._cell(spec)
        if cell != self._scores_cell:
            self._scores_cell, self._scores, self._scores_geometry = cell, {}, None
        key = self._method_key(spec)
        if key not in self._scores:
            diag = self.diagnostics(resolved, model, roles)
            methods = [(key, resolved.method)] + [
                (k, o.method)
                for k, o in self._planned_methods.get(cell, {}).items()
                if k not in self._scores and k != key
            ]
            for i, (k, method) in enumerate(methods):
                try:
                    self._scores[k] = compute_scores(method, diag)
                # its own run computes it again and records the failure
                except Exception:  # noqa: BLE001
                    if k == key:
                        raise
                # keep only what a method still to be scored reads (a no-op after a fused pass of
                # all of them)
                diag.release(r for _, m in methods[i + 1 :] for r in m.requires)
            self._scores_geometry = diag.geometry
            self._diag = self._diag_key = None
        return self._scores[key], self._scores_geometry

    def diagnostics(self, resolved: ResolvedRun, model, roles) -> Diagnostics:
        spec = resolved.spec
        key = self._cell(spec)
        if key != self._diag_key:
            obj = resolved.objective
            self._diag = Diagnostics(
                model,
                roles.diagnostics,
                obj,
                seed=spec.seed,
                batch_size=spec.hp("diag_batch_size"),
                progress=self.progress,
            )
            self._diag_key = key
            union = sorted(self._planned.get(key, ()))
            if self._buffers_fit(union, obj, self._diag.geometry):
                self._diag.prepare(union)  # one fused pass for every announced method of the cell
        return self._diag

    def _buffers_fit(self, requires, objective, geometry) -> bool:
        """Whether the full-size buffers of ``requires`` fit in 80% of the GPU memory still
        available (always on the CPU). When they do not (every method's keys at 8B: 13 buffers, 91
        GiB), the cell's methods are scored one after another, each key kept only while a method
        still to be scored reads it (``scores``)."""
        if self.device.type != "cuda":
            return True
        free, _ = torch.cuda.mem_get_info(self.device)
        free += torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        return (
            diagnostic_buffers(requires, objective.uses_retain) * geometry.total_cost * 4
            <= 0.8 * free
        )

    @property
    def results_dir(self) -> Path:
        return self.results.root

    def reusable(self, resolved: ResolvedRun, decision: dict | None = None) -> RunRecord | None:
        """The stored record of the resolved run when it stands: present, not failed, computed by
        the current code (same fingerprint) or ``reuse_stale``, and, for a DIR-R run given a frozen
        ``decision``, run under that decision. None means the run must (re)run."""
        spec = resolved.spec
        if self.force or not self.results.has_record(spec.run_key):
            return None
        try:
            rec = self.results.read_record(spec.run_key)
        except RecordError as exc:  # the cell is not done: say so, and let the run replace the file
            path = str(self.results.record(spec.run_key))
            if path not in self.corrupt:
                print(f"warning: {exc}; the run will be redone", file=sys.stderr)
            self.corrupt[path] = str(exc)
            return None
        if rec.status == "failed":
            return None
        if (
            not self.reuse_stale
            and (rec.fingerprint and rec.fingerprint.hash) != fingerprint(resolved).hash
        ):
            return None
        if decision is not None and (
            rec.dirr is None or rec.dirr.decision_hash != decision["hash"]
        ):
            return None  # recorded under another (e.g. superseded) decision: rerun under this one
        return rec

    # ---- one run ---------------------------------------------------------------------------------
    def run(
        self, spec: RunSpec, decision: dict | None = None, *, complete: bool = False
    ) -> RunResult:
        """Run ``spec`` (DIR-R final runs need a frozen ``decision``); ``complete`` = post-hoc
        completion. The spec is resolved once (``harness.resolve``): its method and objective are
        built here, for this run only. An invalid spec raises before anything is recorded
        (``harness.resolve``, ``harness.validate``)."""
        resolved = resolve(spec)
        validate_spec(resolved)
        if (
            spec.variant == "dirr"
            and spec.split != "calibration"
            and decision is None
            and spec.hp("tau") is None
        ):
            raise DecisionError(
                f"DIR-R {spec.split} run refused: no frozen decision. Freeze tau* on calibration "
                "seeds first, or set an explicit tau (recorded as unfrozen)"
            )
        if decision is not None:
            verify_decision(decision)
            check_decision_matches(spec, decision)
        old = None if complete else self.reusable(resolved, decision)
        if old is not None:
            return RunResult(old, skipped=True)
        code = fingerprint(resolved)  # of the method as built, before it scores
        provenance = self._provenance()
        provenance.sources = spec.sources() or None
        draft = _Draft()
        self._track = self._open_tracker(spec)
        try:
            status, error = self._attempt(resolved, draft, decision, complete)
            if status == "ok" and self._track is not None:
                o = draft.outcome
                self._track.log(spec.T, "final", o.J, o.G_F, o.D_coll, o.components)
        finally:
            if self._track is not None:
                self._track.close()
            self._track = None
        provenance.data_hash, provenance.model_hash = draft.data_hash, draft.model_hash
        provenance.finished_at = now()
        rec = RunRecord(
            run_key=spec.run_key,
            spec=spec.canonical(),
            status=status,
            error=error,
            fingerprint=code,
            outcome=draft.outcome,
            support=draft.support,
            dirr=draft.dirr,
            compute=draft.compute,
            provenance=provenance,
            roles=draft.roles,
        )
        if (
            draft.items and status == "ok"
        ):  # before the record: a record implies its per-item values exist
            self.results.write_items(spec.run_key, draft.items)
        else:  # a failed rerun keeps no values of an earlier run
            self.results.items(spec.run_key).unlink(missing_ok=True)
        self.results.write_record(rec)
        return RunResult(rec)

    def _attempt(
        self, resolved: ResolvedRun, draft: _Draft, decision: dict | None, complete: bool
    ) -> tuple[str, str | None]:
        """(status, error) of executing the run into ``draft``: a failure is kept, not raised."""
        try:
            self._execute(resolved, draft, decision, complete)
        except DivergenceError as exc:
            return "diverged", f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # the record keeps the failure; nothing is imputed later
            return "failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
        return "ok", None

    def _open_tracker(self, spec: RunSpec) -> Guarded | None:
        """The optional tracker of one executed run (``harness.tracking``): named by the run key,
        given its resolved settings; None without one."""
        if self.tracker is None:
            return None
        full = spec.canonical_full()
        config = {
            "run_key": spec.run_key,
            **{k: v for k, v in full.items() if k != "hyperparameters"},
            **full["hyperparameters"],
        }
        return Guarded(
            self.tracker,
            lambda: open_tracker(
                self.tracker,
                name=spec.run_key,
                log_dir=self.results.tracking / self.tracker,
                config=config,
            ),
            spec.run_key,
        )

    def complete_post_hoc(self, spec: RunSpec, decision: dict | None = None) -> RunResult:
        """Evaluate the candidates a non-triggered DIR-R run skipped (for the available-gain
        denominator).

        Reruns the cell (bitwise reproducible), checks that the frozen decisions and the outcome are
        unchanged, and adds the candidates to the existing record flagged ``post_hoc``.
        """
        if not self.results.has_record(spec.run_key):
            raise SpecError(
                f"no record for run {spec.run_key[:12]}: run it before completing it post hoc"
            )
        old = self.results.read_record(spec.run_key)
        if old.dirr is None or old.dirr.complete:
            return RunResult(old, skipped=True)
        new = _Draft()
        # its inputs were read when it ran; completion never checked them again
        self._execute(resolve(spec, read_inputs=False), new, decision, True)
        for k in ("triggered", "chosen_rho", "probe_signal"):
            if getattr(new.dirr, k) != getattr(old.dirr, k):
                raise SpecError(
                    f"post-hoc rerun changed {k} "
                    f"({getattr(old.dirr, k)} -> {getattr(new.dirr, k)}); not recorded"
                )
        if new.outcome.J != old.outcome.J:
            raise SpecError("post-hoc rerun did not reproduce the recorded outcome; not recorded")
        old.dirr.candidates, old.dirr.candidates_J = new.dirr.candidates, new.dirr.candidates_J
        old.dirr.post_hoc, old.dirr.complete = True, True
        old.compute.post_hoc_steps = new.compute.post_hoc_steps or 0
        self.results.write_record(old)
        return RunResult(old)

    def _execute(
        self, resolved: ResolvedRun, draft: _Draft, decision: dict | None, complete: bool = False
    ) -> None:
        spec = resolved.spec
        wall = draft.compute.wall_s
        t0 = time.perf_counter()
        bench, model = self.theta0(spec)
        roles = bench.roles(spec.field, spec.seed)
        if not roles.theta0_nll:
            record_theta0_nll(model, roles)
        draft.data_hash, draft.model_hash = roles.data_hash, self._model_hash[self.bench_key(spec)]
        if roles.notes:
            draft.roles = dict(roles.notes)  # e.g. diagnostic rows whose question names no subject
        wall["prepare"] = time.perf_counter() - t0

        objective = resolved.objective
        data = UnlearningData(
            roles.forget,
            roles.retain,
            reference_nll(model, roles.forget) if objective.needs_reference else None,
        )
        config = TrainConfig(
            steps=spec.T,
            lr=spec.hp("lr"),
            batch_size=spec.hp("batch_size"),
            weight_decay=spec.hp("weight_decay"),
            warmup_steps=spec.hp("warmup_steps"),
            seed=spec.seed,
        )
        if (
            isinstance(bench, InterfaceBenchmark) and spec.method in bench.INTERFACES
        ):  # the benchmark's own
            t0 = time.perf_counter()
            hook = _Hook()
            curve = self._watch(spec, hook, bench, model, roles, wall)
            draft.support = SupportInfo(
                **bench.intervene(spec, model, roles, objective, data, config, on_step=hook.on_step)
            )
            wall["train"] = time.perf_counter() - t0 - wall.get("curve", 0.0)
            draft.compute.step_equivalents = float(spec.T)
            # the interface's own domain (its LoRA, or its block of neurons) is the support here
            changes = self._enforce(spec, model, bench.allowed(model, spec.method), wall)
            self._evaluate(spec, bench, model, roles, draft)
            draft.outcome.components = {**draft.outcome.components, **changes.as_record()}
            draft.outcome.curve = curve
            return

        t0 = time.perf_counter()
        scores, geometry = self.scores(resolved, model, roles)
        budget = resolve_budget(spec.budget, geometry.total_cost)
        support = select(scores, budget, geometry)
        draft.support = SupportInfo(
            n_groups=len(support), cost=support.cost, budget=budget, groups=list(support.groups)
        )
        wall["select"] = time.perf_counter() - t0

        if spec.variant == "static":
            t0 = time.perf_counter()
            trainer = SupportTrainer(
                model, geometry, support, objective, data, config, progress=self.progress
            )
            columns = bool(spec.hp("column_grads"))
            use_column_grads(trainer, columns)
            curve = self._watch(spec, trainer, bench, model, roles, wall)
            trainer.run(desc=f"{spec.method}/{spec.objective}/{spec.field}/s{spec.seed}")
            trainer.leaves.release()  # column hooks off the model, the geometry frozen, as DIR-R's
            wall["train"] = time.perf_counter() - t0 - wall.get("curve", 0.0)
            draft.compute.step_equivalents = float(spec.T)
            trained = [support]
            del trainer  # its support state (24 B a scalar, 10 GiB at 8B) not held by the attack
        else:
            from supportbench.harness.dirr import run_dirr

            curve = None  # refused by resolve: a DIR-R run's branches have no one curve

            draft.dirr, compute, branch = run_dirr(
                spec,
                bench=bench,
                model=model,
                roles=roles,
                geometry=geometry,
                scores=scores,
                support=support,
                objective=objective,
                data=data,
                config=config,
                decision=decision,
                progress=self.progress,
                complete=complete,
            )
            compute.wall_s = {**wall, **compute.wall_s}
            draft.compute = compute
            trained = [support, branch]  # S0 up to the checkpoint, the chosen branch's after
        # both variants leave the terminal model (DIR-R: the chosen branch) in place
        changes = self._enforce(spec, model, SupportMasks(trained), draft.compute.wall_s)
        self._evaluate(spec, bench, model, roles, draft)
        draft.outcome.components = {**draft.outcome.components, **changes.as_record()}
        draft.outcome.curve = curve

    def _watch(
        self, spec: RunSpec, trainer, bench, model, roles, wall: dict
    ) -> list[CurvePoint] | None:
        """A curve (``eval_every`` = K > 0): J's components on the run's fixed evaluation slice
        (``curve_point``; with ``curve_metrics``, the benchmark's whole evaluation of the slice,
        ``bench.evaluate(full=True)`` on ``roles.head``) after every K-th step and the last,
        appended as the trainer runs (its time in ``wall["curve"]``, not in training's) and handed
        to the optional tracker. ``trainer``: the run's SupportTrainer, or a ``_Hook`` whose
        ``on_step`` a benchmark's own intervention hands its trainer. The model is measured in
        eval mode and handed back in the mode it was in. Shown beside the terminal score; nothing
        reads it to choose a checkpoint (docs/reports.md, "Curves")."""
        every = int(spec.hp("eval_every") or 0)
        if not every:
            return None
        points: list[CurvePoint] = []
        metrics = bool(spec.hp("curve_metrics"))
        track = self._track
        # the slice, with theta_0's NLLs measured on it as its points will be (the same batches:
        # a point of the unchanged model is exactly 0 on any device and dtype)
        t0 = time.perf_counter()
        sliced = roles.head(int(spec.hp("curve_items")))
        sliced.theta0_nll["eval"] = theta0_nll(model, sliced, "eval")
        wall["curve"] = time.perf_counter() - t0  # part of the curve's cost

        def on_step(step: int) -> None:
            if step % every and step != spec.T:
                return
            t0 = time.perf_counter()
            training = model.training
            model.eval()
            try:
                c = _metric_point(bench, model, sliced) if metrics else curve_point(model, sliced)
            finally:
                model.train(training)
            J, G_F, D_coll = c.pop("J"), c.pop("G_F"), c.pop("D_coll")
            points.append(CurvePoint(step=step, J=J, G_F=G_F, D_coll=D_coll, components=c))
            if track is not None:
                track.log(step, "curve", J, G_F, D_coll, c)
            wall["curve"] = wall.get("curve", 0.0) + time.perf_counter() - t0

        trainer.on_step = on_step
        return points

    def _enforce(self, spec: RunSpec, model, allowed, wall: dict) -> Changes:
        """Enforcement on record (issue 35): the scalars the run changed inside and outside what it
        may change (``allowed``: the supports it trained, or a benchmark's own interface), counted
        exactly against theta_0's snapshot, tensor by tensor; any change outside fails the run
        (``EnforcementError``), before it is scored."""
        t0 = time.perf_counter()
        changes = count_changes(model, self._theta0[self.bench_key(spec)], allowed)
        wall["enforce"] = time.perf_counter() - t0
        enforce(changes)
        return changes

    def _evaluate(self, spec: RunSpec, bench, model, roles, draft: _Draft) -> None:
        t0 = time.perf_counter()
        o = bench.evaluate(model, roles, "eval", full=bool(spec.hp("eval_full")))
        draft.outcome, draft.items = (
            (o.outcome(), o.items) if isinstance(o, Evaluated) else (o, None)
        )
        draft.compute.wall_s["eval"] = time.perf_counter() - t0
        self._check_finite(draft.outcome)
        if spec.hp("relearn_steps"):
            self._relearn(spec, bench, model, roles, draft)

    @staticmethod
    def _relearn(spec: RunSpec, bench, model, roles, draft: _Draft) -> None:
        """The relearning attack (``relearn_steps`` > 0), after the terminal score and the
        enforcement count: the model is spent by it (the next run resets it to theta_0); LACUNA's
        resurfacing counts join the outcome's components (``unlearning.relearn``)."""
        t0 = time.perf_counter()
        counts = relearning_attack(
            model,
            bench.relearn_set(roles),
            steps=int(spec.hp("relearn_steps")),
            lr=float(spec.hp("relearn_lr")),
            batch_size=int(spec.hp("relearn_batch_size")),
            seed=spec.seed,
        )
        draft.outcome.components = {**draft.outcome.components, **counts}
        draft.compute.wall_s["relearn"] = time.perf_counter() - t0

    @staticmethod
    def _check_finite(o: Outcome) -> None:
        if not all(math.isfinite(float(v)) for v in (o.J, o.G_F, o.D_coll)):
            raise DivergenceError(
                message=f"non-finite outcome (J={o.J!r}, G_F={o.G_F!r}, D_coll={o.D_coll!r}): "
                "the run diverged"
            )

    def _provenance(self) -> Provenance:
        import transformers

        return Provenance(
            supportbench=__version__,
            git=self._git,
            device=str(self.device),
            cpu_mode=cpu_mode(),
            torch=str(torch.__version__),
            transformers=str(transformers.__version__),
            python=platform.python_version(),
            started_at=now(),
        )


def run(spec: RunSpec, results_dir: str | Path = "results", **kwargs) -> RunResult:
    """Convenience: run one spec in a fresh Runner."""
    return Runner(results_dir, **kwargs).run(spec)


class _Hook:
    """Where ``Runner._watch`` puts a curve's step callback for a run whose trainer the benchmark
    builds itself (its own interventions): handed to ``intervene(on_step=...)``."""

    on_step = None


def _metric_point(bench, model, sliced) -> dict:
    """A curve point with the benchmark's own metrics: its full evaluation of the slice
    (``sliced``: ``roles.head``), J, G_F and D_coll among them; its numeric components (a metric
    the slice is too small for, e.g. TOFU's model utility without both protected sources, stays NaN,
    as a terminal component would; the registry's view leaves NaN out)."""
    out = bench.evaluate(model, sliced, "eval", full=True)
    comp = {
        k: float(v)
        for k, v in out.components.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    return {"J": out.J, "G_F": out.G_F, "D_coll": out.D_coll, **comp}
