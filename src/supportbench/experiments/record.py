"""The run record: one typed, self-contained description of one run (DESIGN "RunRecord").

``RunRecord`` is the only shape a record has: the runner builds one, DIR-R returns its
``DirrResult`` and ``Compute``, the results directory stores it as JSON (``to_json``), and the
registry validates a file against it (``from_json``) and derives its DuckDB parse structure from it
(``registry.schema_of``) — the record is described once, here. Validation is msgspec's (types,
nesting, required keys; the error names the path of the bad key, e.g.
``$.compute.step_equivalents``) after the checks no type can state: the run key is the hash of the
record's own spec, the variant, split and status are known levels, and an ``ok`` record has a finite
outcome.

No torch here: the registry and reports read records too.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime
from typing import Any, Literal

import msgspec

from supportbench._io import StrictJSONError, loads_json
from supportbench.errors import SpecError, SupportbenchError
from supportbench.experiments.spec import MAX_SEED, SCHEMA, SPLITS, VARIANTS, RunSpec, spec_key

STATUSES = ("ok", "failed", "diverged")
Status = Literal["ok", "failed", "diverged"]


class RecordError(SupportbenchError):
    """A run record that is not a valid record: the message names the file and the bad key or
    value."""


def _builtin(obj: Any) -> Any:
    """Values that are not Python's own: numbers (numpy or torch scalars) and str subclasses
    (torch's version)."""
    if isinstance(obj, str):
        return str(obj)
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable in a run record: {type(obj).__name__}")


class _Struct(msgspec.Struct, kw_only=True):
    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self, enc_hook=_builtin)


class CurvePoint(_Struct):
    """J's components after ``step`` training steps, on the curve's fixed evaluation slice (the
    ``eval_every``/``curve_items`` settings): shown, never used to choose a checkpoint."""

    step: int
    J: float
    G_F: float
    D_coll: float
    components: dict[str, float] = {}


class Outcome(_Struct):
    """J = G_F - D_coll (paper Eq. 19) and the benchmark's other components; ``curve``: the points
    of a run with ``eval_every`` > 0 (absent from the file otherwise)."""

    J: float
    G_F: float
    D_coll: float
    components: dict[str, Any] = {}
    curve: list[CurvePoint] | None = None


class SupportInfo(_Struct):
    """The support a run trained: groups of the geometry, or the benchmark's own interface."""

    n_groups: int
    cost: int
    budget: int
    groups: list[int]
    interface: str | None = None


class DirrResult(_Struct):
    """What selective DIR-R decided and measured in one run (Algorithm 1)."""

    decision_hash: str | None
    unfrozen: bool
    tau: float | None
    probe_signal: float
    probe_values: dict[str, float]
    triggered: bool
    chosen_rho: float
    selection: str
    candidates: dict[str, float]  # rho -> V_t on the selection records
    candidates_J: dict[str, float]  # rho -> terminal J on the evaluation records
    rho0_J: float
    post_hoc: bool
    complete: bool
    calibration: bool
    candidate_groups: dict[str, int] = {}


class Compute(_Struct):
    """Step-equivalents (one optimisation step = 1) and measured wall-clock seconds per phase."""

    step_equivalents: float = 0.0
    wall_s: dict[str, float] = {}
    normalized: float | None = None
    paths: dict[str, int] | None = None
    exhaustive_reference: float | None = None
    post_hoc_steps: int | None = None


class Provenance(_Struct):
    supportbench: str
    git: str
    torch: str
    transformers: str
    started_at: str | None = None
    finished_at: str | None = None
    device: str | None = None
    cpu_mode: str | None = None  # the CPU kernels it computed with (supportbench._cpumode)
    python: str | None = None
    data_hash: str | None = None
    model_hash: str | None = None
    # where the model and path options came from (RunSpec.sources: a hub id's id, commit and
    # snapshot, a folder's path); the spec holds their content hashes
    sources: dict[str, Any] | None = None


class Fingerprint(_Struct):
    """The code behind a run (``harness.fingerprint``): ``hash`` summarises the parts."""

    hash: str
    method: dict[str, Any] = {}
    objective: dict[str, Any] = {}
    benchmark: dict[str, Any] = {}
    harness: dict[str, Any] = {}


