"""What every import reader produces and checks, below the readers and ``imports`` (which
orchestrates them): the imported run (``ImportedRun``) and its key, the cell of a single-run import
(``identity``), and the checks of its numbers (``whole``, ``finite``). The readers (``tables``,
``tofu_logs``, ``ou_eval``, ``lacuna_summary``) import this module, never ``imports``."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from supportbench.errors import RegistryError
from supportbench.experiments.record import RecordError, check_levels

CELL = ("experiment", "benchmark", "field", "objective", "method", "variant", "seed", "split")
REQUIRED = ("experiment", "field", "objective", "method", "seed")  # benchmark: a format may know it
DEFAULTS = {"variant": "static", "split": "final"}


@dataclass
class ImportedRun:
    """One run as read from a source, before it is stored."""

    cell: dict  # CELL -> value
    status: str = "ok"
    J: float | None = None
    G_F: float | None = None
    D_coll: float | None = None
    step_equivalents: float | None = None
    gate: dict = field(default_factory=dict)  # triggered, probe_signal, chosen_rho, available_gain
    metrics: dict[str, float] = field(
        default_factory=dict
    )  # metric name (open-unlearning's or own) -> value
    items: dict[str, list[float]] = field(default_factory=dict)
    model: str | None = None
    occurrence: int = 0  # the n-th row of the same cell in one table (duplicates are kept)
    skipped: list[str] = field(
        default_factory=list
    )  # source metrics with no finite value (named, not stored)

    @property
    def run_key(self) -> str:
        return import_key(self.cell, self.occurrence)


def import_key(cell: dict, occurrence: int = 0) -> str:
    """An imported run's key: its cell (and its theta_0 build when not 0, so keys of build 0 are the
    ones imports had before builds existed) and its occurrence among identical cells of one
    source."""
    ident = json.dumps([cell[c] for c in CELL] + ([cell["build"]] if cell.get("build") else []))
    return hashlib.sha256(f"import|{ident}|{occurrence}".encode()).hexdigest()


# benchmarks a source may be imported under without being registered here (open-unlearning's MUSE
# evaluator)
IMPORT_ONLY_BENCHMARKS = ("muse",)
# an inferred benchmark and the explicit --benchmark values that agree with it (natural_tofu is
# TOFU's data)
COMPATIBLE = {"tofu": ("tofu", "natural_tofu")}


def benchmark_names() -> list[str]:
    """Registered benchmark names (the catalog: built-ins read from source, plugins' entry-point
    names; nothing imported)."""
    from supportbench import catalog

    return list(catalog.entries("benchmark"))


def check_benchmark(given: str, inferred: str | None, fmt: str, source: Path) -> None:
    """An explicit --benchmark must be a registered name and agree with what the format says the
    source is."""
    known = benchmark_names()
    if given not in known and given not in IMPORT_ONLY_BENCHMARKS:
        import difflib

        near = difflib.get_close_matches(given, known + list(IMPORT_ONLY_BENCHMARKS), n=1)
        hint = f". Did you mean '{near[0]}'?" if near else "."
        raise RegistryError(
            f"--benchmark '{given}': no such benchmark{hint} Allowed: {', '.join(known)} (and, for "
            f"imports only: {', '.join(IMPORT_ONLY_BENCHMARKS)})"
        )
    if inferred and given not in COMPATIBLE.get(inferred, (inferred,)):
        raise RegistryError(
            f"--benchmark '{given}' contradicts the source: {source} is a {fmt} import of "
            f"benchmark '{inferred}' (allowed: "
            f"{', '.join(COMPATIBLE.get(inferred, (inferred,)))}); drop --benchmark or fix it"
        )


def identity(options: dict, fmt: str, source: Path, inferred: dict | None = None) -> dict:
    """The cell of a single-run import: options first, then what the format inferred from the
    source, then the defaults; the error names every required option that is missing. An explicit
    --benchmark is checked (``check_benchmark``)."""
    inferred = inferred or {}
    if options.get("benchmark") not in (None, ""):
        check_benchmark(options["benchmark"], inferred.get("benchmark"), fmt, source)
    cell = {
        c: options.get(c) if options.get(c) not in (None, "") else inferred.get(c, DEFAULTS.get(c))
        for c in CELL
    }
    missing = [c for c in ("benchmark", *REQUIRED) if cell[c] in (None, "")]
    if missing:
        raise RegistryError(
            f"{source}: a {fmt} import is one run; name it with "
            f"{', '.join('--' + c for c in missing)} (its cell: --experiment, --benchmark, "
            f"--field, --objective, --method, --seed; --variant {DEFAULTS['variant']} and --split "
            f"{DEFAULTS['split']} by default)"
        )
    cell["seed"] = whole(cell["seed"], "--seed")
    try:
        check_levels(str(source), variant=cell["variant"], split=cell["split"])
    except RecordError as exc:
        raise RegistryError(str(exc)) from None
    return cell


MAX_SEED = 2**63 - 1


def whole(v, what: str) -> int:
    """A seed or build: a whole number in 0..2^63-1 written as digits (an int as it is), or a
    ``RegistryError`` naming ``what`` and the value (no sign, underscores, exponent or blanks)."""
    if isinstance(v, int) and not isinstance(v, bool):
        n = v
    elif isinstance(v, str) and v.isascii() and v.isdigit():
        n = int(v)
    else:
        raise RegistryError(
            f"{what} must be a whole number in 0..2^63-1 written as digits, got {v!r}"
        )
    if not 0 <= n <= MAX_SEED:
        raise RegistryError(f"{what} {v!r} is out of range; allowed: a whole number in 0..2^63-1")
    return n


def read_json(path: Path, nests: str, hint: str = ""):
    """The parsed JSON file an importer reads (upstream's output, as Python's ``json`` writes it),
    or a one-line ``RegistryError`` naming the file, with ``hint`` after why; ``nests``: how deep
    such a file nests, said when one nests too deeply to read."""
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RegistryError(f"{path}: not a JSON file: {str(exc).splitlines()[0]}{hint}") from None
    except RecursionError:
        raise RegistryError(
            f"{path}: arrays or objects nested too deeply to read ({nests})"
        ) from None


def finite(v, what: str) -> float:
    """A finite float, or a ``RegistryError`` naming ``what``."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise RegistryError(f"{what} must be a finite number, got {v!r}")
    return float(v)
