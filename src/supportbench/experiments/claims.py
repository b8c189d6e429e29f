"""The claims an experiment is judged on, as data registered before any outcome exists
(docs/findings.md).

A claims file (TOML; the shipped one is ``claims/paper.toml``, the paper's six) states per claim its
statistic, comparator or null, threshold, unit of replication and minimum power;
``reports.verdicts`` computes the verdict, one function per ``kind``; a claim may override the
file's level, power, effect_dz or builds (``PER_CLAIM``). ``parse`` checks every key of
every claim before anything runs.

Registration: a sweep calls ``freeze_claims`` before its first run. It writes a frozen *claims
decision* into the results' ``decisions/`` -- the file's text, its sha256 (``claims_hash``), the
experiment, ``frozen_at`` and a content hash over all of them, like a DIR-R decision -- so ingest
stores it, the ingest log vouches for it, and every decision the sweep freezes afterwards cites
``claims_hash``. The audit compares the registered hash with the file the experiment names now. No
torch here.
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from supportbench._io import file_or_shipped, write_json_atomic
from supportbench.errors import DecisionError, SpecError

KIND = "claims"
SHIPPED = Path(__file__).parent / "claims"
DEFAULT = "paper"
KINDS = ("agreement", "count", "contrast", "paired_mean")
SIDES = ("above", "below")
DEFAULTS: dict[str, Any] = {
    "level": 0.95,
    "power": 0.8,
    "effect_dz": 0.5,
    "builds": 3,
    "n_boot": 4000,
    "seed": 0,
}
COMMON = (
    "id",
    "title",
    "kind",
    "benchmark",
    "statistic",
    "comparator",
    "unit",
    "replication",
    "preconditions",
)
# what each kind reads besides COMMON (required) and may read (optional)
KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "agreement": (("threshold", "side", "effect"), ()),
    "count": (("objectives", "ours", "baselines", "required"), ("named",)),
    "contrast": (("method", "objectives", "threshold", "side"), ("fails_below",)),
    "paired_mean": (("ours", "reference", "settings", "threshold", "side"), ("fails_below",)),
}
FROZEN_ITEMS = ("kind", "experiment", "claims_hash", "text", "source")


@dataclass(frozen=True)
class Claim:
    """One claim: the common keys, and the kind's own in ``params``."""

    id: str
    title: str
    kind: str
    benchmark: str
    statistic: str
    comparator: str
    unit: str
    replication: str
    preconditions: tuple[str, ...]
    params: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)  # its own PER_CLAIM settings

    def settings(self, defaults: dict[str, Any]) -> dict[str, Any]:
        """The file's defaults with this claim's own level, power, effect or builds over them."""
        return {**defaults, **self.overrides}

    def __getitem__(self, key: str) -> Any:
        return self.params[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)


