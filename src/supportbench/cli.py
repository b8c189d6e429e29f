"""The ``supportbench`` command. Heavy imports (torch, transformers) happen inside the subcommands
that need them, so ``report``, ``audit`` and ``registry`` start fast."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from supportbench._options import help_line
from supportbench._signals import Noted, handled, noting_interrupts
from supportbench.errors import RegistryError, SupportbenchError
from supportbench.experiments.decisions import ACTIONS
from supportbench.experiments.results import DEFAULT_RESULTS, ResultsDir
from supportbench.experiments.spec import (
    DEFAULT_BUDGET,
    DEFAULT_HYPERPARAMETERS,
    MAX_SEED,
    MAX_STEPS,
    MODEL_DEFAULTS,
    RUN_SETTINGS,
    RunSpec,
)
from supportbench.harness.tracking import TRACKERS


def _cmd_geometry(args) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    from supportbench.experiments.hub import local_path
    from supportbench.unlearning.models import PRESETS, check_model_dir, preset_config, read_config
    from supportbench.unlearning.support import discover_geometry

    # a preset, a local folder or a hub id, as every other command takes it; from the config
    args.model = local_path(args.model)
    if args.model in PRESETS:
        cfg = preset_config(PRESETS[args.model], pad_token_id=0, bos_token_id=1, eos_token_id=2)
    else:
        check_model_dir(args.model)
        cfg = read_config(args.model)
    with torch.device("meta"):  # nothing is allocated or loaded
        model = AutoModelForCausalLM.from_config(cfg)
    geo = discover_geometry(model)
    print(geo.describe())
    for t in geo.tensors:
        print(f"  {t.name}  groups {t.offset}..{t.offset + t.n - 1}  cost/group {t.group_cost}")
    return 0


def _cmd_plan_memory(args) -> int:
    from supportbench.errors import SpecError
    from supportbench.experiments.hub import local_path
    from supportbench.unlearning.memory import ARCH_CONFIGS, largest_batch, plan_memory

    if args.model not in ARCH_CONFIGS:
        try:  # a hub id: its snapshot in the Hugging Face cache
            args.model = local_path(args.model)
        except SpecError as exc:
            raise SpecError(
                f"{exc}; plan-memory also takes a known architecture, which needs no files "
                f"({', '.join(ARCH_CONFIGS)})"
            ) from None

    p = plan_memory(
        args.model,
        args.budget,
        dtype=args.dtype,
        batch=args.batch,
        length=args.length,
        checkpointing=args.checkpointing,
        column_grads=args.column_grads,
        chunked_loss=args.chunked_loss,
    )
    gib = 2**30
    print(
        f"{p.model}: {p.parameters:,} parameters, {p.geometry_scalars:,} in the down-projection "
        f"geometry; support {p.budget:,} scalars; {p.dtype} "
        f"weights; batch {p.batch} x length {p.length}"
        + ("; activation checkpointing" if p.checkpointing else "")
        + ("; column gradients" if args.column_grads else "")
        + ("; chunked loss" if args.chunked_loss else "")
    )
    for k, v in p.components.items():
        print(f"  {k:<16} {v / gib:9.2f} GiB")
    from supportbench.methods.base import get_method, list_methods
    from supportbench.unlearning.memory import dirr_checkpoint_bytes, plan_diagnostics, plan_relearn

    train = p.without_diagnostics()
    dirr = dirr_checkpoint_bytes(args.model, dtype=args.dtype, support=p.budget)
    every = sorted({r for name in list_methods() for r in get_method(name).requires})
    diag = {
        what: plan_diagnostics(
            args.model, keys, dtype=args.dtype, batch=args.batch, length=args.length
        )
        for what, keys in (
            ("Intervention Score", get_method("intervention_score").requires),
            ("every method at once", every),
        )
    }
    print(
        "peaks by phase (they never overlap; diagnostics "
        "at --batch records of --length tokens per pass):"
    )
    print(f"  {'training step':<48} {train / gib:9.2f} GiB")
    print(
        f"  {'DIR-R run (+ 8 geometry copies, 3 moment sets)':<48} {(train + dirr) / gib:9.2f} GiB"
    )
    for what, d in diag.items():
        n = d.components["buffers"] // (4 * d.geometry_scalars)
        print(f"  {f'diagnostics, {what} ({n} buffers)':<48} {d.total / gib:9.2f} GiB")
    shape = dict(batch=args.batch, length=args.length, checkpointing=args.checkpointing)
    attack = plan_relearn(args.model, dtype=args.dtype, **shape)
    what = "relearning attack (every parameter; --batch)"
    print(f"  {what:<48} {attack.total / gib:9.2f} GiB")
    print(
        "  (a runner scores a cell's methods one after another, keeping only the buffers still to "
        "be read, when every method's buffers do not fit)"
    )
    for gpu in args.gpu_gib:
        b = largest_batch(
            args.model,
            args.budget,
            gpu * gib,
            dtype=args.dtype,
            length=args.length,
            checkpointing=args.checkpointing,
            column_grads=args.column_grads,
            chunked_loss=args.chunked_loss,
        )
        print(
            f"  on {gpu:g} GiB: training fits up to batch {b} (powers of two)"
            if b
            else f"  on {gpu:g} GiB: training does not fit at batch 1"
        )
    return 0


def _cmd_benchmarks(args) -> int:
    if args.options:
        from supportbench._options import declared
        from supportbench.benchmarks.base import BENCHMARKS, SHARED_KEYWORDS

        for n in BENCHMARKS.names():
            fields = BENCHMARKS.get(n).field_names({})
            shown = ", ".join(fields[:8]) + (
                f", ... ({len(fields)} in all)" if len(fields) > 8 else ""
            )
            print(f"{n} fields (default options): {shown}")
        print()
        _print_options(
            "benchmark",
            BENCHMARKS.names(),
            lambda n: {
                k: v for k, v in declared(BENCHMARKS.get(n)).items() if k not in SHARED_KEYWORDS
            },
        )
        return 0
    rows = _benchmark_rows_light()
    broken: dict[str, str] = {}
    if rows is None:  # a plugin is installed, or a value needs code: import the benchmarks
        from supportbench.benchmarks.base import BENCHMARKS

        plugins = set(BENCHMARKS.plugins())
        rows = [
            (
                n + (" (plugin)" if n in plugins else ""),
                cls.DEFAULT_MODEL,
                cls.DEFAULT_FIELD,
                ", ".join(cls.INTERFACES) or "-",
                f"{cls.__module__}:{cls.__qualname__}",
            )
            for n, cls in ((n, BENCHMARKS.get(n)) for n in BENCHMARKS.names())
        ]
        broken = BENCHMARKS.broken
    print(f"{'name':<16} {'default model':<14} {'default field':<16} {'interfaces':<16} defined in")
    for row in rows:
        print(f"{row[0]:<16} {row[1]:<14} {row[2]:<16} {row[3]:<16} {row[4]}")
    for name, why in sorted(broken.items()):
        print(f"{name} (plugin, not loaded): {why}")
    print("\n(fields and options: supportbench benchmarks --options)")
    return 0


def _benchmark_rows_light() -> list[tuple[str, ...]] | None:
    """The built-in benchmarks' rows from the catalog (read from source, no torch); None when a
    plugin is installed or a built-in's values cannot be read so."""
    from supportbench import catalog

    if catalog.plugin_names("benchmark"):
        return None
    rows = []
    for name, entry in catalog.builtins("benchmark").items():
        values = [entry.attrs.get(a) for a in ("DEFAULT_MODEL", "DEFAULT_FIELD", "INTERFACES")]
        if any(v is None for v in values):
            return None
        rows.append((name, values[0], values[1], ", ".join(values[2]) or "-", entry.target))
    return sorted(rows)


def _cmd_objectives(args) -> int:
    from supportbench.unlearning.objectives import OBJECTIVES, objective_options

    print(
        "Objectives and their options (objective.<option> = value in --set or [hyperparameters]), "
        "each with its allowed range, unit and default:"
    )
    for n in OBJECTIVES.names():
        print(f"\n{n}")
        for k, (hint, default) in objective_options(n).items():
            print(f"  {help_line(k, hint, default)}")
    return 0


