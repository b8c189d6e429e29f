"""Every option's one declaration: its type, range or choices, unit and meaning (``Annotated`` with
a ``msgspec.Meta``), read by the CLI, TOML specs, the Python API, ``--help`` and
``supportbench objectives``.

An objective, a method, a benchmark or a run setting declares an option once, where it is defined::

    beta: option(float, gt=0, unit="1/nat", doc="inverse temperature") = 0.1

``check`` validates a value against that declaration (msgspec's conversion, strict: no str ->
number, no float -> int; every float finite) and raises one line naming the option, the value and
what is allowed; ``describe`` writes the allowed values in words for messages and help; ``declared``
reads the declarations of a dataclass or a constructor; ``did_you_mean`` suggests a declared name
for a misspelt one. No torch here: layer 0, like the errors.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import typing
from typing import Annotated, Any

import msgspec

from supportbench.errors import SpecError


def option(
    kind: Any,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    unit: str = "",
    doc: str = "",
) -> Any:
    """``Annotated[kind, Meta(...)]``: the declaration of one option."""
    meta = msgspec.Meta(
        gt=gt, ge=ge, lt=lt, le=le, description=doc or None, extra={"unit": unit} if unit else None
    )
    return Annotated[kind, meta]


def _split(hint: Any) -> tuple[Any, msgspec.Meta | None]:
    """(the bare type, its Meta) of a declaration (a plain type has no Meta)."""
    if typing.get_origin(hint) is Annotated:
        base, *extra = typing.get_args(hint)
        return base, next((m for m in extra if isinstance(m, msgspec.Meta)), None)
    return hint, None


def _optional(base: Any) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    if typing.get_origin(base) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(base) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return base, False


def _kind_words(base: Any) -> str:
    base, optional = _optional(base)
    origin = typing.get_origin(base)
    if origin is typing.Literal:
        words = "one of " + ", ".join(repr(a) for a in typing.get_args(base))
    elif base is bool:
        words = "true or false"
    elif base is int:
        words = "a whole number"
    elif base is float:
        words = "a number"
    elif base is str:
        words = "a string"
    elif origin in (list, tuple) or base in (list, tuple):
        words = "a list"
    elif origin is dict or base is dict:
        words = "a table of options"
    else:
        words = getattr(base, "__name__", str(base))
    return words + (" (or none)" if optional else "")


def describe(hint: Any) -> str:
    """What a declaration allows, in words: 'a finite number > 0 (1/nat)', "one of 'mini',
    'full'"."""
    base, meta = _split(hint)
    words = _kind_words(base)
    if meta is not None:
        words += _bounds(_optional(base)[0], meta)
        unit = (meta.extra or {}).get("unit")
        if unit:
            words += f" ({unit})"
    return words


def _bounds(base: Any, meta: msgspec.Meta) -> str:
    """' in 1..4096', ' in (0, 1]', ' > 0', '' -- the declared range in words."""
    lo, lo_open = (meta.gt, True) if meta.gt is not None else (meta.ge, False)
    hi, hi_open = (meta.lt, True) if meta.lt is not None else (meta.le, False)
    if lo is not None and hi is not None:
        if base is int and not lo_open and not hi_open:
            return f" in {_num(lo)}..{_num(hi)}"
        return f" in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f" {'>' if lo_open else '>='} {_num(lo)}"
    if hi is not None:
        return f" {'<' if hi_open else '<='} {_num(hi)}"
    return ""


def meaning(hint: Any) -> str:
    """The declaration's ``doc``: what the option means."""
    return (_split(hint)[1].description or "") if _split(hint)[1] is not None else ""