@dataclass(frozen=True)
class Claims:
    """A parsed claims file: its text and sha256 (what the registry stores), defaults and claims."""

    text: str
    hash: str
    source: str
    defaults: dict[str, Any]
    claims: tuple[Claim, ...]

    def by_id(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(claim_id)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def resolve(name: str | Path | None) -> Path:
    """A claims file's path: the file itself when it exists, else the shipped file of that name."""
    shipped = {p.stem: p for p in sorted(SHIPPED.glob("*.toml"))}
    return file_or_shipped(DEFAULT if name is None else name, shipped, "claims file", SpecError)


def load(name: str | Path | None = None) -> Claims:
    """The claims file ``name`` (a path or a shipped name; None: the paper's), parsed and
    checked."""
    path = resolve(name)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read claims file '{path}': {exc}") from None
    return parse(text, source=str(path) if path.parent != SHIPPED else path.stem)


def _num(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x)


# each [defaults] key's check and the range its error names
CHECKS: dict[str, tuple[Any, str]] = {
    "level": (lambda v: _num(v) and 0 < v < 1, "a number in (0, 1)"),
    "power": (lambda v: _num(v) and 0 < v < 1, "a number in (0, 1)"),
    "effect_dz": (lambda v: _num(v) and v > 0, "a number > 0"),
    "builds": (lambda v: _whole(v) and v >= 1, "a whole number >= 1"),
    "n_boot": (lambda v: _whole(v) and 100 <= v <= 1_000_000, "a whole number in 100..1,000,000"),
    "seed": (lambda v: _whole(v) and 0 <= v < 2**63, "a whole number in 0..2^63-1"),
}
# the defaults one claim may state for itself (its own minimum power, effect of interest, level,
# builds); the resampling settings stay file-wide
PER_CLAIM = ("level", "power", "effect_dz", "builds")


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_defaults(raw: dict, source: str, allowed=tuple(DEFAULTS), where="defaults.") -> dict:
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise SpecError(
            f"{source}: unknown [defaults] key(s) {unknown}; allowed: {', '.join(allowed)}"
        )
    for k, v in raw.items():
        ok, allowed_range = CHECKS[k]
        if not ok(v):
            raise SpecError(f"{source}: {where}{k} = {v!r} must be {allowed_range}")
    return dict(raw)


def _check_claim(raw: dict, source: str, k: int) -> Claim:
    where = f"{source}: claim {k + 1}" + (
        f" ({raw['id']!r})" if isinstance(raw.get("id"), str) else ""
    )
    kind = raw.get("kind")
    if kind not in KINDS:
        raise SpecError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
    required, optional = KEYS[kind]
    missing = [key for key in (*COMMON, *required) if key not in raw]
    if missing:
        raise SpecError(
            f"{where}: lacks {', '.join(missing)} "
            f"(a {kind} claim states {', '.join(COMMON + required)})"
        )
    unknown = sorted(set(raw) - set(COMMON) - set(required) - set(optional) - set(PER_CLAIM))
    if unknown:
        raise SpecError(
            f"{where}: unknown key(s) {unknown}; a {kind} claim takes "
            f"{', '.join(COMMON + required + optional)} and may override "
            f"{', '.join(PER_CLAIM)}"
        )
    for key in PER_CLAIM:
        if key in raw and not CHECKS[key][0](raw[key]):
            raise SpecError(f"{where}: {key} = {raw[key]!r} must be {CHECKS[key][1]}")
    for key in ("id", "title", "benchmark", "statistic", "comparator", "unit", "replication"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            raise SpecError(f"{where}: {key} must be a non-empty string, got {raw[key]!r}")
    if not isinstance(raw["preconditions"], list) or not all(
        isinstance(p, str) for p in raw["preconditions"]
    ):
        raise SpecError(f"{where}: preconditions must be a list of strings")
    if "side" in raw and raw["side"] not in SIDES:
        raise SpecError(f"{where}: side {raw['side']!r} is not one of {', '.join(SIDES)}")
    for key in ("threshold", "effect", "fails_below"):
        if key in raw and not _num(raw[key]):
            raise SpecError(f"{where}: {key} must be a finite number, got {raw[key]!r}")
    if kind == "count":
        comparisons = raw.get("named") or [
            f"{o}:{b}" for o in raw["objectives"] for b in raw["baselines"]
        ]
        r = raw["required"]
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= len(comparisons):
            raise SpecError(
                f"{where}: required = {r!r} must be a whole number in 1..{len(comparisons)} (the "
                "comparisons it counts)"
            )
    for key in ("objectives", "baselines", "settings", "named"):
        if key in raw and (
            not isinstance(raw[key], list)
            or not raw[key]
            or not all(isinstance(x, str) and x for x in raw[key])
        ):
            raise SpecError(f"{where}: {key} must be a non-empty list of names, got {raw[key]!r}")
    params = {key: raw[key] for key in (*required, *optional) if key in raw}
    return Claim(
        **{key: raw[key] for key in COMMON if key != "preconditions"},
        preconditions=tuple(raw["preconditions"]),
        params=params,
        overrides={key: raw[key] for key in PER_CLAIM if key in raw},
    )


def parse(text: str, source: str = "claims file") -> Claims:
    """A checked ``Claims``: every claim's keys, types and ranges, before anything runs."""
    from supportbench._io import MAX_DEPTH, nesting_depth

    deep = SpecError(
        f"cannot read claims file '{source}': arrays, tables or dotted keys nested "
        f"more than {MAX_DEPTH} levels deep; a claims file nests a few"
    )
    try:
        if nesting_depth(text, toml=True) > MAX_DEPTH:  # before tomllib runs out of stack
            raise deep
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"cannot read claims file '{source}': {exc}") from None
    except RecursionError:
        raise deep from None
    unknown = sorted(set(raw) - {"version", "defaults", "claim"})
    if unknown:
        raise SpecError(
            f"{source}: unknown key(s) {unknown}; a claims file has version, [defaults], [[claim]]"
        )
    if raw.get("version") != 1:
        raise SpecError(
            f"{source}: version = {raw.get('version')!r}; this supportbench reads version 1"
        )
    claims = raw.get("claim")
    if not isinstance(claims, list) or not claims:
        raise SpecError(f"{source}: no [[claim]] table")
    parsed = tuple(_check_claim(c, source, k) for k, c in enumerate(claims))
    ids = [c.id for c in parsed]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise SpecError(f"{source}: claim id(s) {twice} appear more than once")
    return Claims(
        text,
        text_hash(text),
        source,
        {**DEFAULTS, **_check_defaults(raw.get("defaults") or {}, source)},
        parsed,
    )


# ---- registration: a frozen claims decision ------------------------------------------------------
def decision_hash(dec: dict) -> str:
    items = {k: dec.get(k) for k in (*FROZEN_ITEMS, "frozen_at")}
    return hashlib.sha256(
        json.dumps(items, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def is_claims(dec: dict) -> bool:
    return dec.get("kind") == KIND


def freeze_claims(directory: str | Path, claims: Claims, experiment: str) -> dict:
    """Register ``claims`` for ``experiment``: ``<directory>/<hash>.json``, unless a claims decision
    of the same experiment and text is there already (it is returned; registration happens once)."""
    directory = Path(directory)
    for f in sorted(directory.glob("*.json")) if directory.is_dir() else ():
        try:
            old = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if (
            is_claims(old)
            and old.get("experiment") == experiment
            and old.get("claims_hash") == claims.hash
        ):
            verify_claims(old, source=str(f))
            return old
    dec = {
        "kind": KIND,
        "experiment": experiment,
        "claims_hash": claims.hash,
        "text": claims.text,
        "source": claims.source,
        "frozen_at": datetime.now(UTC).isoformat(timespec="microseconds"),
    }
    dec["hash"] = decision_hash(dec)
    write_json_atomic(directory / f"{dec['hash']}.json", dec)
    return dec


def verify_claims(dec: dict, source: str = "claims decision") -> None:
    """A claims decision as ``freeze_claims`` wrote it: every item, a text that parses and hashes to
    ``claims_hash``, and a content hash that covers them all with ``frozen_at``."""
    from supportbench.experiments.decisions import check_frozen_at

    missing = [k for k in (*FROZEN_ITEMS, "frozen_at", "hash") if k not in dec]
    if missing:
        raise DecisionError(f"{source}: not a frozen claims decision, it lacks {missing}")
    check_frozen_at(dec["frozen_at"], source)
    if not isinstance(dec["text"], str) or text_hash(dec["text"]) != dec["claims_hash"]:
        raise DecisionError(
            f"{source}: its text does not hash to claims_hash {str(dec['claims_hash'])[:12]}: the "
            "registered claims were edited"
        )
    try:
        parse(dec["text"], source)
    except SpecError as exc:
        raise DecisionError(str(exc)) from None
    if dec["hash"] != decision_hash(dec):
        raise DecisionError(
            f"{source}: frozen items do not match their content hash (stored {dec['hash']}, "
            f"recomputed {decision_hash(dec)}): the claims, the experiment or frozen_at were "
            "changed after registration"
        )