def _print_options(kind: str, names, options_of) -> None:
    """Each name's declared options with range, unit, default and meaning
    (``_options.help_line``)."""
    print(f"{kind} options ({kind.split()[0]}.<option> = value in --set or [hyperparameters]):")
    for n in names:
        opts = options_of(n)
        print(f"\n{n}" + ("" if opts else "  (no options)"))
        for k, (hint, default) in opts.items():
            print(f"  {help_line(k, hint, default)}")


def _cmd_methods(args) -> int:
    if args.options:
        from supportbench.methods.base import METHODS, method_options

        _print_options("method", METHODS.names(), method_options)
        return 0
    rows = _method_rows_light()
    broken: dict[str, str] = {}
    # plugins are installed: they are imported, so that one that fails to load is reported
    if rows is None:
        from supportbench.methods.base import METHODS

        plugins = set(METHODS.plugins())
        rows = [
            (
                n + (" (plugin)" if n in plugins else ""),
                ", ".join(_requires_of(METHODS.get(n))) or "-",
                getattr(METHODS.get(n), "provenance", "") or "(no provenance given)",
            )
            for n in METHODS.names()
        ]
        broken = METHODS.broken
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print(f"{'name':<{w0}}  {'needs':<{w1}}  provenance")
    for r in rows:
        prov = r[2] if args.full or len(r[2]) <= 90 else r[2][:87] + "..."
        print(f"{r[0]:<{w0}}  {r[1]:<{w1}}  {prov}")
    if broken:
        print("\nbroken/shadowed plugins (skipped):")
        for name, err in sorted(broken.items()):
            print(f"  {name}: {err}")
            print(
                f"warning: plugin '{name}' failed to load and was skipped: {err}", file=sys.stderr
            )
    return 0


def _method_rows_light() -> list[tuple[str, str, str]] | None:
    """The built-in methods' names, default ``requires`` and provenance from the catalog (read from
    their source files, no torch); None when a plugin is installed (it is imported, so that one
    that fails to load is reported) or a built-in's values cannot be read so."""
    from supportbench import catalog

    if catalog.plugin_names("method"):
        return None
    rows = []
    for name, entry in catalog.builtins("method").items():
        if "requires" not in entry.attrs or "provenance" not in entry.attrs:
            return None
        prov = entry.attrs["provenance"] or "(no provenance given)"
        rows.append((name, ", ".join(entry.attrs["requires"]) or "-", prov))
    return sorted(rows)


def _requires_of(cls) -> tuple[str, ...]:
    """A method class's default ``requires`` (an instance may refine it from its
    hyperparameters)."""
    try:
        return tuple(cls().requires)
    except Exception:  # a constructor that needs arguments: fall back to the class attribute
        req = getattr(cls, "requires", ())
        return tuple(req) if isinstance(req, (tuple, list)) else ()


