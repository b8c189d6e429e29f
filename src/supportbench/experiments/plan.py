"""Experiment specs (TOML) -> the grid of RunSpecs, in the order the protocol needs.

    [experiment]
    name = "mini-paper"
    benchmarks = ["natural_tofu"]
    model = "tiny-llama"
    fields = ["forget10"]
    objectives = ["npo", "simnpo"]
    methods = ["intervention_score", "random", ...]     # Static runs for every method
    dirr_methods = ["intervention_score"]               # DIR-R runs (the paper's method)
    budget = 0.1
    builds = [0, 1, 2]                                  # theta_0 builds: independent constructions
    T = 40
    t = 32
    d = 4
    rho_p = 0.01
    [experiment.seeds]
    calibration = [73, 311]
    final = [4099, 8191]
    [hyperparameters]
    lr = 0.01
    [dirr]
    admissible_range = [0.2, 0.8]
    selection = "development"

Calibration seeds run DIR-R only (to calibrate tau*); final and replication seeds run every method
statically plus DIR-R. No torch here: the audit reads the same grid.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from supportbench._io import file_or_shipped
from supportbench.errors import SpecError
from supportbench.experiments.claims import load as load_claims
from supportbench.experiments.decisions import SELECTIONS
from supportbench.experiments.spec import (
    DEFAULT_BUDGET,
    SPLITS,
    RunSpec,
    checkpoint_of,
    default_model,
    model_defaults,
)


def shipped_specs() -> dict[str, Path]:
    """The experiment specs shipped inside the package (``supportbench/experiments/*.toml``), by
    name."""
    here = Path(__file__).parent
    return {p.stem: p for p in sorted(here.glob("*.toml"))}


def resolve_spec_path(spec: str | Path) -> Path:
    """A spec file's path: the file itself when it is one, else the shipped spec of that name."""
    return file_or_shipped(spec, shipped_specs(), "experiment spec", SpecError)


SECTIONS = ("experiment", "hyperparameters", "dirr")
# the grid's keys, in [experiment] and in each [experiment.<benchmark>] table
GRID_KEYS = (
    *("fields", "objectives", "methods", "dirr_methods", "model", "budget"),
    *("T", "t", "d", "rho_p", "seeds", "builds"),
)
EXPERIMENT_KEYS = ("name", "benchmarks", "benchmark", *GRID_KEYS, "claims")
DIRR_KEYS = ("admissible_range", "selection")
BENCHMARK_KEYS = (*GRID_KEYS, "replication_fields", "replication_objectives", "hyperparameters")


def _known(table: dict, allowed, source: str, prefix: str, what: str) -> None:
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
            raise SpecError(
                f"{source}: unknown {what} '{prefix}{key}'"
                + (f" (did you mean '{prefix}{close[0]}'?)" if close else "")
                + f"; allowed: {', '.join(prefix + a for a in allowed)}"
            )


def _isnum(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, int | float)


def _ints(values, source: str, path: str) -> list[int]:
    if not isinstance(values, list | tuple):
        raise SpecError(f"{source}: {path} must be a list of whole numbers, got {values!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpecError(f"{source}: {path} must hold whole numbers, got {v!r}")
    twice = sorted({v for v in values if list(values).count(v) > 1})
    if twice and path.split(".")[-2:-1] == ["seeds"]:
        raise SpecError(f"{source}: {path} lists seed(s) {twice} more than once (one run per seed)")
    return list(values)


def _builds(values, source: str, path: str) -> tuple[int, ...]:
    """theta_0 builds: a non-empty list of distinct whole numbers in 0..2^63-1."""
    builds = _ints(values, source, path)
    if not builds:
        raise SpecError(f"{source}: {path} must list at least one build, got {values!r}")
    bad = [b for b in builds if not 0 <= b <= 2**63 - 1]
    if bad:
        raise SpecError(
            f"{source}: {path} holds {bad[0]!r}; a build is a whole number in 0..2^63-1"
        )
    if len(set(builds)) != len(builds):
        raise SpecError(f"{source}: {path} lists a build more than once: {builds}")
    return tuple(builds)


def _names(values, source: str, path: str, empty_ok: bool = False) -> list[str]:
    if not isinstance(values, list | tuple) or (not values and not empty_ok):
        raise SpecError(f"{source}: {path} must be a non-empty list of names, got {values!r}")
    for v in values:
        if not isinstance(v, str) or not v.strip():
            raise SpecError(f"{source}: {path} must hold names (strings), got {v!r}")
    if len(set(values)) != len(values):
        raise SpecError(f"{source}: {path} lists a name twice: {list(values)}")
    return list(values)


CELL = (
    "experiment",
    "benchmark",
    "build",
    "field",
    "objective",
    "method",
    "variant",
    "seed",
    "split",
)


def _check_run_settings(table: dict, source: str, where: str) -> None:
    """budget and rho_p are numbers, T, t and d whole numbers, wherever a table sets them."""
    for k in ("budget", "rho_p"):
        if k in table and not _isnum(table[k]):
            raise SpecError(f"{source}: {where}.{k} must be a number, got {table[k]!r}")
    for k in ("T", "t", "d"):
        if k in table:
            _ints([table[k]], source, f"{where}.{k}")


def _benchmark_tables(per_bench: dict, benchmarks: list[str], source: str) -> dict[str, dict]:
    """The checked ``[experiment.benchmark.<name>]`` tables: each names a benchmark the experiment
    runs, and every key, name list, seed table and build list in it is checked as the experiment's
    own are."""
    settings = {}
    for b, table in per_bench.items():
        where = f"experiment.benchmark.{b}"
        if b not in benchmarks:
            raise SpecError(
                f"{source}: [{where}] names a benchmark the experiment does not run "
                f"(experiment.benchmarks = {list(benchmarks)})"
            )
        if not isinstance(table, dict):
            raise SpecError(f"{source}: {where} must be a table")
        _known(table, BENCHMARK_KEYS, source, where + ".", "per-benchmark key")
        own = dict(table)
        for k in (
            "fields",
            "objectives",
            "methods",
            "dirr_methods",
            "replication_fields",
            "replication_objectives",
        ):
            if k in own:
                own[k] = tuple(_names(own[k], source, f"{where}.{k}", empty_ok=k == "dirr_methods"))
        if "seeds" in own:
            if not isinstance(own["seeds"], dict):
                raise SpecError(f"{source}: {where}.seeds must be a table")
            _known(own["seeds"], SPLITS, source, f"{where}.seeds.", "seed split")
            own["seeds"] = {
                k: tuple(_ints(v, source, f"{where}.seeds.{k}")) for k, v in own["seeds"].items()
            }
        _check_run_settings(own, source, where)
        if "hyperparameters" in own and not isinstance(own["hyperparameters"], dict):
            raise SpecError(f"{source}: {where}.hyperparameters must be a table")
        if "hyperparameters" in own:
            own["hyperparameters"] = _dotted(own["hyperparameters"], source)
        if "builds" in own:
            own["builds"] = _builds(own["builds"], source, f"{where}.builds")
        settings[b] = own
    return settings


def _experiment_table(raw: dict, source: str) -> tuple[dict, dict | None]:
    """A copy of the ``[experiment]`` table, its keys known and the required ones present, and its
    ``[experiment.benchmark.<name>]`` tables taken out of it (None if it has none)."""
    if not isinstance(raw.get("experiment"), dict):
        got = raw.get("experiment")
        raise SpecError(
            f"{source}: no [experiment] section"
            + (
                ""
                if got is None
                else f" (experiment = {got!r} is a value, "
                "not a table: write [experiment] and its keys)"
            )
        )
    e = dict(raw["experiment"])
    _known(e, EXPERIMENT_KEYS, source, "experiment.", "[experiment] key")
    per_bench = e.pop("benchmark", None) if isinstance(e.get("benchmark"), dict) else None
    need = ["name", "fields", "objectives", "methods", "seeds"]
    missing = [k for k in need if k not in e] + (
        [] if ("benchmarks" in e or "benchmark" in e) else ["benchmarks"]
    )
    if missing:
        raise SpecError(f"{source}: [experiment] lacks {missing}")
    return e, per_bench


def _seeds(e: dict, source: str) -> dict[str, tuple[int, ...]]:
    """``experiment.seeds``, taken out of ``e``: a table of known splits, each a list of whole
    numbers, no calibration seed among the final or replication ones."""
    if not isinstance(e["seeds"], dict):
        raise SpecError(
            f"{source}: experiment.seeds must be a table "
            f"like [experiment.seeds], got {e['seeds']!r}"
        )
    _known(e["seeds"], SPLITS, source, "experiment.seeds.", "seed split")
    seeds = {k: tuple(_ints(v, source, f"experiment.seeds.{k}")) for k, v in e.pop("seeds").items()}
    overlap = set(seeds.get("calibration", ())) & (
        set(seeds.get("final", ())) | set(seeds.get("replication", ()))
    )
    if overlap:
        raise SpecError(
            f"{source}: calibration seeds {sorted(overlap)} "
            "also appear among final/replication seeds"
        )
    return seeds


def _benchmark_names(e: dict, source: str) -> list[str]:
    """``experiment.benchmarks`` or the one ``experiment.benchmark`` (not both), taken out of
    ``e``."""
    if "benchmarks" in e and "benchmark" in e:
        raise SpecError(f"{source}: give experiment.benchmarks or experiment.benchmark, not both")
    return (
        _names(e.pop("benchmarks"), source, "experiment.benchmarks")
        if "benchmarks" in e
        else _names([e.pop("benchmark")], source, "experiment.benchmark")
    )


def _dirr_and_hyperparameters(raw: dict, source: str) -> tuple[dict, list | tuple, str]:
    """The ``[hyperparameters]`` table and ``[dirr]``'s admissible range and selection, checked."""
    dirr = raw.get("dirr") or {}
    if not isinstance(dirr, dict):
        raise SpecError(f"{source}: [dirr] must be a table")
    _known(dirr, DIRR_KEYS, source, "dirr.", "[dirr] key")
    hp = raw.get("hyperparameters") or {}
    if not isinstance(hp, dict):
        raise SpecError(f"{source}: [hyperparameters] must be a table")
    hp = _dotted(hp, source)
    rng = dirr.get("admissible_range", (0.2, 0.8))
    if (
        not isinstance(rng, list | tuple)
        or len(rng) != 2
        or not all(_isnum(x) for x in rng)
        or not 0 <= rng[0] <= rng[1] <= 1
    ):
        raise SpecError(
            f"{source}: dirr.admissible_range must be [lo, hi] with 0 <= lo <= hi <= 1, got {rng!r}"
        )
    selection = dirr.get("selection", "development")
    if selection not in SELECTIONS:
        raise SpecError(
            f"{source}: dirr.selection {selection!r} is "
            f"not allowed; allowed: {', '.join(SELECTIONS)}"
        )
    return hp, rng, selection


# the namespaces of objective, method and benchmark options: in TOML, ``objective.beta = 0.1``
# (unquoted) and ``[hyperparameters.objective]`` are tables; read as the dotted name
NAMESPACES = ("objective", "method", "benchmark")


def _dotted(hp: dict, source: str) -> dict:
    """``[hyperparameters]`` with the namespaces' tables as dotted names (``{"objective": {"beta":
    1}}`` -> ``{"objective.beta": 1}``, nested tables too); a name given both ways is refused."""
    out: dict = {}

    def put(key: str, value, table: bool) -> None:
        if table and isinstance(value, dict):
            for k, v in value.items():
                put(f"{key}.{k}", v, True)
        elif key in out:
            raise SpecError(f"{source}: hyperparameter {key!r} is given twice")
        else:
            out[key] = value

    for k, v in hp.items():
        put(k, v, k in NAMESPACES)
    return out


def _check_experiment_values(e: dict, source: str) -> None:
    """The experiment's run settings, model and name have the right types."""
    _check_run_settings(e, source, "experiment")
    if "model" in e and (not isinstance(e["model"], str) or not e["model"]):
        raise SpecError(
            f"{source}: experiment.model must be a preset name or a model directory, "
            f"got {e['model']!r}"
        )
    if not isinstance(e["name"], str) or not e["name"].strip():
        raise SpecError(f"{source}: experiment.name must be a non-empty string, got {e['name']!r}")


def _claims(e: dict, source: str) -> str | None:
    """``experiment.claims``: a claims file's path (one relative to the spec's folder made absolute)
    or a shipped name, parsed here, before anything runs; None for the paper's."""
    claims = e.get("claims")
    if claims is not None and (not isinstance(claims, str) or not claims.strip()):
        raise SpecError(
            f"{source}: experiment.claims must name a claims file (a path or a shipped name), "
            f"got {claims!r}"
        )
    if (
        claims is not None
        and not Path(claims).is_absolute()
        and (Path(source).parent / claims).is_file()
    ):
        # a path is relative to the spec's folder
        claims = str((Path(source).parent / claims).resolve())
    load_claims(claims)  # the claims it will be judged on parse, before anything runs
    return claims


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    benchmarks: tuple[str, ...]
    fields: tuple[str, ...]
    objectives: tuple[str, ...]
    methods: tuple[str, ...]
    dirr_methods: tuple[str, ...]
    seeds: dict[str, tuple[int, ...]]
    model: str | None = (
        None  # None: each benchmark's default model (experiments/spec.py DEFAULT_MODELS)
    )
    budget: float = DEFAULT_BUDGET
    builds: tuple[int, ...] = (
        0,
    )  # theta_0 builds (RunSpec.build): each runs the whole grid on its own theta_0
    claims: str | None = (
        None  # the pre-registered claims file (experiments/claims.py); None: the shipped one
    )
    T: int | None = None  # None: the model's default (experiments/spec.py MODEL_DEFAULTS)
    t: int | None = None
    d: int | None = None
    rho_p: float | None = None
    hyperparameters: dict = field(default_factory=dict)
    admissible_range: tuple[float, float] = (0.2, 0.8)
    selection: str = "development"  # DIR-R's candidates on development records (docs/dirr.md)
    # per-benchmark overrides ([experiment.benchmark.<name>]): fields, objectives, model, budget, T,
    # t, d, rho_p, seeds, replication_fields, replication_objectives, hyperparameters
    benchmark_settings: dict = field(default_factory=dict)

    def settings(self, benchmark: str) -> dict:
        """The settings a benchmark's runs use: the experiment's, overridden by its own table."""
        base = {
            "fields": self.fields,
            "objectives": self.objectives,
            "methods": self.methods,
            "dirr_methods": self.dirr_methods,
            "model": self.model,
            "budget": self.budget,
            "builds": self.builds,
            "T": self.T,
            "t": self.t,
            "d": self.d,
            "rho_p": self.rho_p,
            "seeds": self.seeds,
            "replication_fields": None,
            "replication_objectives": None,
            "hyperparameters": {},
        }
        own = self.benchmark_settings.get(benchmark, {})
        out = {**base, **own}
        out["seeds"] = {**self.seeds, **own.get("seeds", {})}
        out["hyperparameters"] = {**self.hyperparameters, **own.get("hyperparameters", {})}
        if out["model"] is None:
            out["model"] = default_model(benchmark)
        for k, v in model_defaults(
            out["model"]
        ).items():  # the one source of defaults, as RunSpec resolves them
            if k in ("T", "rho_p") and out[k] is None:
                out[k] = v
        # a benchmark's own T: its t and d follow it, not the experiment's T's, unless it names them
        if "T" in own:
            out["t"], out["d"] = own.get("t"), own.get("d")
        t, d = (
            checkpoint_of(out["T"])
            if isinstance(out["T"], int) and not isinstance(out["T"], bool)
            else (None,) * 2
        )
        out["t"] = t if out["t"] is None else out["t"]
        out["d"] = d if out["d"] is None else out["d"]
        return out

    @classmethod
    def from_toml(cls, path: str | Path) -> ExperimentSpec:
        """Load a spec from a TOML file, or from a shipped spec's name (``mini-paper``; see
        ``shipped_specs``)."""
        from supportbench._io import MAX_DEPTH, nesting_depth

        path = resolve_spec_path(path)
        deep = SpecError(
            f"cannot read experiment spec '{path}': arrays, tables or dotted keys "
            f"nested more than {MAX_DEPTH} levels deep; a spec nests a few"
        )
        try:
            text = path.read_text(encoding="utf-8")
            if nesting_depth(text, toml=True) > MAX_DEPTH:  # before tomllib runs out of stack
                raise deep
            raw = tomllib.loads(text)
        except UnicodeDecodeError as exc:
            raise SpecError(
                f"cannot read experiment spec '{path}': not UTF-8 "
                f"(byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); a TOML file is UTF-8"
            ) from None
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SpecError(f"cannot read experiment spec '{path}': {exc}") from None
        except RecursionError:
            raise deep from None
        try:
            return cls.from_dict(raw, source=str(path))
        except RecursionError:  # e.g. a dotted key a.b.c... thousands of tables deep
            raise deep from None

    @classmethod
    def from_dict(cls, raw: dict, source: str = "experiment spec") -> ExperimentSpec:
        """Build and check a spec: unknown sections and keys are refused (with their path and a "did
        you mean"), every value has its type checked, and every RunSpec of the grid is built once so
        that a bad value fails here, before anything runs. Registry names (methods, objectives,
        benchmarks) are checked by ``harness.validate`` (they need the plugin registries)."""
        _known(raw, SECTIONS, source, "", "section")
        e, per_bench = _experiment_table(raw, source)
        seeds = _seeds(e, source)
        benchmarks = _benchmark_names(e, source)
        hp, rng, selection = _dirr_and_hyperparameters(raw, source)
        _check_experiment_values(e, source)
        settings = _benchmark_tables(per_bench or {}, benchmarks, source)
        claims = _claims(e, source)
        spec = cls(
            name=e["name"],
            benchmarks=tuple(benchmarks),
            fields=tuple(_names(e["fields"], source, "experiment.fields")),
            objectives=tuple(_names(e["objectives"], source, "experiment.objectives")),
            methods=tuple(_names(e["methods"], source, "experiment.methods")),
            dirr_methods=tuple(
                _names(
                    e.get("dirr_methods", ["intervention_score"]),
                    source,
                    "experiment.dirr_methods",
                    empty_ok=True,
                )
            ),
            seeds=seeds,
            model=e.get("model"),
            budget=e.get("budget", DEFAULT_BUDGET),
            builds=_builds(e.get("builds", [0]), source, "experiment.builds"),
            claims=claims,
            T=e.get("T"),
            t=e.get("t"),
            d=e.get("d"),
            rho_p=e.get("rho_p"),
            hyperparameters=dict(hp),
            admissible_range=tuple(rng),
            selection=selection,
            benchmark_settings=settings,
        )
        spec._check_benchmark_settings(source)
        try:
            spec.all_runs()  # every RunSpec's own checks (budget, rho_p, t/d, hyperparameters), now
        except SpecError as exc:
            raise SpecError(f"{source}: {exc}") from None
        return spec

    def _check_benchmark_settings(self, source: str) -> None:
        """Each benchmark's settings, after its own ``[experiment.benchmark.<name>]``: no
        calibration seed among its final or replication ones, and no tau set for its DIR-R runs."""
        for b in self.benchmarks:
            sd = self.settings(b)["seeds"]
            overlap = set(sd.get("calibration", ())) & (
                set(sd.get("final", ())) | set(sd.get("replication", ()))
            )
            if overlap:
                raise SpecError(
                    f"{source}: benchmark {b}: calibration seeds {sorted(overlap)} "
                    "also appear among its final/replication seeds"
                )
            if (
                self.settings(b)["dirr_methods"]
                and self.settings(b)["hyperparameters"].get("tau") is not None
            ):
                raise SpecError(
                    f"{source}: benchmark {b}: hyperparameter tau is set, but its DIR-R runs "
                    "follow the tau* frozen from the calibration seeds (a set tau would be in "
                    "every run key and ignored); remove it, or calibrate elsewhere and run "
                    "with --decision"
                )

    def _spec(
        self, benchmark, field_, objective, method, variant, seed, split, st: dict, build: int
    ) -> RunSpec:
        hp = dict(st["hyperparameters"])
        if variant == "dirr":
            hp["selection"] = self.selection
        return RunSpec(
            benchmark,
            field_,
            objective,
            method,
            seed=seed,
            variant=variant,
            split=split,
            experiment=self.name,
            budget=st["budget"],
            T=st["T"],
            t=st["t"],
            d=st["d"],
            rho_p=st["rho_p"],
            model=st["model"],
            hyperparameters=hp,
            build=build,
        )

    def runs(self, split: str, variant: str | None = None) -> list[RunSpec]:
        """Every RunSpec of one split, grouped so that runs sharing a theta_0 and diagnostics are
        adjacent."""
        out = []
        for b in self.benchmarks:
            st = self.settings(b)
            fields = (
                (st["replication_fields"] or st["fields"])
                if split == "replication"
                else st["fields"]
            )
            objectives = (
                (st["replication_objectives"] or st["objectives"])
                if split == "replication"
                else st["objectives"]
            )
            for build in st["builds"]:
                for f in fields:
                    for o in objectives:
                        for s in st["seeds"].get(split, ()):
                            cell = (b, f, o)
                            if split != "calibration" and variant in (None, "static"):
                                out += [
                                    self._spec(*cell, m, "static", s, split, st, build)
                                    for m in st["methods"]
                                ]
                            if variant in (None, "dirr"):
                                out += [
                                    self._spec(*cell, m, "dirr", s, split, st, build)
                                    for m in st["dirr_methods"]
                                ]
        return out

    def all_runs(self) -> list[RunSpec]:
        return [r for split in SPLITS for r in self.runs(split)]

    def expected_cells(self) -> list[tuple]:
        return [tuple(getattr(r, k) for k in CELL) for r in self.all_runs()]