def _num(v: float) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def check(name: str, value: Any, hint: Any) -> Any:
    """``value`` converted to the declared type (an int for a float option becomes a float), or a
    ``SpecError`` naming ``name``, the value and what is allowed."""
    base, meta = _split(hint)
    inner, nullable = _optional(base)
    if nullable and value is None:
        return None
    if nullable and meta is not None:  # msgspec takes a range only on the bare numeric type
        hint = Annotated[inner, meta]
    try:
        out = msgspec.convert(value, hint, strict=True)
    except msgspec.ValidationError:
        raise SpecError(f"{name} = {value!r}: must be {describe(hint)}") from None
    except TypeError:  # a type msgspec cannot check (e.g. a callable): its owner checks it
        return value
    if _nonfinite(out):
        raise SpecError(f"{name} = {value!r}: must be {describe(hint)}")
    return out


def _nonfinite(x: Any) -> bool:
    if isinstance(x, float):
        return not math.isfinite(x)
    if isinstance(x, list | tuple):
        return any(_nonfinite(v) for v in x)
    return False


def declared(target: Any) -> dict[str, tuple[Any, Any]]:
    """Every declared option of a dataclass or of a class's constructor: name -> (declaration,
    default); a parameter without a default has ``inspect.Parameter.empty``."""
    if dataclasses.is_dataclass(target):
        hints = typing.get_type_hints(
            target if isinstance(target, type) else type(target), include_extras=True
        )
        out = {}
        for f in dataclasses.fields(target):
            if not f.init:
                continue
            default = (
                f.default
                if f.default is not dataclasses.MISSING
                else (
                    f.default_factory()
                    if f.default_factory is not dataclasses.MISSING
                    else inspect.Parameter.empty
                )
            )
            out[f.name] = (hints.get(f.name, Any), default)
        return out
    init = target.__init__
    try:
        hints = typing.get_type_hints(init, include_extras=True)
        params = inspect.signature(init).parameters
    except (TypeError, ValueError, NameError):
        return {}
    return {
        n: (hints.get(n, Any), p.default)
        for n, p in params.items()
        if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def did_you_mean(name: str, known, prefix: str = "") -> str:
    """' (did you mean 'prefix.x'?)' for the closest declared name, else ''."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{prefix}{close[0]}'?)" if close else ""


def help_line(name: str, hint: Any, default: Any) -> str:
    """One line of help: 'beta: a finite number > 0 (1/nat), default 0.1 -- inverse temperature'."""
    dflt = "" if default is inspect.Parameter.empty else f", default {default!r}"
    doc = meaning(hint)
    return f"{name}: {describe(hint)}{dflt}" + (f" -- {doc}" if doc else "")


def refuse_undeclared(
    owner: str, names, allowed: dict[str, tuple[Any, Any]], prefix: str, *, bare=False
) -> None:
    """The first of ``names`` that ``allowed`` (``declared``) does not declare is refused, naming
    ``owner``, the option (``prefix`` + name; the bare name with ``bare``), the closest declared
    name and what is allowed."""
    for k in names:
        if k not in allowed:
            shown = k if bare else f"{prefix}{k}"
            raise SpecError(
                f"{owner} has no option '{shown}'{did_you_mean(k, allowed, prefix)}; "
                + allowed_list(allowed, prefix)
            )


def check_declared(
    owner: str, options: dict, allowed: dict[str, tuple[Any, Any]], prefix: str, *, bare=False
) -> dict[str, Any]:
    """``options`` converted to their declarations in ``allowed``, each by ``check``, once no name
    is undeclared (``refuse_undeclared``): an undeclared option is named before any value is
    judged."""
    refuse_undeclared(owner, options, allowed, prefix, bare=bare)
    return {k: check(f"{prefix}{k}", v, allowed[k][0]) for k, v in options.items()}


def allowed_list(options: dict[str, tuple[Any, Any]], prefix: str = "") -> str:
    """'allowed: beta (a number > 0), delta (...)' -- the declared options with their ranges, for a
    refusal."""
    return "allowed: " + (
        ", ".join(f"{prefix}{n} ({describe(h)})" for n, (h, _) in options.items()) or "none"
    )