def _parse_sets(items: list[str], flag: str = "--set") -> dict:
    import json

    from supportbench._io import MAX_DEPTH, nesting_depth

    out = {}
    for item in items or []:
        if "=" not in item or not item.split("=", 1)[0]:
            raise SupportbenchError(f"{flag} expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        if nesting_depth(v) > MAX_DEPTH:  # before json, whose recursion would fail on it
            raise SupportbenchError(
                f"{flag} {k}=...: the value is nested more than {MAX_DEPTH} levels deep"
            )
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def _writable_dir(path: str | None, flag: str) -> None:
    """A folder a command will write into: refused up front when it is a file, lies under a file,
    has a name too long for the file system, or cannot be created or written (nothing is loaded or
    trained first)."""
    from pathlib import Path

    from supportbench._io import (
        cannot_write_in,
        file_ancestor,
        nearest_existing,
        too_long,
        what_is_there,
    )

    if path is None:
        return
    p = Path(path).expanduser()
    why = too_long(p)  # first: the file system refuses even to look such a name up
    if why:
        raise SupportbenchError(f"{flag} '{path}': {why}")
    if p.exists() and not p.is_dir():
        raise SupportbenchError(f"{flag} '{path}' is a file, not a folder")
    parent = file_ancestor(p)
    if parent is not None:
        raise SupportbenchError(
            f"{flag} '{path}' lies under '{parent}', which is {what_is_there(parent)}"
        )
    existing = nearest_existing(p)
    why = cannot_write_in(existing)  # tried: root passes os.access in an immutable folder or /proc
    if why:
        raise SupportbenchError(f"{flag} '{path}': '{existing}' is not writable ({why})")


def _folder_or_id(ref: str) -> str:
    """A path made absolute (the run may start elsewhere), a hub id as it is."""
    from pathlib import Path

    from supportbench.experiments.hub import is_hub_id

    return ref if is_hub_id(ref) else str(Path(ref).resolve())


def run_spec(args) -> RunSpec:
    """The RunSpec a ``run`` command line names; every setting it leaves out resolves as in Python
    and TOML (experiments/spec.py is the one source of defaults)."""
    from pathlib import Path

    from supportbench.benchmarks.base import BENCHMARKS

    hp = _parse_sets(args.set)
    if args.dtype:
        hp["dtype"] = args.dtype
    if args.eval_every is not None:
        hp["eval_every"] = args.eval_every
    if args.curve_metrics:
        hp["curve_metrics"] = True
    if args.relearn_steps is not None:
        hp["relearn_steps"] = args.relearn_steps
    if args.data_dir:  # a folder (made absolute) or a data set's hub id (resolved by the spec)
        hp["benchmark.data_dir"] = _folder_or_id(args.data_dir)
    cls = BENCHMARKS.get(args.benchmark)
    # None: the benchmark's default model, resolved by RunSpec as for Python and TOML
    model = args.model
    if args.theta0:  # a ready fine-tuned theta_0 is the run's model, used as it is
        if model and Path(model).resolve() != Path(args.theta0).resolve():
            raise SupportbenchError(
                f"--theta0 {args.theta0} and --model {model} name two models; --theta0 PATH is "
                "the run's model (a ready fine-tuned theta_0): leave --model out"
            )
        model, hp["benchmark.theta0"] = args.theta0, "given"
    if args.retain_model:
        hp["benchmark.retain_model"] = _folder_or_id(args.retain_model)
    if model and Path(model, "config.json").is_file():
        model = str(Path(model).resolve())
    return RunSpec(
        args.benchmark,
        args.field or cls.DEFAULT_FIELD,
        args.objective,
        args.method or "intervention_score",
        seed=args.seed,
        variant=args.variant,
        split=args.split,
        experiment=args.experiment,
        budget=args.budget,
        T=args.T,
        t=args.t,
        d=args.d,
        rho_p=args.rho_p,
        model=model,
        hyperparameters=hp,
        build=args.build,
    )


def _cache_flag(args) -> tuple[str | None, str]:
    """The cache folder a command will write into and the name to blame: --cache, else
    $SUPPORTBENCH_CACHE."""
    if args.cache is None and os.environ.get("SUPPORTBENCH_CACHE"):
        return os.environ["SUPPORTBENCH_CACHE"], "$SUPPORTBENCH_CACHE"
    return args.cache, "--cache"


def _cmd_run(args) -> int:
    _writable_dir(args.results, "--results")
    # where the record goes: runs/ itself
    _writable_dir(str(ResultsDir(args.results).runs), "--results")
    _writable_dir(*_cache_flag(args))
    import torch

    torch.set_num_threads(args.threads)
    from supportbench.benchmarks.base import BENCHMARKS
    from supportbench.harness.runner import Runner

    if BENCHMARKS.get(args.benchmark).INTERFACES and args.field is None and args.method is None:
        return _run_controlled(args)
    spec = run_spec(args)
    decision = None
    if args.variant == "dirr":
        from supportbench.experiments.decisions import load_decision_for

        if (
            spec.split != "calibration"
            and args.decision is None
            and not (args.allow_unfrozen and spec.hp("tau") is not None)
        ):
            raise SupportbenchError(
                f"a DIR-R {spec.split} run needs its threshold tau* from somewhere; the ways out: "
                "--decision FILE (a decision frozen by `supportbench calibrate` from calibration "
                "runs), or --allow-unfrozen --set tau=X (an explicit tau, recorded as unfrozen), "
                "or --split calibration (a calibration run, which evaluates every candidate)"
            )
        decision = load_decision_for(spec, args.decision, allow_unfrozen=args.allow_unfrozen)
    runner = Runner(
        args.results,
        cache_dir=args.cache,
        force=args.force,
        device=args.device,
        reuse_stale=args.reuse_stale,
        tracker=args.log_to,
    )
    rec, skipped = runner.run(spec, decision=decision)
    state = "skipped (record exists; --force to rerun)" if skipped else rec.status
    print(
        f"run {spec.run_key[:12]}  "
        f"{spec.benchmark}/{spec.field}/{spec.objective}/{spec.method}/{spec.variant}/seed "
        f"{spec.seed}: {state}"
    )
    if rec.status != "ok":
        print(rec.error, file=sys.stderr)
        return 1
    _print_outcome(spec, rec.outcome)
    if rec.dirr is not None:
        d = rec.dirr
        print(
            f"DIR-R: s_t = {d.probe_signal:.6g}, triggered "
            f"= {d.triggered}, chosen rho = {d.chosen_rho}"
        )
    print(f"record: {runner.results.record(spec.run_key)}")
    return 0


def _print_outcome(spec, o) -> None:
    """A run's outcome as ``run`` prints it: J with its meaning and direction, every component
    under the one metric vocabulary (open-unlearning's name where it has one), and for TOFU its
    forget quality and model utility, or why they were not computed."""
    from supportbench.experiments.metric_names import MEANINGS, display_name
    from supportbench.experiments.spec import FULL_EVALUATION_INPUT
    from supportbench.reports.names import J_MEANING

    print(f"J = {o.J:+.6f}   G_F = {o.G_F:.6f}   D_coll = {o.D_coll:.6f}")
    print(f"  ({J_MEANING})")
    comps = {display_name(k): v for k, v in o.components.items()}
    width = max([24, *map(len, comps)])
    for k, v in sorted(comps.items()):
        print(f"  {k:<{width}} {v:.6g}" if isinstance(v, float) else f"  {k:<{width}} {v}")
    if spec.benchmark not in FULL_EVALUATION_INPUT:
        return
    if "forget_quality" in comps:
        for k in ("forget_quality", "model_utility"):
            v = comps.get(k, float("nan"))
            why = MEANINGS[k] if v == v else "not defined: fewer than its nine components ran"
            print(f"{k} = {v:.6g}: {why}")
    elif spec.hp(FULL_EVALUATION_INPUT[spec.benchmark]):
        print("forget_quality, model_utility: not computed: eval_full = false was given")
    else:
        print(
            "forget_quality, model_utility: not computed: eval_full is off, on by default only "
            "where a retain model exists (--retain-model PATH, open-unlearning's "
            "tofu_<model>_retainNN); --set eval_full=true trains one from theta_0's data first"
        )


_DECIDED_BY_THE_CONTROLLED_DECISION = {
    "benchmark.primary_locator": (
        "the primary locator is the one with the best calibration AUROC, frozen before "
        "the final runs"
    ),
    "benchmark.decision": "the decision is frozen (or reused) by this command",
    "lr": "each interface's lr is chosen from the grid on the calibration targets",
}


def _run_controlled(args) -> int:
    """The frozen controlled decision (primary locator, per-interface lr; from the calibration
    targets), every final target through both interfaces under it, then Table 1's quantities from
    the registry (both J's, the targets excluded as not learned), and every locator's localization
    quantities beside them."""
    from supportbench.harness.controlled import run_controlled
    from supportbench.registry.store import connect
    from supportbench.reports.console import controlled_text
    from supportbench.reports.tables import Context

    frozen = {
        k: v for k, v in _parse_sets(args.set).items() if k in _DECIDED_BY_THE_CONTROLLED_DECISION
    }
    if frozen:  # the decision sets these; a user's value would be replaced without a word
        raise SupportbenchError(
            "; ".join(
                f"--set {k}={v}: {_DECIDED_BY_THE_CONTROLLED_DECISION[k]}"
                for k, v in frozen.items()
            )
            + " (docs/benchmarks.md, 'Frozen before the final runs'): leave it out"
        )
    from supportbench.benchmarks.base import BENCHMARKS
    from supportbench.harness.resolve import resolve
    from supportbench.harness.validate import validate_spec

    interfaces = BENCHMARKS.get(args.benchmark).INTERFACES
    args.method = interfaces[0]
    one = run_spec(args)  # the template: what every target's run shares (its field, method: not)
    for m in interfaces:  # names and options before theta_0 is built (minutes), for each interface
        validate_spec(resolve(one.replace(method=m)))
    done = run_controlled(
        args.results,
        one,
        cache_dir=args.cache,
        force=args.force,
        device=args.device,
        reuse_stale=args.reuse_stale,
        tracker=args.log_to,
    )
    con = connect(done.results.registry, read_only=True)
    try:  # what the report's controlled.md holds, rendered by the same code from the registry
        text = controlled_text(Context.from_registry(con, args.experiment))
    finally:
        con.close()
    print(
        f"{done.runs} runs ({done.not_ok} not ok) -> "
        f"{done.results.runs}/, registry {done.results.registry}"
    )
    print("\n".join(text))
    return 0 if not done.not_ok else 1


def _cmd_calibrate(args) -> int:
    from supportbench.harness.calibration import calibrate_and_freeze

    results = ResultsDir(args.results)
    # before any work
    _writable_dir(str(args.out or results.decisions), "--out" if args.out else "--results")
    import difflib

    from supportbench.registry.names import check_text, known

    # a misspelt name would read as "no calibration records"
    for kind in ("benchmark", "objective"):
        name, names = getattr(args, kind), sorted(known(kind))
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            raise SupportbenchError(
                f"--{kind} {name!r} is not {'an' if kind[0] in 'aeiou' else 'a'} {kind} here"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; allowed: {', '.join(names)}"
            )
    # written into the decision: what ingest would refuse is refused here
    for b in args.baselines or []:
        if not b.strip():
            raise SupportbenchError(f"--baselines {b!r}: a baseline identity is a non-empty name")
        check_text(b, "--baselines", "calibrate")
    recs = [
        r
        for r in results.records()
        if (
            r.spec.get("split"),
            r.spec.get("variant"),
            r.spec.get("experiment"),
            r.spec.get("benchmark"),
            r.spec.get("objective"),
        )
        == ("calibration", "dirr", args.experiment, args.benchmark, args.objective)
    ]
    # beside the runs it governs: `registry ingest RESULTS` finds it
    out = args.out or results.decisions
    cal, dec = calibrate_and_freeze(
        recs, out, baselines=args.baselines or [], admissible=(args.range[0], args.range[1])
    )
    print(f"{'tau':>10} {'trigger':>8} {'captured':>9} {'extra':>7} {'gain/compute':>12}")
    for row in cal.table:
        mark = "*" if row["tau"] == cal.tau else (" " if row["admissible"] else "x")
        print(
            f"{row['tau']:>10.6f} {row['trigger_fraction']:>8.1%} {row['captured_gain']:>9.4f} "
            f"{row['extra_compute']:>7.2f} {row['gain_per_compute']:>12.6f} {mark}"
        )
    print(
        f"frozen tau* = {cal.tau:.6f} ({cal.triggered}/{cal.n} "
        f"triggered) -> {out}/{dec['hash']}.json"
    )
    return 0


# registry.imports.FORMATS and registry.store.QUERY_FORMATS: spelled here, imported by neither
IMPORT_FORMATS = ("supportbench-csv", "tofu-logs", "ou-eval", "lacuna-summary")
QUERY_FORMATS = ("table", "csv", "json")


def registry_path(args) -> str:
    """The registry a ``registry`` command reads or writes: --registry, else the registry of its
    results folder, ``<folder>/registry.duckdb``: ingest's folder is DIR (default ./results); every
    other action's is the default results folder, ./results (where ``run``, ``sweep``, ``audit``
    and ``report`` look too)."""
    if args.registry is not None:
        return args.registry
    if args.action == "ingest":
        return str(ResultsDir(args.path or DEFAULT_RESULTS.root).registry)
    return str(DEFAULT_RESULTS.registry)


def _check_registry_args(args) -> None:
    """Options that mean nothing to the action, or a --format of another action: refused, named."""
    if args.format is not None:
        allowed = {"query": QUERY_FORMATS, "import": IMPORT_FORMATS}.get(args.action)
        if allowed is None:
            raise RegistryError(
                f"--format {args.format}: registry {args.action} takes no --format"
                + (
                    " (the output file's suffix, .csv or .parquet, is its format)"
                    if args.action == "export"
                    else ""
                )
            )
        if args.format not in allowed:
            raise RegistryError(
                f"--format {args.format}: not a registry {args.action} format; "
                f"allowed: {', '.join(allowed)}"
            )
    if args.action == "query":
        if args.path:
            raise RegistryError(
                f"registry query takes no PATH (got {args.path!r}); name the "
                "registry with --registry FILE"
            )
        if args.command_sql is not None and not args.command_sql.strip():
            raise RegistryError(
                f"-c {args.command_sql!r}: an empty query; give one read statement "
                "(-c 'SELECT ...'), or leave -c out for the interactive prompt"
            )
    elif args.command_sql is not None:
        raise RegistryError(f"-c is the SQL of registry query; registry {args.action} takes none")
    if args.allow_unknown and args.action not in ("ingest", "import"):
        raise RegistryError(f"--allow-unknown is for registry ingest and import, not {args.action}")
    # every other option belongs to some actions only: one given to another would be ignored without
    # a word
    used_by = {
        "experiment": ("export", "import"),
        "retain": ("import",),
        "replace_reruns": ("ingest",),
        **{
            k: ("import",)
            for k in (
                "benchmark",
                "field",
                "objective",
                "method",
                "seed",
                "variant",
                "split",
                "model",
            )
        },
    }
    for key, actions in used_by.items():
        if getattr(args, key) not in (None, False) and args.action not in actions:
            flag = "--" + key.replace("_", "-")
            raise RegistryError(
                f"{flag} is for registry {' and '.join(actions)}; registry {args.action} "
                "takes none (it would be ignored)"
            )


def _cmd_registry(args) -> int:
    from supportbench.registry import ingest as ing
    from supportbench.registry import tables
    from supportbench.registry.store import connect, write_session

    _check_registry_args(args)
    db = registry_path(args)
    if args.action == "query":
        return _query(db, args.command_sql, args.format or "table")
    if args.action == "ingest":
        source = args.path or str(DEFAULT_RESULTS.root)
        rep = write_session(
            db,
            lambda con: ing.ingest(
                con, source, replace_reruns=args.replace_reruns, allow_unknown=args.allow_unknown
            ),
        )
        print(f"ingested {source} into registry {db}")
        print(rep.summary())
        return 1 if rep.conflicts or rep.decision_conflicts else 0
    if args.action == "import":
        from pathlib import Path

        from supportbench.registry import imports

        if not args.path:
            raise SupportbenchError(
                f"registry import needs a PATH (formats: {', '.join(imports.FORMATS)})"
            )
        options = {k: getattr(args, k) for k in (*imports.CELL, "model")}
        # read and check everything before the registry is opened: a failed import creates no file
        # or folder
        runs = imports.read(args.path, args.format, options, args.retain)
        imports.check_names(runs, args.path, args.allow_unknown)
        rep = write_session(
            db,
            lambda con: imports.store(
                con, runs, args.path, results_root=Path(db).parent, allow_unknown=args.allow_unknown
            ),
        )
        print(
            f"{len(runs)} imported runs from {args.path} into registry {db}: {rep.new} new, "
            f"{rep.unchanged} unchanged, {len(rep.conflicts)} conflicts"
        )
        for c in rep.conflicts[:10]:
            print(
                f"  conflict: run {c['run_key'][:12]} is "
                "stored with other content (not overwritten)"
            )
        for r in runs:
            if r.skipped:
                print(f"  not stored (no finite value): {', '.join(r.skipped)}")
        if rep.unknown:
            print(f"  {rep.unknown}")
        return 1 if rep.conflicts else 0
    if not args.path:
        raise SupportbenchError("registry export needs an output file (.csv or .parquet)")
    tables.check_table_path(args.path)
    con = connect(db, read_only=True)  # export reads an existing registry; it never creates one
    try:
        n = tables.export_table(con, args.path, args.experiment)
    finally:
        con.close()
    print(f"wrote {n} rows to {args.path} (from registry {db})")
    return 0


def _query(path: str, sql: str | None, fmt: str = "table") -> int:
    """``registry query``: one statement (-c) or a prompt. Each statement opens its own read-only
    connection and closes it when done, so a prompt waiting for input holds no lock and never
    blocks an ingest."""
    from supportbench.registry.store import close, cut_note, query_connection, render, run_query

    def answer(text: str) -> None:
        con = query_connection(path)
        try:
            res = run_query(con, text)
        finally:
            close(con, path)
        print(render(res, fmt))
        if res.cut and fmt != "table":  # stdout stays machine-readable
            print(cut_note(res), file=sys.stderr)

    if sql is not None:
        answer(sql)
        return 0
    close(query_connection(path), path)  # the registry is there and readable: then the prompt
    print(
        "read-only SQL prompt; end statements with ';', Ctrl-C stops a query or drops the "
        "statement being typed, Ctrl-D quits. Tables: runs, outcomes, components, supports, "
        "decisions, gate_events, candidates, calibration, provenance; views: results, "
        "results_all, metrics"
    )
    buf = ""
    while True:
        handled()  # a Ctrl-C before this prompt was dealt with: a later error is not taken for it
        try:
            line = input("sql> " if not buf else "...> ")
        except EOFError:
            return 0
        except KeyboardInterrupt:  # as psql: the statement being typed is dropped
            print()
            buf = ""
            continue
        buf += line + "\n"
        if buf.strip().endswith(";"):
            try:
                answer(buf)
            except SupportbenchError as exc:  # keep the prompt alive on a bad or refused query
                print(f"error: {exc}")
            except KeyboardInterrupt:  # the query is stopped (``run_query``); the prompt stays
                print("query stopped (Ctrl-C)")
            buf = ""


def _cmd_lacuna(args) -> int:
    import json

    from supportbench.benchmarks.lacuna.score import score, table

    rows = score(
        args.path, size=args.size, regime=args.regime, fields=args.field, methods=args.method
    )
    if args.json:
        print(
            json.dumps(
                [
                    {"field": r.field, "method": r.method, "path": str(r.path), **r.metrics}
                    for r in rows
                ],
                indent=1,
            )
        )
    else:
        print("localization precision against the forget groups' mask bits:")
        print(table(rows, "precision_forget"))
        print("\nagainst every group's bits:")
        print(table(rows, "precision_all"))
    return 0


def _cmd_audit(args) -> int:
    import json

    from supportbench.registry.audit import audit
    from supportbench.registry.store import connect

    spec = None
    if args.spec:
        from supportbench.experiments.plan import ExperimentSpec

        spec = ExperimentSpec.from_toml(args.spec)
    exp = args.experiment or (spec.name if spec else None)
    rep = audit(connect(args.registry, read_only=True), exp, spec)
    print(json.dumps(rep.to_dict(), indent=1, default=str) if args.json else rep.text())
    return 0 if rep.ok else 1


def _report_spec(path):
    """The experiment spec the report's audit reads (``report --spec``), or None."""
    if not path:
        return None
    from supportbench.experiments.plan import ExperimentSpec

    return ExperimentSpec.from_toml(path)


def _cmd_report(args) -> int:
    from supportbench.reports.report import not_asked_text, report

    st = report(
        args.registry,
        args.out,
        args.experiment,
        findings_path=args.findings,
        reference=args.reference,
        pdf=args.pdf,
        html=args.html,
        kind=args.kind,
        spec=_report_spec(args.spec),
    )
    print(st["kind_rule"])
    print(f"audit: {st['audit']['line']}")
    print(f"reference: {st['reference']}")
    print(
        f"methods: {len(st['methods'])} per-method tables "
        f"({', '.join(st['methods']) or 'no ok runs'})"
    )
    for kind in ("tables", "figures") if st["kind"] == "paper" else ("figures",):
        done = [k for k, v in st[kind].items() if v is None]
        miss = {k: v for k, v in st[kind].items() if v is not None}
        print(f"{kind}: {len(done)} rendered, {len(miss)} missing")
        for k, v in miss.items():
            print(f"  missing {k}: {v}")
    if st.get("figures_not_asked"):  # an experiment report: figures its runs do not allow
        print("  " + not_asked_text(st["figures_not_asked"]))
    print(
        f"wrote {args.out}/report.md, {args.out}/findings.md, {args.out}/paper.tex, "
        f"{args.out}/tables/, {args.out}/figures/"
        + (f", {args.findings}" if args.findings else "")
        + (f", {st['pdf']}" if st.get("pdf") else "")
        + (f", {st['html']}" if st.get("html") else "")
    )
    return 0


def _check_executor_flags(args) -> None:
    # a parameter the local executor would ignore without a word
    if args.slurm and args.executor != "slurm":
        raise SupportbenchError(
            f"--slurm {args.slurm[0]} is a Slurm parameter, but the executor is "
            f"'{args.executor}': add --executor slurm, or leave --slurm out"
        )


def _executor(args):
    _check_executor_flags(args)
    if args.executor == "slurm":
        from supportbench.harness.executors.slurm import SlurmExecutor

        params = _parse_sets(args.slurm, "--slurm")
        return SlurmExecutor(ResultsDir(args.results).slurm, **params)
    from supportbench.harness.executors.local import LocalExecutor

    return LocalExecutor(args.workers)


def _check_names_light(spec) -> None:
    """The dry run's name check, without importing torch: method names against the catalog's
    (built-ins read from their source, installed plugins by their entry points)."""
    from supportbench import catalog
    from supportbench.errors import UnknownMethodError

    known = set(catalog.entries("method"))
    # a benchmark with INTERFACES runs its own interventions, so those are its method names (a
    # built-in's read from its source; a plugin benchmark is imported, so that one that fails to
    # load is refused here, as is one whose INTERFACES the catalog cannot read)
    builtins = catalog.builtins("benchmark")
    for b in spec.benchmarks:
        interfaces = builtins[b].attrs.get("INTERFACES") if b in builtins else None
        if interfaces is None:
            from supportbench.benchmarks.base import BENCHMARKS

            interfaces = BENCHMARKS.get(b).INTERFACES
        st = spec.settings(b)
        allowed = set(interfaces) or known
        for m in (*st["methods"], *st["dirr_methods"]):
            if m not in allowed:
                raise UnknownMethodError("selection method", m, sorted(allowed))
        _check_options_light(b, st)


def _check_options_light(benchmark: str, st: dict) -> None:
    """The dry run's option check, without importing torch: each ``method.x``/``objective.x``/
    ``benchmark.x`` of the benchmark's hyperparameters against the declaration of every method and
    objective the sweep runs it with and of the benchmark (``catalog.option_problem``: each of
    those runs would refuse it)."""
    from supportbench import catalog
    from supportbench.errors import SpecError

    names = {
        "benchmark": (benchmark,),
        "objective": (*st["objectives"], *(st["replication_objectives"] or ())),
        "method": (*st["methods"], *st["dirr_methods"]),
    }
    problems = {kind: [] for kind in names}  # in the order a run checks them (``resolve``)
    for key, value in st["hyperparameters"].items():
        kind, dot, opt = key.partition(".")
        for name in names.get(kind, ()) if dot else ():
            if problem := catalog.option_problem(kind, name, opt, value):
                problems[kind].append(problem)
    for found in problems.values():  # within an owner, an undeclared option first, as a run
        if found:
            first = next((p for p in found if p[0] == "undeclared"), found[0])
            raise SpecError(f"[{benchmark}] {first[1]}")


def _dry_run(spec, step_seconds: float | None) -> int:
    from supportbench.harness.compute import sweep_estimate

    _check_names_light(spec)

    est = sweep_estimate(spec)
    print(f"experiment '{spec.name}': {est['runs']} runs (nothing loaded, nothing run)")
    for b, info in est["benchmarks"].items():
        print(f"\n{b}  model {info['model']}  T={info['T']} t={info['t']} d={info['d']}")
        print(f"  fields      {', '.join(info['fields'])}")
        print(f"  objectives  {', '.join(info['objectives'])}")
        print(f"  methods     {', '.join(info['methods'])}")
        for split, ph in info["phases"].items():
            steps = (
                f"{ph['steps_low']:,.0f}"
                if ph["steps_low"] == ph["steps_high"]
                else f"{ph['steps_low']:,.0f}-{ph['steps_high']:,.0f}"
            )
            print(
                f"  {split:<12} {ph['runs']:>5} runs ({ph['static']} static, {ph['dirr']} DIR-R) "
                f"in {ph['cells']} cells; {steps} step-equivalents"
            )
    lo, hi = est["steps_low"], est["steps_high"]
    print(
        f"\ntotal: {est['runs']} runs, {lo:,.0f}-{hi:,.0f} step-equivalents (final DIR-R runs "
        "between the non-triggered and the triggered path)"
    )
    if step_seconds:
        print(
            f"at {step_seconds:g} s per step: "
            f"{lo * step_seconds / 3600:,.1f}-{hi * step_seconds / 3600:,.1f} "
            "GPU-hours of training (diagnostics and evaluation not included)"
        )
    return 0


def _cmd_sweep(args) -> int:
    _check_executor_flags(args)  # the dry run refuses what the sweep would
    if not args.dry_run:
        _writable_dir(args.results, "--results")
        _writable_dir(*_cache_flag(args))
    from supportbench.experiments.plan import ExperimentSpec

    spec = ExperimentSpec.from_toml(args.spec)
    if args.dry_run:
        return _dry_run(spec, args.step_seconds)
    from supportbench.harness.sweep import run_sweep

    s = run_sweep(
        spec,
        args.results,
        _executor(args),
        cache_dir=args.cache,
        post_hoc=args.post_hoc,
        reuse_stale=args.reuse_stale,
    )
    _print_sweep(s)
    return 0 if not s.failed and not s.calibration_errors else 1


def _print_sweep(s) -> None:
    print(f"{s.runs} runs: {s.ok} ok ({s.skipped} already recorded), {len(s.failed)} not ok")
    if s.claims:
        print(f"  claims registered before the first run: decision {s.claims[:12]}")
    for f in s.failed[:10]:
        print(f"  {f['status']}: run {f['run_key'][:12]}: {f['error']}")
    for k, h in s.decisions.items():
        print(f"  frozen decision {k}: {h[:12]}")
    if s.post_hoc:
        print(f"  {s.post_hoc} non-triggered DIR-R runs completed post hoc (decisions unchanged)")
    for k, e in s.calibration_errors.items():
        print(f"  no decision for {k} (its DIR-R final runs were not started): {e}")
    for c in dict.fromkeys(s.corrupt):
        print(f"  unreadable record (its run was redone): {c}")


def _cmd_demo(args) -> int:
    import time

    _writable_dir(args.results, "--results")
    _writable_dir(getattr(args, "cache", None), "--cache")

    from supportbench.experiments.plan import ExperimentSpec
    from supportbench.harness.executors.local import LocalExecutor
    from supportbench.harness.sweep import run_sweep
    from supportbench.registry.audit import audit
    from supportbench.registry.ingest import ingest
    from supportbench.registry.store import connect
    from supportbench.reports.report import report

    t0 = time.time()
    out = ResultsDir(args.results)
    spec = ExperimentSpec.from_toml("mini-paper")
    print(f"demo: experiment '{spec.name}' ({len(spec.all_runs())} runs) -> {out.root}/")
    s = run_sweep(
        spec,
        out.root,
        LocalExecutor(args.workers or os.cpu_count()),
        cache_dir=args.cache,
        post_hoc=True,
    )
    _print_sweep(s)
    from supportbench.harness.extras import run_extras

    extras, lines = run_extras(spec, out.root, args.cache)
    for line in lines:
        print(line)
    con = connect(out.registry)
    print(ingest(con, out.root).summary())
    con.close()
    rep = audit(connect(out.registry, read_only=True), spec.name, spec)
    print(rep.text())
    st = report(out.registry, out.report, spec.name, html=True, spec=spec)
    if extras:
        report(out.registry, out.root / "report-extras", extras)
    done = sum(v is None for v in st["tables"].values())
    print(
        f"\nreport: {done}/{len(st['tables'])} tables rendered"
        + (" (the others carry a 'missing' note)" if done < len(st["tables"]) else "")
        + f", {sum(v is None for v in st['figures'].values())}/{len(st['figures'])} figures"
    )
    print(
        f"\nwritten in {time.time() - t0:.0f} s:\n  run records   {out.runs}/\n"
        f"  decisions     {out.decisions}/\n"
        f"  registry      {out.registry}\n  report        {out.report}/report.md\n"
        f"  tables        {out.report}/tables/\n  figures       {out.report}/figures/\n"
        f"  LaTeX         {out.report}/paper.tex\n  findings      {out.report}/findings.md\n"
        f"  HTML page     {st['html']}"
        + (f"\n  extras        {out.root}/report-extras/report.md" if extras else "")
    )
    if not rep.ok:  # the report is written, but nothing vouches for it: not a success
        print(
            "\ndemo: the audit FAILED (above): the findings are not vouched for",
            file=sys.stderr,
        )
    return 0 if not s.failed and rep.ok else 1


def _defaults(key: str) -> str:
    """A per-kind-of-model default, as --help shows it (experiments/spec.py is its one source)."""
    return ", ".join(f"{v[key]} for a {k} model" for k, v in MODEL_DEFAULTS.items())


def _ranged(kind, lo=None, hi=None, what="a value"):
    """An argparse type: ``kind`` (int or float), finite, within [lo, hi]; the error names the value
    and the allowed range before any work starts (exit 2)."""
    import math

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not finite; allowed: {what}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{text!r} is out of range; allowed: {what}")
        return value

    return parse


POSITIVE_INT = _ranged(int, 1, None, "a whole number >= 1")
POSITIVE = _ranged(float, 1e-300, None, "a number > 0")
SEED = _ranged(int, 0, MAX_SEED, "a whole number in 0..2^63-1")
STEPS = _ranged(int, 1, MAX_STEPS, f"a whole number in 1..{MAX_STEPS:,}")
# more torch threads than any machine has cores is a typo (and fails inside torch)
MAX_THREADS = 1024
THREADS = _ranged(int, 1, MAX_THREADS, f"a whole number in 1..{MAX_THREADS}")
PROBES = tuple(a for a in ACTIONS if a > 0)  # the action set A without 0 (RunSpec's rule)


def _probe(text: str) -> float:
    """--rho-p: one of the probe actions, named in the refusal."""
    allowed = ", ".join(str(a) for a in PROBES)
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; allowed: {allowed}") from None
    if value not in PROBES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a probe action; allowed: {allowed} (the action set A without 0)"
        )
    return value