class RunRecord(_Struct):
    """One run: its identity (``spec``, hashed into ``run_key``), the code that ran it
    (``fingerprint``), what happened (``status``, ``error``, ``outcome``, ``support``, ``dirr``),
    its cost and provenance."""

    run_key: str
    spec: dict[str, Any]
    status: Status
    compute: Compute
    provenance: Provenance
    schema: int = SCHEMA
    error: str | None = None
    fingerprint: Fingerprint | None = None
    outcome: Outcome | None = None
    support: SupportInfo | None = None
    dirr: DirrResult | None = None
    roles: dict[str, Any] | None = (
        None  # facts about the run's data roles (e.g. rows without a subject)
    )

    # ---- (de)serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        if d.get("outcome") and d["outcome"].get("curve") is None:
            d["outcome"].pop("curve", None)  # a run without a curve: its file as before curves
        return d

    def to_json(self) -> str:
        # the standard library writes non-finite floats (a diverged run's outcome) as NaN/Infinity,
        # which it reads back; msgspec would write null
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, obj: Any, source: str = "run record") -> RunRecord:
        """A typed, checked record from parsed JSON, or ``RecordError`` naming ``source`` and the
        bad key."""
        _check_identity(obj, source)
        try:
            return msgspec.convert(obj, cls)
        except msgspec.ValidationError as exc:
            raise RecordError(f"{source}: {exc}") from None

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "run record") -> RunRecord:
        obj = _parse_plain(text)
        if obj is not None:  # the common case, decided in C; anything unusual takes the strict path
            return cls.from_dict(obj, source)
        try:
            obj = loads_json(
                text.decode("utf-8") if isinstance(text, bytes) else text, nonfinite=True
            )
        except UnicodeDecodeError as exc:
            raise RecordError(f"{source}: not UTF-8 text (byte {exc.start})") from None
        except StrictJSONError as exc:
            raise RecordError(f"{source}: {exc.msg}") from None
        except json.JSONDecodeError as exc:
            raise RecordError(
                f"{source}: not valid JSON ({exc.msg} at line {exc.lineno}; truncated?)"
            ) from None
        return cls.from_dict(obj, source)

    @property
    def error_line(self) -> str | None:
        """The error's first line (the whole text keeps the traceback)."""
        return self.error.splitlines()[0] if self.error else None


