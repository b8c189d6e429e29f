"""The names a registry stores: printable text; registered benchmark, method and objective names.

A name with a control character (NUL, a newline, an escape) is refused wherever the registry takes
one in (experiment, benchmark, field, objective, method, variant, split, model, metric names): it
would print as something else, or cut a line of a report in two. An unknown benchmark, method or
objective name is refused too (a typo would be a new cell of the grid, silently), unless
``--allow-unknown``: then it is stored and counted. Known names are read without importing torch:
the built-ins from their source files, plugins by their entry-point names, the interfaces a
benchmark defines itself (a controlled run's method), the objectives ``unlearning/objectives.py``
registers, and whatever this process registered at run time in registries it has already loaded.
"""

from __future__ import annotations

import difflib
import functools
import operator
import sys

from supportbench._io import CONTROL  # the one definition of a name's forbidden characters
from supportbench.errors import RegistryError

KINDS = ("benchmark", "method", "objective")
_OPTION_PREFIXES = ("method.", "objective.")
_IS_OPTION = operator.methodcaller("startswith", _OPTION_PREFIXES)  # map: no frame per key
_LOADED = {
    "benchmark": ("supportbench.benchmarks.base", "BENCHMARKS"),
    "method": ("supportbench.methods.base", "METHODS"),
    "objective": ("supportbench.unlearning.objectives", "OBJECTIVES"),
}


def check_text(value, what: str, where: str) -> None:
    """``RegistryError`` when ``value`` (a name) holds a control character."""
    if isinstance(value, str) and (m := CONTROL.search(value)):
        raise RegistryError(
            f"{where}: {what} {value!r} holds a control character "
            f"(U+{ord(m.group()):04X} at position {m.start()}); names are "
            "printable text"
        )


@functools.cache
def _declared() -> dict[str, frozenset[str]]:
    """Built-in names from the catalog (cached: the package's files do not change as it runs); a
    benchmark's own interfaces count as method names (a controlled run's method)."""
    from supportbench import catalog

    builtins = {kind: catalog.builtins(kind) for kind in KINDS}
    methods = set(builtins["method"])
    for entry in builtins["benchmark"].values():
        methods.update(entry.attrs.get("INTERFACES") or ())
    return {
        "benchmark": frozenset(builtins["benchmark"]),
        "method": frozenset(methods),
        "objective": frozenset(builtins["objective"]),
    }


def known(kind: str) -> set[str]:
    """Known ``kind`` ('benchmark', 'method', 'objective') names: built-ins, plugins, and the
    run-time registrations of registries this process has already imported (nothing is imported)."""
    from supportbench import catalog

    names = set(_declared()[kind]) | set(catalog.plugin_names(kind))
    module, attr = _LOADED[kind]
    names |= set(getattr(getattr(sys.modules.get(module), attr, None), "_items", {}))
    if kind == "method":  # a benchmark's own interfaces: plugins' from source, loaded ones as are
        for entry in catalog.plugins("benchmark").values():
            itf = entry.attrs.get("INTERFACES")
            names.update(itf if isinstance(itf, tuple | list) else ())
        module, attr = _LOADED["benchmark"]
        for cls in getattr(getattr(sys.modules.get(module), attr, None), "_items", {}).values():
            names.update(cls.INTERFACES)  # declared: refused at registration otherwise
    return names


_SHAPES_MAX = 10_000  # a sweep's records come in a few hundred shapes; a bound, not a need


class NameCheck:
    """Checks the names of the runs a registry is about to store: control characters always refused;
    unknown benchmark, method and objective names refused, or (``allow_unknown``) kept, counted."""

    def __init__(
        self, allow_unknown: bool = False, extra: dict[str, tuple[str, ...]] | None = None
    ):
        self.allow_unknown = allow_unknown
        self._known = {k: known(k) | set((extra or {}).get(k, ())) for k in KINDS}
        self.unknown: dict[tuple[str, str], str] = {}  # (kind, name) -> where it was first seen
        self._shapes: set[bytes] = set()  # spec shapes already checked (``check_shape``)

    def check(self, cell: dict, where: str, texts: bool = True) -> None:
        """Every name of ``cell`` (a spec, an imported run's cell) that is text (``texts``: a
        record's spec was checked by ``RunSpec`` already); the kinds' names against the known."""
        for what in (*KINDS, "experiment", "field", "variant", "split", "model") if texts else ():
            check_text(cell.get(what), what, where)
        for kind in KINDS:
            name = cell.get(kind)
            if not isinstance(name, str) or name in self._known[kind]:
                continue
            if not self.allow_unknown:
                allowed = sorted(self._known[kind])
                near = difflib.get_close_matches(name, allowed, n=1)
                hint = f" Did you mean '{near[0]}'?" if near else ""
                raise RegistryError(
                    f"{where}: unknown {kind} {name!r}.{hint} Known: "
                    f"{', '.join(allowed)}; nothing stored. --allow-unknown stores "
                    f"it anyway (another project's {kind}, say)"
                )
            self.unknown.setdefault((kind, name), where)
        hp = cell.get("hyperparameters")
        if isinstance(hp, dict) and any(map(_IS_OPTION, hp)):
            self._check_options(cell, hp, where)

    def check_shape(self, spec: dict, where: str, shape: bytes | None) -> None:
        """``check(spec, where, texts=False)`` once per spec shape (``shape``: the spec up to its
        seed and build, ``experiments.record.records_with_shapes``; None: always checked). Specs of
        one shape hold the same names and options, so the first decides for all of them: an error
        is raised there, and an unknown name it keeps is counted where ``check`` counts it, at the
        first file that holds it."""
        if shape is not None and shape in self._shapes:
            return
        self.check(spec, where, texts=False)
        if shape is not None:
            if len(self._shapes) >= _SHAPES_MAX:
                self._shapes.clear()
            self._shapes.add(shape)

    def _check_options(self, cell: dict, hp: dict, where: str) -> None:
        """Each ``method.x``/``objective.x`` hyperparameter against the option its method or
        objective declares (``catalog.option_problem``, from source): an undeclared name is
        refused (or, ``allow_unknown``, kept and counted), a value out of range always. A plugin's
        options, which the source cannot tell, are not checked here."""
        from supportbench import catalog

        for key, value in hp.items():
            kind, dot, opt = key.partition(".")
            if (
                not dot
                or kind not in ("method", "objective")
                or not isinstance(cell.get(kind), str)
            ):
                continue
            problem = catalog.option_problem(kind, cell[kind], opt, value)
            if problem is None:
                continue
            if problem[0] == "undeclared" and self.allow_unknown:
                self.unknown.setdefault((f"{kind} option", f"{cell[kind]}.{opt}"), where)
                continue
            unknown = " --allow-unknown stores it anyway (a record of other code)"
            raise RegistryError(
                f"{where}: {problem[1]}; nothing stored."
                + (unknown if problem[0] == "undeclared" else "")
            )

    def summary(self) -> str | None:
        """A line naming the unknown names stored (with ``allow_unknown``), or None."""
        if not self.unknown:
            return None
        shown = ", ".join(f"{k} {n!r}" for k, n in sorted(self.unknown)[:10])
        more = f" and {len(self.unknown) - 10} more" if len(self.unknown) > 10 else ""
        return f"{len(self.unknown)} unknown name(s) stored (--allow-unknown): {shown}{more}"