class _Help(argparse.HelpFormatter):
    """Help that shows each option's default (when it has a meaningful one)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (
            "%(default)" not in text
            and action.default is not None
            and action.default is not False
            and action.default != argparse.SUPPRESS
            and (action.option_strings or action.nargs in ("?", "*"))
        ):
            text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """argparse's refusals as one line (``prog: error: ...``, exit 2), the usage left to
    ``--help``: an out-of-range value reads like every other refusal (issue 33)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="supportbench",
        description="Localized LLM unlearning: support selection (Intervention Score and ten "
        "baselines), selective DIR-R, benchmarks, a "
        "DuckDB results registry and the paper's tables.",
    )
    from supportbench import __version__

    p.add_argument("--version", action="version", version=f"supportbench {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    _add = sub.add_parser
    sub.add_parser = lambda *a, **k: _add(*a, formatter_class=_Help, **k)
    # one function per command, in the order `--help` lists them
    for add in (
        _parser_geometry,
        _parser_plan_memory,
        _parser_benchmarks,
        _parser_objectives,
        _parser_methods,
        _parser_run,
        _parser_calibrate,
        _parser_registry,
        _parser_audit,
        _parser_lacuna,
        _parser_report,
        _parser_sweep,
        _parser_demo,
    ):
        add(sub)
    _mark_commands(p)
    return p


def _mark_commands(parser: argparse.ArgumentParser) -> None:
    """Each (sub)command's parser stored as its own default (``_command``; the deepest chosen wins),
    so ``main`` refuses an unknown option in the words of the command it was given to."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # an alias maps to the same one
                child.set_defaults(_command=child)
                _mark_commands(child)


def _parser_geometry(sub) -> None:
    g = sub.add_parser(
        "geometry", help="show the editable geometry (down-proj columns) of a local model"
    )
    g.add_argument(
        "model", help="a model preset (tiny-llama, ...) or a local Hugging Face causal LM directory"
    )
    g.set_defaults(func=_cmd_geometry)


def _parser_plan_memory(sub) -> None:
    pm = sub.add_parser(
        "plan-memory",
        help="bytes per component of a support-constrained run, from the config alone",
    )
    pm.add_argument(
        "--model",
        required=True,
        help="llama3-8b, gemma2-2b, olmo3-7b, qwen2.5-7b, a preset, a local model directory, or a "
        "hub id (owner/name[@revision], from the Hugging Face cache)",
    )
    pm.add_argument(
        "--budget", type=POSITIVE, required=True, help="editable scalars, or a fraction (< 1)"
    )
    pm.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    pm.add_argument("--batch", type=POSITIVE_INT, default=8)
    pm.add_argument("--length", type=POSITIVE_INT, default=256)
    pm.add_argument("--checkpointing", action="store_true", help="activation checkpointing")
    pm.add_argument(
        "--column-grads",
        dest="column_grads",
        action="store_true",
        help="the support's gradients by per-column contractions (the column_grads setting)",
    )
    pm.add_argument(
        "--chunked-loss",
        dest="chunked_loss",
        action="store_true",
        help="the answer tokens' logits a chunk at a time (the chunked_loss setting)",
    )
    pm.add_argument("--gpu-gib", dest="gpu_gib", type=POSITIVE, nargs="*", default=[80.0])
    pm.set_defaults(func=_cmd_plan_memory)


def _parser_benchmarks(sub) -> None:
    bl = sub.add_parser(
        "benchmarks", help="list benchmarks: default model and field, interfaces, fields"
    )
    bl.add_argument(
        "--options",
        action="store_true",
        help="each benchmark's options with range, unit and default",
    )
    bl.set_defaults(func=_cmd_benchmarks)


def _parser_objectives(sub) -> None:
    ol = sub.add_parser(
        "objectives", help="list unlearning objectives and their options with defaults"
    )
    ol.set_defaults(func=_cmd_objectives)


def _parser_methods(sub) -> None:
    m = sub.add_parser(
        "methods", help="list selection methods: name, what data they need, provenance"
    )
    m.add_argument("--full", action="store_true", help="do not shorten provenance")
    m.add_argument(
        "--options", action="store_true", help="each method's options with range, unit and default"
    )
    m.set_defaults(func=_cmd_methods)


def _parser_run(sub) -> None:
    r = sub.add_parser(
        "run",
        help="run one cell (benchmark x field x objective x method x seed) and print its outcome",
    )
    _run_cell_arguments(r)
    _run_schedule_arguments(r)
    _run_model_arguments(r)
    _run_execution_arguments(r)
    r.set_defaults(func=_cmd_run)


def _run_cell_arguments(parser: argparse.ArgumentParser) -> None:
    """The cell's identity: benchmark, field, objective, method, seeds, variant, split and
    experiment."""
    parser.add_argument(
        "--benchmark",
        default="natural_tofu",
        help="the benchmark (`supportbench benchmarks` lists them)",
    )
    parser.add_argument(
        "--field",
        default=None,
        help="default: forget10 (TOFU), Email_Address (LACUNA); controlled: every target",
    )
    parser.add_argument(
        "--objective", default="npo", help="npo, simnpo, graddiff or ga (`supportbench objectives`)"
    )
    parser.add_argument(
        "--method", default=None, help="default: intervention_score; controlled: both interfaces"
    )
    parser.add_argument(
        "--seed",
        type=SEED,
        default=0,
        help="the run's seed (batches, random choices); a whole number in 0..2^63-1",
    )
    parser.add_argument(
        "--build",
        type=SEED,
        default=0,
        help="the theta_0 build: the seed of the benchmark's construction (generated data, "
        "initialisation, batch order, interfaces, masks); each build has its own theta_0; a whole "
        "number in 0..2^63-1",
    )
    parser.add_argument("--variant", default="static", help="static or dirr")
    parser.add_argument("--split", default="final", help="calibration, final or replication")
    parser.add_argument(
        "--experiment", default="adhoc", help="the experiment the run is recorded under"
    )


def _run_schedule_arguments(parser: argparse.ArgumentParser) -> None:
    """The budget and the unlearning schedule: T and DIR-R's t, d and probe action."""
    parser.add_argument(
        "--budget",
        type=POSITIVE,
        default=DEFAULT_BUDGET,
        help="editable scalars: a fraction in (0, 1) of the total, or a whole number of scalars >= "
        "1 (default %(default)s)",
    )
    parser.add_argument(
        "--T",
        type=STEPS,
        default=None,
        help="unlearning steps, a whole number in "
        f"1..{MAX_STEPS:,} (default by model: {_defaults('T')})",
    )
    parser.add_argument(
        "--t",
        type=POSITIVE_INT,
        default=None,
        help="DIR-R decision checkpoint (steps), 0 < t < "
        "T (default floor(0.8 T): 32 of 40, 160 of 200)",
    )
    parser.add_argument(
        "--d",
        type=POSITIVE_INT,
        default=None,
        help="DIR-R probe length (steps), 0 < d <= T - t (default max(1, floor(0.1 T)): 4 of 40, "
        "20 of 200)",
    )
    parser.add_argument(
        "--rho-p",
        dest="rho_p",
        type=_probe,
        default=None,
        help="DIR-R probe action, one of "
        f"{', '.join(map(str, PROBES))} (default {_defaults('rho_p')})",
    )


def _run_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The model and data the run starts from, and ``--set`` for any other setting."""
    parser.add_argument(
        "--model",
        default=None,
        help="model preset (tiny-llama, small-llama, tiny-olmo3, tiny-qwen2), a local Hugging "
        "Face model directory, or a hub id (owner/name[@revision], resolved through the Hugging "
        "Face cache; HF_HUB_OFFLINE=1 honoured); default: the benchmark's (tiny-llama for TOFU, "
        "tiny-olmo3 for LACUNA, tiny-qwen2 for controlled)",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help="read the benchmark's real files from here, a folder or a data set's hub id "
        "(e.g. locuslab/TOFU; = --set benchmark.data_dir=DIR)",
    )
    parser.add_argument(
        "--theta0",
        default=None,
        metavar="PATH|ID",
        help="TOFU: start from this ready fine-tuned model folder or hub id as theta_0, used as "
        "it is (e.g. open-unlearning's tofu_Llama-3.2-1B-Instruct_full; = --model PATH --set "
        "benchmark.theta0=given); its prompts follow its chat template (benchmark.chat_template, "
        "benchmark.template.system_prompt=...)",
    )
    parser.add_argument(
        "--retain-model",
        dest="retain_model",
        default=None,
        metavar="PATH|ID",
        help="TOFU: a ready retain model folder or hub id for forget quality (e.g. "
        "..._retain90 for forget10; = --set benchmark.retain_model=PATH) instead of one trained "
        "here",
    )
    parser.add_argument(
        "--eval-every",
        dest="eval_every",
        type=_ranged(int, 0, 10**9, "a whole number of steps in [0, 1000000000]"),
        default=None,
        metavar="K",
        help="a curve: J's components on a fixed evaluation slice every K steps, K in "
        "[0, 10^9] steps, 0 none (= --set eval_every=K; static runs; the terminal model is "
        "scored as always)",
    )
    parser.add_argument(
        "--curve-metrics",
        dest="curve_metrics",
        action="store_true",
        help="with --eval-every: each point also carries the benchmark's own metrics on the slice "
        "(its full evaluation: ROUGE, forget quality, EM/ES, precision; it generates, so it costs "
        "more; = --set curve_metrics=true)",
    )
    parser.add_argument(
        "--relearn-steps",
        dest="relearn_steps",
        type=_ranged(int, 0, 10**6, "a whole number of steps in [0, 1000000]"),
        default=None,
        metavar="N",
        help="after the terminal score, the relearning attack: N steps of fine-tuning on data "
        "outside every role, then LACUNA's resurfacing counts (= --set relearn_steps=N; "
        "relearn_lr, relearn_batch_size by --set)",
    )
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="a setting (repeatable): "
        + "; ".join(
            help_line(k, h, DEFAULT_HYPERPARAMETERS.get(k)) for k, h in RUN_SETTINGS.items()
        )
        + ". Or an option of the objective, method or benchmark: objective.beta=0.2, "
        "method.eps=1e-6, benchmark.size=full (`supportbench objectives`, `methods --options`, "
        "`benchmarks --options` list each one's range and unit)",
    )


def _run_execution_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the record goes and how the run executes: results, cache, DIR-R decision, rerun
    policy, threads, dtype, device."""
    parser.add_argument(
        "--results",
        default=str(DEFAULT_RESULTS.root),
        help="the results folder the run record is written to",
    )
    parser.add_argument(
        "--cache",
        default=None,
        help="cache directory for prepared models (default "
        "$SUPPORTBENCH_CACHE, else the user cache)",
    )
    parser.add_argument(
        "--decision", default=None, help="frozen DIR-R decision file (variant dirr, final split)"
    )
    parser.add_argument(
        "--allow-unfrozen", action="store_true", help="run DIR-R without a frozen decision"
    )
    parser.add_argument("--force", action="store_true", help="rerun even if the record exists")
    parser.add_argument(
        "--log-to",
        dest="log_to",
        choices=TRACKERS,
        default=None,
        help="also log the run live to TensorBoard (results/tracking/tensorboard) or W&B, if that "
        "package is installed: the curve's points (--eval-every) and the terminal outcome; a view, "
        "never the record (docs/reports.md, 'Live logging')",
    )
    parser.add_argument(
        "--reuse-stale",
        dest="reuse_stale",
        action="store_true",
        help="keep a record computed by older code (its "
        "fingerprint differs); the audit flags the mix",
    )
    parser.add_argument(
        "--threads",
        type=THREADS,
        default=1,
        help=f"torch threads (one per worker process), a whole number in 1..{MAX_THREADS}",
    )
    parser.add_argument(
        "--dtype",
        default=None,
        choices=["float32", "bfloat16", "float16"],
        help="weights' dtype during the run (part of the run key); the support trains in fp32",
    )
    parser.add_argument(
        "--device", default="auto", help="auto (a CUDA GPU if present, else cpu), cpu, cuda, cuda:N"
    )


def _parser_calibrate(sub) -> None:
    c = sub.add_parser(
        "calibrate", help="choose tau* on calibration-seed DIR-R runs and freeze the decision"
    )
    c.add_argument(
        "--results",
        default=str(DEFAULT_RESULTS.root),
        help="the results folder holding the calibration runs",
    )
    c.add_argument(
        "--experiment", default="adhoc", help="the experiment whose calibration runs are used"
    )
    c.add_argument("--benchmark", required=True)
    c.add_argument("--objective", required=True)
    c.add_argument(
        "--range",
        nargs=2,
        type=float,
        default=[0.2, 0.8],
        metavar=("LO", "HI"),
        help="admissible trigger fraction (default 0.2 0.8)",
    )
    c.add_argument("--baselines", nargs="*", help="baseline identities frozen with the decision")
    c.add_argument(
        "--out", default=None, help="where the decision is written (default: RESULTS/decisions)"
    )
    c.set_defaults(func=_cmd_calibrate)


def _parser_registry(sub) -> None:
    g = sub.add_parser(
        "registry", help="the DuckDB results registry: ingest | import | export | query"
    )
    g.add_argument("action", choices=["ingest", "import", "export", "query"])
    g.add_argument(
        "path",
        nargs="?",
        help="ingest: results directory (default ./results); export: .csv or .parquet "
        "file; import: an outcome table, TOFU eval logs, open-unlearning "
        "EVAL/SUMMARY files or a LACUNA run folder",
    )
    g.add_argument(
        "--registry",
        default=None,
        help="the DuckDB registry file. Default: the registry of the results folder, "
        "<folder>/registry.duckdb: for ingest, DIR's (DIR/registry.duckdb); for "
        "import, export and query, the default results folder's "
        "(./results/registry.duckdb). Ingest and import print the registry they "
        "wrote",
    )
    g.add_argument(
        "--experiment",
        default=None,
        help="export: only this experiment; import: the imported run's",
    )
    g.add_argument(
        "--format",
        default=None,
        choices=[*IMPORT_FORMATS, *QUERY_FORMATS],
        help="import: the source's format (default: detected from PATH); query: how "
        "rows are printed, table (default), csv or json (machine-readable, to "
        "stdout)",
    )
    g.add_argument(
        "--retain",
        default=None,
        metavar="DIR",
        help="import tofu-logs: the retain model's TOFU logs; ou-eval: its TOFU_EVAL.json (forget "
        "quality's reference)",
    )
    for opt in ("benchmark", "field", "objective", "method", "seed", "variant", "split", "model"):
        g.add_argument(
            f"--{opt}", default=None, help=f"import (single-run formats): the run's {opt}"
        )
    g.add_argument(
        "-c",
        dest="command_sql",
        default=None,
        help="query: run this SQL and exit (every row up to 10,000; a line says when "
        "more were cut)",
    )
    g.add_argument(
        "--replace-reruns",
        dest="replace_reruns",
        action="store_true",
        help="ingest: let records rerun by changed code replace stored outcomes (each logged)",
    )
    g.add_argument(
        "--allow-unknown",
        dest="allow_unknown",
        action="store_true",
        help="ingest, import: store benchmark, method and objective names that are not "
        "registered here (e.g. another project's method), and say how many; "
        "without it they are refused",
    )
    g.set_defaults(func=_cmd_registry)


def _parser_audit(sub) -> None:
    a = sub.add_parser(
        "audit", help="missing / duplicated / failed / wrong-split runs, post-hoc decisions"
    )
    a.add_argument(
        "--registry", default=str(DEFAULT_RESULTS.registry), help="the DuckDB registry file"
    )
    a.add_argument("--experiment", default=None)
    a.add_argument(
        "--spec",
        default=None,
        help="experiment TOML or shipped spec name: the expected grid (default: observed levels)",
    )
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=_cmd_audit)