class ControlledDecision(_Struct):
    """A frozen controlled decision (``experiments.controlled_decision``; paper §5.2), as its file
    holds it: the primary locator and each interface's learning rate, frozen from the calibration
    targets before any final run, with what they were frozen from. ``from_dict`` verifies the
    content hash (a changed item is refused); ``to_dict`` is the file's content again, informational
    items (``extras``: calibration settings, per-target J and recall, the claims' hash) included.
    """

    kind: str
    experiment: str
    benchmark: str
    objective: str
    model: str
    T: int
    seed: int
    theta0_hash: str
    calibration_targets: list[str]
    locator_aurocs: dict[str, float | None]
    primary_locator: str
    lr_grid: list[float]
    mean_J: dict[str, dict[str, float]]
    lr: dict[str, float]
    recall_threshold: float
    calibration_runs: list[str]
    frozen_at: str
    hash: str
    extras: dict[str, Any] = {}

    @classmethod
    def from_dict(cls, obj: Any, source: str = "controlled decision") -> ControlledDecision:
        """The typed decision from a parsed file; ``DecisionError`` (naming ``source``) when it is
        not a frozen controlled decision or an item no longer matches its hash."""
        from supportbench.errors import DecisionError
        from supportbench.experiments.controlled_decision import is_controlled, verify_controlled

        if not isinstance(obj, dict) or not is_controlled(obj):
            raise DecisionError(f"{source}: not a controlled decision (kind must be 'controlled')")
        verify_controlled(obj, source)
        names = set(cls.__struct_fields__) - {"extras"}
        try:
            return msgspec.convert(
                {
                    **{k: v for k, v in obj.items() if k in names},
                    "extras": {k: v for k, v in obj.items() if k not in names},
                },
                cls,
            )
        except msgspec.ValidationError as exc:
            raise DecisionError(f"{source}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        d = msgspec.to_builtins(self, enc_hook=_builtin)
        return {**d.pop("extras"), **d}

    @property
    def label(self) -> str:
        """How a person reads which decision it is: 12 hex digits of its hash."""
        return self.hash[:12]


LEVELS = {"variant": VARIANTS, "split": SPLITS, "status": STATUSES}


def check_levels(where: str, **levels: Any) -> None:
    """``RecordError`` for the first unknown level (variant, split, status), naming what is allowed:
    the one check that records, imported tables and the registry share."""
    for name, value in levels.items():
        if value not in LEVELS[name]:
            raise RecordError(
                f"{where}: unknown {name} {value!r}; allowed: {', '.join(LEVELS[name])}"
            )


def _finite(x) -> bool:
    return not isinstance(x, bool) and isinstance(x, int | float) and math.isfinite(x)


# ---- the fast path of from_json (issue 39: an ingest checks every record) ------------------------
_MAX_BRACKETS = 100  # no more brackets than MAX_DEPTH: the text cannot nest deeper (nesting_depth)


def _parse_plain(text: str | bytes) -> Any:
    """The parsed record when its text is plain JSON that ``loads_json`` would read the same way:
    UTF-8, few enough brackets that it cannot nest too deep, no NaN/Infinity or out-of-range number
    (msgspec refuses them), and no key twice in one object (msgspec would keep the last silently).
    None means "not proven": the strict, slower parser decides, and names what is wrong.

    No repeated key is proven by counting colons in the text and in msgspec's re-encoding of what it
    parsed (``_colons_kept``): in JSON a colon outside a string ends a key, and one inside a string
    is written as itself when the text escapes no character as \\uXXXX (any other text is not
    proven). The re-encoding writes the same keys and strings, less a repeated key's colon and any
    in its dropped value: it holds as many colons as the text exactly when no key repeats."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    if raw.count(b"[") + raw.count(b"{") > _MAX_BRACKETS or b"\\u" in raw:
        return None
    try:
        obj = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # the strict path names why
        return None
    return obj if _colons_kept(raw.count(b":"), [obj]) else None


def _colons_kept(colons: int, parsed: list) -> bool:
    """Whether msgspec's re-encoding of ``parsed`` holds ``colons`` colons, as many as the texts it
    parsed (``_parse_plain``): it never holds more, so equal totals mean equal counts text by
    text."""
    return msgspec.json.encode(parsed).count(b":") == colons


_RESOLVED: set[bytes] = (
    set()
)  # specs already checked, up to their seed and build (see _check_resolved)
_RESOLVED_MAX = 100_000


def _check_resolved(spec: dict, source: str) -> None:
    """The stored spec is a RunSpec as resolved: rebuilt through ``RunSpec`` (its types, ranges and
    known hyperparameters) it comes back unchanged, so no setting is missing, unknown or out of
    range.

    A sweep's records differ mostly in their seed, and RunSpec reads a seed or a build only to
    range-check it and to store it back (a build of 0 is left out). So a spec that passed stands for
    every spec that differs from it only in a valid seed or a valid non-zero build: checked once (an
    ingest of 100,000 records rebuilt the same few hundred RunSpecs). A spec that fails is checked
    in full, every time."""
    shape = _shape(spec)
    if shape is not None and shape in _RESOLVED:
        return
    _check_resolved_in_full(spec, source)
    if shape is not None:
        if len(_RESOLVED) >= _RESOLVED_MAX:
            _RESOLVED.clear()
        _RESOLVED.add(shape)


def _shape(spec: dict, finite: bool = False) -> bytes | None:
    """``spec`` with a valid seed and a valid non-zero build replaced by placeholders, as JSON
    bytes; None when either is not a plain whole number in range, or a number in it is not finite
    (msgspec writes NaN as null, which would give it None's shape), and then nothing is cached. Not
    sorted: equal bytes still mean an equal spec (another key order is only a miss). ``finite``:
    the caller knows every number in it is finite (msgspec parsed it), so that is not walked."""
    seed, build = spec.get("seed"), spec.get("build", 1)
    if type(seed) is not int or type(build) is not int:  # not bool, not a float
        return None
    if not (0 <= seed <= MAX_SEED and 0 < build <= MAX_SEED):
        return None
    if not finite and not _finite_leaves(spec.values()):  # the hyperparameters among them
        return None
    try:
        return msgspec.json.encode({**spec, "seed": 0, "build": 1 if "build" in spec else None})
    except (TypeError, msgspec.EncodeError):
        return None


def _finite_leaves(values) -> bool:
    """No float among ``values`` (and within any list or dict among them) is NaN or infinite."""
    for v in values:
        if type(v) is float and not math.isfinite(v):
            return False
        if isinstance(v, list | dict) and not _finite_leaves(
            v.values() if isinstance(v, dict) else v
        ):
            return False
    return True


def _check_resolved_in_full(spec: dict, source: str) -> None:
    try:
        again = RunSpec.from_dict(spec).canonical()
    except (SpecError, TypeError) as exc:
        raise RecordError(f"{source}: its spec is not a valid RunSpec: {exc}") from None
    if again != spec:
        diff = sorted(k for k in again.keys() | spec.keys() if again.get(k) != spec.get(k))
        if "hyperparameters" in diff:
            a, b = again["hyperparameters"], spec.get("hyperparameters") or {}
            diff = [d for d in diff if d != "hyperparameters"] + [
                f"hyperparameters.{k}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)
            ]
        shown = ", ".join(
            f"{k} (stored {_at(spec, k)!r}, resolved {_at(again, k)!r})" for k in diff[:4]
        )
        raise RecordError(
            f"{source}: its spec is not fully resolved: {shown}; a record stores every setting "
            "its run used (RunSpec.canonical())"
        )


def _at(d: dict, dotted: str):
    head, _, rest = dotted.partition(".")
    return (d.get(head) or {}).get(rest) if rest and head == "hyperparameters" else d.get(dotted)


def _bad_time(rec: dict) -> str | None:
    """The first of provenance's ``started_at``/``finished_at`` that is given but not an ISO 8601
    time with a UTC offset (the registry's cast would make it NULL, hiding it from the audit's clock
    checks); None when both are absent, null or such times."""
    prov = rec.get("provenance")
    if not isinstance(prov, dict):
        return None  # the conversion names a missing or malformed provenance
    for k in ("started_at", "finished_at"):
        v = prov.get(k)
        if v is None:
            continue
        try:
            if not isinstance(v, str) or datetime.fromisoformat(v).utcoffset() is None:
                return k
        except ValueError:
            return k
    return None


# the enforcement counts a run records (``unlearning.enforcement.Changes.as_record``)
ENFORCEMENT = ("changed_inside", "changed_outside", "allowed_scalars", "tensors_checked")


def _bad_enforcement(rec: dict) -> str | None:
    """What is wrong with the record's enforcement counts, or None: all four or none, each a whole
    number >= 0, and no more changes inside the support than its size (the audit reads them)."""
    out = rec.get("outcome")
    comp = out.get("components") if isinstance(out, dict) else None
    if not isinstance(comp, dict):
        return None
    given = [k for k in ENFORCEMENT if k in comp]
    if not given:
        return None
    if len(given) < len(ENFORCEMENT):
        missing = ", ".join(k for k in ENFORCEMENT if k not in comp)
        return f"enforcement counts without {missing} (a run records all four)"
    for k in ENFORCEMENT:
        v = comp[k]
        if not _finite(v) or v < 0 or v != int(v):
            return f"{k} = {v!r:.40} is not a whole number >= 0"
    if comp["changed_inside"] > comp["allowed_scalars"]:
        return (
            f"changed_inside = {comp['changed_inside']:g} exceeds allowed_scalars = "
            f"{comp['allowed_scalars']:g}"
        )
    return None


def _check_identity(rec: Any, source: str) -> None:
    """What no type can say, checked on the parsed JSON before conversion (so the messages speak of
    the record, not of a type): a spec with known levels whose hash is the run key, a known status,
    and a finite outcome when the status is ``ok``."""
    if not isinstance(rec, dict):
        raise RecordError(f"{source}: a run record must be a JSON object, got {type(rec).__name__}")
    spec = rec.get("spec")
    if not isinstance(spec, dict) or not rec.get("run_key") or not isinstance(rec["run_key"], str):
        raise RecordError(f"{source}: a record needs a run_key and a spec object")
    check_levels(source, variant=spec.get("variant"), split=spec.get("split"))
    if isinstance(spec.get("seed"), bool) or not isinstance(spec.get("seed"), int):
        raise RecordError(f"{source}: seed must be a whole number, got {spec.get('seed')!r}")
    for k in ("experiment", "benchmark", "field", "objective", "method"):
        if not isinstance(spec.get(k), str) or not spec[k]:
            raise RecordError(f"{source}: spec.{k} must be a non-empty string, got {spec.get(k)!r}")
    want = spec_key(spec)
    if rec["run_key"] != want:
        raise RecordError(
            f"{source}: run_key {rec['run_key'][:16]!r} does not match its spec (recomputed "
            f"{want[:16]}...): the record was edited or its key invented"
        )
    _check_resolved(spec, source)
    check_levels(source, status=rec.get("status"))
    bad_time = _bad_time(rec)
    if bad_time:
        raise RecordError(
            f"{source}: provenance.{bad_time} = {rec['provenance'][bad_time]!r:.60} is not an "
            "ISO 8601 time with its UTC offset (as a run writes it, e.g. "
            "2026-11-27T07:44:44.000000+00:00); the audit's clock checks read it"
        )
    bad_counts = _bad_enforcement(rec)
    if bad_counts:
        raise RecordError(f"{source}: outcome.components: {bad_counts}")
    if rec["status"] == "ok":
        out = rec.get("outcome")
        bad = [
            k
            for k in ("J", "G_F", "D_coll")
            if not isinstance(out, dict) or not _finite(out.get(k))
        ]
        if bad:
            got = {k: (out or {}).get(k) for k in bad} if isinstance(out, dict) else out
            raise RecordError(
                f"{source}: status 'ok' but {', '.join(bad)} not a finite number ({got!r}); "
                "a run without a finite outcome is 'failed' or 'diverged'"
            )


# ---- many records at once: an ingest's chunk (issue 39) ------------------------------------------
# records proven together: few enough that their parses (some 10 containers each) stay under the
# collector's 700 and die before it runs; with 512 it ran some 12 times per 1,000 records
_GROUP = 64
_NAMES = ("experiment", "benchmark", "field", "objective", "method")
_NUMBER = (int, float)  # not bool: ``type(True)`` is bool


def records_from_json(texts: list[bytes], sources: list[str]):
    """For each record text in turn, the ``RunRecord`` that ``from_json`` would return, or None
    where this path does not prove it valid: ``from_json`` then decides (and names what is wrong).
    It accepts a text only when ``from_json`` would accept it and read the same record: the same
    proof of plain JSON (``_parse_plain``, its scans done once per group of texts), then each check
    of ``_check_identity`` and the same conversion, each failure a None, never an error. Lazy: a
    caller that checks each record before taking the next raises at the first bad one, in order."""
    return (rec for rec, _ in records_with_shapes(texts, sources))


def records_with_shapes(texts: list[bytes], sources: list[str]):
    """``records_from_json``'s records, each with its spec's shape (``_shape``: the spec up to a
    valid seed and build, as bytes), or None beside a record it does not prove. Specs of one shape
    name the same benchmark, method, objective and options, so a caller may check those once per
    shape (``registry.names.NameCheck.check_shape``)."""
    for s in range(0, len(texts), _GROUP):
        group = texts[s : s + _GROUP]
        for obj, source in zip(_parse_plain_group(group), sources[s : s + _GROUP]):
            yield (None, None) if obj is None else _typed(obj, source)


def _parse_plain_group(texts: list[bytes]) -> list[Any]:
    """``_parse_plain`` of each text, its scans of the text done on the group's texts at once: no
    ``\\u`` in any (else each is proven alone), and as many colons in the parsed texts as in
    msgspec's one re-encoding of them all (``_colons_kept``)."""
    joined = b"\n".join(texts)  # a false match across two texts only costs time
    if b"\\" in joined and b"\\u" in joined:  # a backslash is rare, and fast to look for
        return [_parse_plain(t) for t in texts]
    out, colons = [], joined.count(b":")
    for t in texts:
        obj = None
        if t.count(b"[") + t.count(b"{") <= _MAX_BRACKETS:
            try:
                obj = msgspec.json.decode(t)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                obj = None
        if obj is None:  # not proven, or the text null: left to the strict path
            colons -= t.count(b":")
        out.append(obj)
    if not _colons_kept(colons, [o for o in out if o is not None]):
        return [_parse_plain(t) for t in texts]  # some text repeats a key: find it, text by text
    return out


_UNPROVEN = (None, None)


def _typed(obj: Any, source: str) -> tuple[RunRecord | None, bytes | None]:
    """(``RunRecord.from_dict(obj)``, its spec's shape) when every check of ``_check_identity``
    passes and the conversion succeeds; (None, None) otherwise (``from_json`` then raises the
    error, in its order). ``obj`` comes from msgspec's parse: its floats are finite."""
    if type(obj) is not dict:
        return _UNPROVEN
    spec, key = obj.get("spec"), obj.get("run_key")
    if type(spec) is not dict or type(key) is not str or not key:
        return _UNPROVEN
    if spec.get("variant") not in VARIANTS or spec.get("split") not in SPLITS:
        return _UNPROVEN
    if obj.get("status") not in STATUSES or type(spec.get("seed")) is not int:
        return _UNPROVEN
    for k in _NAMES:
        if type(spec.get(k)) is not str or not spec[k]:
            return _UNPROVEN
    if obj["status"] == "ok":  # an ok run carries a finite outcome (``_check_identity``)
        out = obj.get("outcome")  # a number msgspec parsed is finite: its type says enough
        if type(out) is not dict or not (
            type(out.get("J")) in _NUMBER
            and type(out.get("G_F")) in _NUMBER
            and type(out.get("D_coll")) in _NUMBER
        ):
            return _UNPROVEN
    if _bad_time(obj) or _bad_enforcement(obj):
        return _UNPROVEN
    try:
        shape = _shape(spec, finite=True)
        if shape is None or _spec_key(spec, shape) != key:
            return _UNPROVEN
        if shape not in _RESOLVED:
            _check_resolved(spec, source)
        return msgspec.convert(obj, RunRecord), shape
    except Exception:  # noqa: BLE001 -- whatever it is, the strict path raises it in its turn
        return _UNPROVEN


_SLOTS = {"seed": '"\\u0000seed\\u0000"', "build": '"\\u0000build\\u0000"'}
_SLOT = re.compile("(" + "|".join(re.escape(m) for m in _SLOTS.values()) + ")")
_SLOT_NAME = {m: s for s, m in _SLOTS.items()}
_KEY_TEXT: dict[bytes, tuple[tuple[str, ...], tuple[str, ...]] | None] = {}


def _spec_key(spec: dict, shape: bytes) -> str:
    """``spec_key(spec)``: the text it hashes is its shape's (cached), with the seed and the build
    written in. ``json.dumps`` writes every other value the same for every spec of that shape, and
    an int as ``str`` does."""
    if shape not in _KEY_TEXT:
        if len(_KEY_TEXT) >= _RESOLVED_MAX:
            _KEY_TEXT.clear()
        _KEY_TEXT[shape] = _key_text(spec)
    text = _KEY_TEXT[shape]
    if text is None:
        return spec_key(spec)
    pieces, slots = text
    if len(slots) == 1:  # no build: the common case
        blob = pieces[0] + str(spec[slots[0]]) + pieces[1]
    else:
        blob = pieces[0] + str(spec[slots[0]]) + pieces[1] + str(spec[slots[1]]) + pieces[2]
    return hashlib.sha256(blob.encode()).hexdigest()


def _key_text(spec: dict) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The text ``spec_key`` hashes, cut where the seed and the build are written: (the pieces, the
    slot between each two); None when a marker is written elsewhere too (a value of the spec)."""
    marked = {**spec, "seed": "\0seed\0"}
    if "build" in spec:
        marked["build"] = "\0build\0"
    blob = json.dumps({"schema": SCHEMA, **marked}, sort_keys=True, separators=(",", ":"))
    parts = _SLOT.split(blob)
    slots = tuple(_SLOT_NAME[m] for m in parts[1::2])
    if sorted(slots) != sorted(s for s in _SLOTS if s in spec):
        return None
    return tuple(parts[0::2]), slots