def _parser_lacuna(sub) -> None:
    la = sub.add_parser(
        "lacuna",
        help="LACUNA artifacts: precision = localization precision of upstream's "
        "unlearned_models/<Field>/<Method>/ folders (streaming, read-only)",
    )
    la.add_argument("action", choices=["precision"])
    la.add_argument("path", help="the artifact root, a <size> folder or a <size>/<regime> folder")
    la.add_argument(
        "--size", default=None, help="the model size folder when the root holds several"
    )
    la.add_argument("--regime", default="masked", choices=["masked", "unmasked"])
    la.add_argument("--field", action="append", default=None, help="only this field (repeatable)")
    la.add_argument(
        "--method", action="append", default=None, help="only this method folder (repeatable)"
    )
    la.add_argument("--json", action="store_true", help="every metric of every folder as JSON")
    la.set_defaults(func=_cmd_lacuna)


def _parser_report(sub) -> None:
    rp = sub.add_parser(
        "report",
        help="per-method tables, every paper table (LaTeX), figures, report.md and "
        "paper.tex from a registry",
    )
    rp.add_argument(
        "--registry",
        default=str(DEFAULT_RESULTS.registry),
        help="the DuckDB registry file to report on",
    )
    rp.add_argument(
        "--out",
        default=str(DEFAULT_RESULTS.report),
        help="the report folder (replaced whole: only a new or empty folder, or one a "
        "report wrote and nobody changed since; never the registry's folder)",
    )
    rp.add_argument(
        "--experiment", default=None, help="required when the registry holds several experiments"
    )
    rp.add_argument(
        "--findings",
        default=None,
        metavar="PATH",
        help="also write findings.md here (e.g. docs/findings.md): a new file, or a "
        "findings.md a report wrote before; never any other file",
    )
    rp.add_argument(
        "--reference",
        default=None,
        metavar="METHOD",
        help="the method the per-method tables compare with (METHOD, or METHOD:dirr for its DIR-R "
        "runs); default intervention_score when present, else the first method alphabetically",
    )
    rp.add_argument(
        "--pdf",
        action="store_true",
        help="also build paper.pdf with pdflatex (texlive-latex-base, -recommended, -extra)",
    )
    rp.add_argument(
        "--html",
        action="store_true",
        help="also write index.html: the report as one self-contained page (data, CSS, script "
        "and figures inlined; opens from the file, no server or network)",
    )
    rp.add_argument(
        "--spec",
        help="experiment TOML or shipped spec name, for the audit the report shows (its expected "
        "grid); without it the audit infers the grid from the runs",
    )
    rp.add_argument(
        "--kind",
        choices=("auto", "paper", "experiment"),
        default="auto",
        help="paper: the paper's tables and claims; experiment: only what the experiment ran; "
        "auto (default): paper when the experiment ran the paper's grid (the controlled "
        "construction, or Intervention Score with the ten baselines on Natural-TOFU or LACUNA)",
    )
    rp.set_defaults(func=_cmd_report)


def _parser_sweep(sub) -> None:
    sw = sub.add_parser(
        "sweep", help="run an experiment spec: calibration seeds, frozen decisions, final seeds"
    )
    sw.add_argument("spec", help="experiment TOML file, or the name of a shipped spec (mini-paper)")
    sw.add_argument(
        "--results",
        default=str(DEFAULT_RESULTS.root),
        help="the results folder (records, decisions, registry)",
    )
    sw.add_argument(
        "--dry-run",
        dest="dry_run",
        action="store_true",
        help="list the cells, runs per phase and the compute estimate; load nothing, run nothing",
    )
    sw.add_argument(
        "--step-seconds",
        dest="step_seconds",
        type=POSITIVE,
        default=None,
        help="with --dry-run: a measured seconds per optimisation step, for a GPU-hour estimate",
    )
    sw.add_argument(
        "--reuse-stale",
        dest="reuse_stale",
        action="store_true",
        help="keep records computed by older code (fingerprint differs); the audit flags the mix",
    )
    sw.add_argument("--cache", default=None)
    sw.add_argument(
        "--workers", type=POSITIVE_INT, default=None, help="local worker processes (default: cores)"
    )
    sw.add_argument("--executor", choices=["local", "slurm"], default="local")
    sw.add_argument(
        "--slurm",
        action="append",
        metavar="KEY=VALUE",
        help="submitit/Slurm parameter, e.g. partition=cpu",
    )
    sw.add_argument(
        "--post-hoc",
        action="store_true",
        help="complete non-triggered DIR-R candidate sets afterwards (available-gain denominator)",
    )
    sw.set_defaults(func=_cmd_sweep)


def _parser_demo(sub) -> None:
    dm = sub.add_parser(
        "demo", help="the embedded mini-paper experiment end to end: sweep, registry, audit, report"
    )
    dm.add_argument(
        "--results", default=str(DEFAULT_RESULTS.root / "demo"), help="the demo's results folder"
    )
    dm.add_argument("--cache", default=None)
    dm.add_argument("--workers", type=POSITIVE_INT, default=None)
    dm.set_defaults(func=_cmd_demo)


def _quiet_libraries() -> None:
    """Library deprecation chatter (transformers' FutureWarnings) stays out of the output, in this
    process and in its workers; progress bars redraw at most every 30 s when stderr is not a
    terminal (a log file)."""
    import warnings

    warnings.filterwarnings(
        "ignore", category=FutureWarning, module=r"(transformers|torch|peft)(\..*)?$"
    )
    # worker processes start with it
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    if not sys.stderr.isatty():
        os.environ.setdefault("TQDM_MININTERVAL", "30")


def main(argv: list[str] | None = None) -> int:
    _quiet_libraries()
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # as parse_args refuses them, but naming the command they were given to
        getattr(args, "_command", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    with noting_interrupts() as noted:
        return _run(args, noted)


def _run(args, noted: Noted) -> int:
    """The command, its errors as one line each: a refusal (exit 2), a Ctrl-C (130, also one that
    DuckDB took and turned into its own error: ``noted``), anything else an internal error (1)."""
    try:
        return int(args.func(args) or 0)
    except SupportbenchError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader (e.g. `| head`) has gone: not an error of ours
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # unexpected: one line here, the whole traceback in a file
        if noted.hit:  # DuckDB's 'Query interrupted' (or what followed it) after a Ctrl-C
            print("interrupted", file=sys.stderr)
            return 130
        path = _write_traceback(exc)
        print(
            f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
            f"(full traceback: {path}; please report it)",
            file=sys.stderr,
        )
        return 1


def _write_traceback(exc: BaseException) -> str:
    import tempfile
    import traceback

    fd, path = tempfile.mkstemp(prefix="supportbench-traceback-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("".join(traceback.format_exception(exc)))
    return path


if __name__ == "__main__":
    sys.exit(main())
