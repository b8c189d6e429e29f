"""The plugin catalog: every method, benchmark and objective by name, known without importing it.

Listing what exists (``supportbench methods``/``benchmarks``), checking a name before a sweep starts
(``sweep --dry-run``, the registry's name check) and naming a method in a report must not import
torch or a plugin's heavy dependencies. The catalog reads the source instead, as lm-eval's
``MODEL_MAPPING`` names a class without importing it:

  built-ins  every file of the kind's package, parsed (``ast``) and never run: a class decorated
             ``@register_method("name")`` (``register_benchmark``) is the entry ``name`` with its
             target ``module:Class``; an objective is an ``OBJECTIVES.register("name", ...)`` call
  plugins    the entry points of the kind's group (``module:Class``), their class read from the
             file the module names

An entry carries the class attributes the kind declares (``KINDS[kind].attrs``: a method's
``display_name``, ``requires`` and ``provenance``; a benchmark's ``DEFAULT_MODEL``,
``DEFAULT_FIELD`` and ``INTERFACES``) wherever their value is a constant expression: literals,
tuples, dicts, f-strings, subscripts, the module's own constants and ``module.NAME`` or ``NAME``
imported from another source file. A value that needs code to compute is absent; the caller imports
the class for it. Built-ins win over a plugin of the same name, as in the registries
(``_registry.Registry``). What the catalog cannot see -- a plugin that fails to import, a name
registered at run time -- the imported registries report: where a plugin is installed, the listings
import the plugins so that one that fails to load is named (``supportbench methods``,
``benchmarks``). The benchmark registry imports a fixed list of adapters (``benchmarks/base.py``)
while the catalog reads every file of the package; ``tests/unit/test_catalog.py`` holds the two to
the same names.

The paper's methods are listed once here (``PAPER_METHODS``, with the names its tables print), for
the reports, the method registry's tests and the docs.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import pkgutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from supportbench import _options
from supportbench.errors import PluginError, SpecError

# The paper's eleven methods in the order its tables print them (the Intervention Score, then the
# ten baselines), each with the name the tables use.
PAPER_METHODS: dict[str, str] = {
    "intervention_score": "Static-IV",
    "random": "Random",
    "activation": "Activation",
    "wagle": "WAGLE",
    "storage": "Storage",
    "memflex": "MemFlex",
    "fila": "FILA-relative Fisher",
    "ap_mlp": "AP-MLP",
    "grail": "GRAIL",
    "activation_down": "Activation-Down",
    "projected_causal": "Projected Causal",
}
BASELINES = tuple(PAPER_METHODS)[1:]  # the ten frozen baselines
# the five baselines the paper calls modern (its discussion of recent localization methods)
MODERN = ("fila", "ap_mlp", "grail", "activation_down", "projected_causal")


@dataclass(frozen=True)
class Kind:
    """Where the built-ins of one kind of plugin live and what the catalog reads of each."""

    package: str  # the package (or, for objectives, the module) holding the built-ins
    register: str  # the decorator, or ``REGISTRY.register`` for instances registered by a call
    group: str | None  # the entry-point group of third-party plugins
    attrs: tuple[str, ...] = ()  # class attributes read from source
    exclude: tuple[str, ...] = ()  # modules of the package that register nothing
    recursive: bool = False  # built-ins in subpackages (``benchmarks/<name>/adapter.py``)


KINDS: dict[str, Kind] = {
    "method": Kind(
        "supportbench.methods",
        "register_method",
        "supportbench.methods",
        attrs=("display_name", "requires", "provenance"),
        exclude=("base", "diagnostics"),
    ),
    "benchmark": Kind(
        "supportbench.benchmarks",
        "register_benchmark",
        "supportbench.benchmarks",
        attrs=("DEFAULT_MODEL", "DEFAULT_FIELD", "INTERFACES"),
        recursive=True,
    ),
    "objective": Kind("supportbench.unlearning.objectives", "OBJECTIVES.register", None),
}


@dataclass(frozen=True)
class Entry:
    """One registered name: where it is defined and the attributes readable from its source."""

    name: str
    target: str  # ``module:Class`` (``module:REGISTRY`` for an instance registered by a call)
    attrs: Mapping[str, object] = field(default_factory=dict)

    @property
    def display_name(self) -> str:
        """How reports name it: its ``display_name``, else its registered name."""
        shown = self.attrs.get("display_name")
        return shown if isinstance(shown, str) and shown else self.name


def entries(kind: str) -> dict[str, Entry]:
    """Every ``kind`` ('method', 'benchmark', 'objective') by name, sorted: the built-ins and the
    installed plugins, a built-in winning over a plugin of its name. Nothing is imported."""
    found = {**plugins(kind), **builtins(kind)}
    return dict(sorted(found.items()))


def builtins(kind: str) -> dict[str, Entry]:
    """The entries the package of ``kind`` registers, read from its source files."""
    spec = KINDS[kind]
    if "." in spec.register:  # instances registered by a call in one module (objectives)
        path = module_source(spec.package)
        registry, _, method = spec.register.partition(".")
        names = _called_names(ast.walk(parse_source(path)), method, registry) if path else []
        return {n: Entry(n, f"{spec.package}:{registry}") for n in names}
    found: dict[str, Entry] = {}
    for module, path in _package_files(spec):
        source = SourceFile(path)
        attrs = source.class_attrs(spec.attrs)
        for name, cls in source.registered_classes(spec.register):
            found[name] = Entry(name, f"{module}:{cls}", attrs=attrs.get(cls, {}))
        for name in _called_names(source.nodes, spec.register):  # register_x("name")(obj)
            found.setdefault(name, Entry(name, module))
    return found


def plugin_names(kind: str) -> list[str]:
    """The entry-point names of the installed plugins of ``kind`` (nothing read or imported)."""
    group = KINDS[kind].group
    return sorted({ep.name for ep in entry_points(group=group)}) if group else []


def plugins(kind: str) -> dict[str, Entry]:
    """The installed plugins of ``kind`` (entry points; nothing imported), with the attributes that
    can be read from the file the entry point's module names. Of two entry points of one name the
    first counts, as in the registry; a file that cannot be read so gives no attributes (the
    registry names what is wrong when it imports the plugin): reading never fails a listing."""
    spec = KINDS[kind]
    found: dict[str, Entry] = {}
    for ep in entry_points(group=spec.group) if spec.group else ():
        if ep.name in found:
            continue
        module, _, qualname = ep.value.partition(":")
        cls = qualname.strip().split(".")[-1]
        path = module_source(module.strip()) if cls else None
        attrs: dict[str, object] = {}
        if path is not None:
            try:
                attrs = SourceFile(path).class_attrs(spec.attrs).get(cls, {})
            except Exception:  # noqa: BLE001 -- a plugin's source is the plugin's to fix
                attrs = {}
        found[ep.name] = Entry(ep.name, ep.value, attrs=attrs)
    return found


def _package_files(spec: Kind) -> list[tuple[str, Path]]:
    """``(module, path)`` of every source file of the kind's package that may register built-ins,
    found without importing the package (its ``__init__`` may import torch)."""
    root = importlib.util.find_spec(spec.package)
    files = []
    for folder in root.submodule_search_locations:
        if spec.recursive:
            paths = sorted(Path(folder).rglob("*.py"))
        else:
            paths = [
                Path(m.module_finder.path) / f"{m.name}.py"
                for m in pkgutil.iter_modules([folder])
                if not m.ispkg
            ]
        for p in paths:
            if p.stem.startswith("_") or p.stem in spec.exclude:
                continue
            parts = p.relative_to(folder).with_suffix("").parts
            files.append((".".join((spec.package, *parts)), p))
    return files


def _called_names(nodes: Iterable[ast.AST], func: str, owner: str | None = None) -> list[str]:
    """The names registered by every call ``func("name", ...)`` among ``nodes`` (``owner.func``
    when ``owner``)."""
    return [n for node in nodes if (n := _registration(node, func, owner)) is not None]


def _registration(node: ast.AST, func: str, owner: str | None = None) -> str | None:
    """The string first argument of ``node`` when it is a call of ``func`` (``owner.func``)."""
    if not (isinstance(node, ast.Call) and node.args):
        return None
    target, arg = node.func, node.args[0]
    if getattr(target, "id", getattr(target, "attr", None)) != func:
        return None
    if owner is not None and getattr(getattr(target, "value", None), "id", None) != owner:
        return None
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def parse_source(path) -> ast.Module:
    """The syntax tree of a source file, read without importing it; a syntax error is a
    ``PluginError`` naming the file and line (one line, exit 2), not an internal error: a method
    file dropped into a package folder is the user's, and so is the fix."""
    try:
        return ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise PluginError(
            f"{path}, line {exc.lineno}: syntax error: {exc.msg}; fix the file or remove it (it is "
            "read, without being imported, whenever methods or benchmarks are listed)"
        ) from None


def declared_options(kind: str, name: str) -> dict[str, Any] | None:
    """The options the built-in ``kind`` ('method', 'objective') ``name`` declares, each as the
    ``option(...)`` declaration ``_options.check`` reads, from its source and without importing it
    (the registry checks a record's ``method.x``/``objective.x`` values with them). None where the
    source cannot say: a plugin, a name the catalog does not know. A declaration whose type or
    bounds are not constants is known by name and checked for nothing (``Any``)."""
    return _declared_options(kind, name)


def option_problem(kind: str, name: str, opt: str, value: Any) -> tuple[str, str] | None:
    """What is wrong with ``kind.opt = value`` for the built-in ``kind`` ``name``: ``("undeclared",
    message)`` when ``name`` declares no option ``opt`` (with a "did you mean" and the declared
    names), ``("range", message)`` when the value is outside the declaration; None when it is
    right, or when the source cannot tell (``declared_options`` is None)."""
    declared = declared_options(kind, name)
    if declared is None:
        return None
    if "." in opt and opt.split(".")[0] in declared:  # a nested table (benchmark.finetune.epochs):
        return None  # its own dataclass, checked by the run
    if opt not in declared:
        return "undeclared", (
            f"{kind}.{opt} is not an option of {kind} {name!r}"
            + _options.did_you_mean(opt, declared, f"{kind}.")
            + f"; declared: {', '.join(sorted(declared)) or 'none'}"
        )
    try:
        _options.check(f"{kind}.{opt}", value, declared[opt])
    except SpecError as exc:
        return "range", str(exc)
    return None


@functools.cache
def _declared_options(kind: str, name: str) -> dict[str, Any] | None:
    if kind == "objective":
        path = module_source(KINDS[kind].package)
        return SourceFile(path).objective_options().get(name) if path else None
    entry = builtins(kind).get(name) if kind in KINDS else None
    if entry is None or ":" not in entry.target:
        return None
    module, cls = entry.target.split(":")
    path = module_source(module)
    if path is None:
        return None
    if kind == "benchmark":  # declared on the constructor, as ``resolve.check_options`` reads them
        return SourceFile(path).init_options().get(cls)
    return SourceFile(path).class_options().get(cls, {})


def module_source(module: str) -> Path | None:
    """The ``.py`` file of a module, found without importing it or its parent packages
    (``find_spec`` of ``a.b`` would import ``a``, whose ``__init__`` may import torch): the
    top-level package is located, then the path is walked. None when the module is not a plain
    source file (a namespace package, an extension)."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level spec is found without importing anything
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    for folder in spec.submodule_search_locations or ():
        base = Path(folder).joinpath(*rest)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


_MISSING = object()  # a value that cannot be read without running code


class SourceFile:
    """One source file's syntax tree and the constant expressions it can evaluate without running
    anything: literals, tuples, lists, dicts, subscripts, f-strings without format specs, the
    module's own top-level constants, and ``NAME``/``module.NAME`` imported (``from P import X``)
    from another source file whose value is such an expression."""

    def __init__(self, path):
        self.tree = parse_source(path)
        self.imports: dict[str, tuple[str, str]] = {}  # local name -> (P, X) of from P import X
        self._assigned: dict[str, ast.AST] = {}  # top-level name -> the expression it is bound to
        self._values: dict[str, object] = {}  # evaluated on first use
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (node.module, alias.name)
            else:
                for target in _assigned_names(node):
                    self._assigned[target] = node.value

    @functools.cached_property
    def nodes(self) -> list[ast.AST]:
        """Every node of the tree (``ast.walk``'s order), walked once for all the readings of the
        file: a listing reads each file three to five ways."""
        return list(ast.walk(self.tree))

    @functools.cached_property
    def classes(self) -> list[ast.ClassDef]:
        """Every class the file defines, nested ones included."""
        return [n for n in self.nodes if isinstance(n, ast.ClassDef)]

    def constant(self, name: str):
        """The value of the module's top-level constant ``name``, or ``_MISSING``."""
        if name not in self._values:
            self._values[name] = _MISSING  # a definition that refers to itself reads as missing
            self._values[name] = self.value(self._assigned.get(name))
        return self._values[name]

    def value(self, node: ast.AST | None):
        """The value of a constant expression, or ``_MISSING``."""
        match node:
            case ast.Constant():
                return node.value
            case ast.Tuple() | ast.List():
                items = [self.value(e) for e in node.elts]
                if any(i is _MISSING for i in items):
                    return _MISSING
                return tuple(items) if isinstance(node, ast.Tuple) else items
            case ast.Dict():
                keys, values = (
                    [self.value(k) for k in node.keys],
                    [self.value(v) for v in node.values],
                )
                if any(x is _MISSING for x in keys + values):
                    return _MISSING
                return dict(zip(keys, values, strict=True))
            case ast.Subscript():
                container, key = self.value(node.value), self.value(node.slice)
                try:
                    if container is _MISSING or key is _MISSING:
                        return _MISSING
                    return container[key]
                except (KeyError, IndexError, TypeError):
                    return _MISSING
            case ast.Name(id=name) if name in self._assigned:
                return self.constant(name)
            case ast.Name(id=name) if name in self.imports:  # ``from P import CONSTANT``
                return _module_constant(*self.imports[name])
            case ast.Attribute(value=ast.Name(id=mod)) if mod in self.imports:
                return _module_constant(".".join(self.imports[mod]), node.attr)
            case ast.JoinedStr():
                return self._fstring(node)
            case ast.UnaryOp(op=ast.USub()):  # a negative number (``ge=-1``)
                x = self.value(node.operand)
                return -x if type(x) in (int, float) else _MISSING
        return _MISSING

    def _fstring(self, node: ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.FormattedValue) and (v.format_spec or v.conversion != -1):
                return _MISSING
            x = self.value(v.value if isinstance(v, ast.FormattedValue) else v)
            if x is _MISSING:
                return _MISSING
            parts.append(str(x))
        return "".join(parts)

    def registered_classes(self, decorator: str) -> list[tuple[str, str]]:
        """``(registered name, class name)`` of every class decorated ``@decorator("name")``."""
        found = []
        for cls in self.classes:
            for d in cls.decorator_list:
                if (name := _registration(d, decorator)) is not None:
                    found.append((name, cls.name))
        return found

    def class_attrs(self, attrs: tuple[str, ...]) -> dict[str, dict[str, object]]:
        """``{class name: {attr: value}}`` of the readable ``attrs`` of every class of the file; a
        class without its own value inherits the first base's of the same file that has one."""
        classes = self.classes
        own: dict[str, dict[str, object]] = {}
        for cls in classes:
            for stmt in cls.body:
                for name in _assigned_names(stmt):
                    if name in attrs and (v := self.value(stmt.value)) is not _MISSING:
                        own.setdefault(cls.name, {})[name] = v
        found = {}
        for cls in classes:
            chain = [cls.name, *(getattr(b, "id", None) for b in cls.bases)]
            found[cls.name] = {
                a: next(own[c][a] for c in chain if a in own.get(c, {}))
                for a in attrs
                if any(a in own.get(c, {}) for c in chain)
            }
        return found

    def class_options(self) -> dict[str, dict[str, Any]]:
        """``{class name: {option: declaration}}``: every field of each class of the file
        (``name: option(...) = default``, or a plain annotated one: ``_field``), its bases' of the
        same file included at any depth (a subclass's own win)."""
        classes = self.classes
        own: dict[str, dict[str, Any]] = {}
        for cls in classes:
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    hint = self._field(stmt)
                    if hint is not _MISSING:
                        own.setdefault(cls.name, {})[stmt.target.id] = hint
        bases = {c.name: [getattr(b, "id", None) for b in c.bases] for c in classes}

        def options(name: str | None, seen: frozenset = frozenset()) -> dict[str, Any]:
            if name not in bases or name in seen:  # a base of another file, or a cycle
                return {}
            inherited = [options(b, seen | {name}) for b in reversed(bases[name])]
            return {k: v for d in (*inherited, own.get(name, {})) for k, v in d.items()}

        return {c.name: options(c.name) for c in classes}

    def _field(self, stmt: ast.AnnAssign) -> Any:
        """The declaration of one annotated field of a (dataclass) method: ``option(...)``'s, a
        plain ``int``/``float``/``bool``/``str`` as itself, another type as ``Any`` (known by name,
        not checked); ``_MISSING`` for what is no option (a ``ClassVar``, ``field(init=False)``)."""
        ann, value = stmt.annotation, stmt.value
        if isinstance(ann, ast.Call) and getattr(ann.func, "id", None) == "option":
            return self._option(ann)
        if "ClassVar" in ast.unparse(ann):
            return _MISSING
        if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
            init = next((k.value for k in value.keywords if k.arg == "init"), None)
            if isinstance(init, ast.Constant) and init.value is False:
                return _MISSING
        plain = {"int": int, "float": float, "bool": bool, "str": str}
        return plain.get(getattr(ann, "id", None), Any)

    def _option(self, call: ast.Call) -> Any:
        """The declaration an ``option(kind, gt=..., ...)`` call builds, or ``Any`` when its kind
        or a bound is not a constant."""
        kinds = {"int": int, "float": float, "bool": bool, "str": str}
        kind = kinds.get(getattr(call.args[0], "id", None)) if call.args else None
        bounds = {k.arg: self.value(k.value) for k in call.keywords}
        if kind is None or any(v is _MISSING for v in bounds.values()):
            return Any
        return _options.option(kind, **bounds)

    def init_options(self) -> dict[str, dict[str, Any] | None]:
        """``{class name: {option: declaration}}`` for options declared as keyword parameters of
        ``__init__`` (``name: option(...) = default``: a benchmark's); a parameter without
        ``option(...)`` is none (``cache_dir``, ``progress``, ``device``, ``build``). A class
        without its own ``__init__`` has its nearest base's of this file; None when that is in
        another file (not known from here)."""
        classes = {n.name: n for n in self.classes}

        def own(cls: ast.ClassDef) -> dict[str, Any] | None:
            init = next(
                (s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"),
                None,
            )
            if init is None:
                return None
            return {
                a.arg: self._option(a.annotation)
                for a in (*init.args.args, *init.args.kwonlyargs)
                if isinstance(a.annotation, ast.Call)
                and getattr(a.annotation.func, "id", None) == "option"
            }

        def options(name: str, seen: frozenset = frozenset()) -> dict[str, Any] | None:
            cls = classes.get(name)
            if cls is None or name in seen:
                return None
            found = own(cls)
            if found is not None:
                return found
            for base in cls.bases:
                got = options(getattr(base, "id", None), seen | {name})
                if got is not None:
                    return got
            return None

        return {name: options(name) for name in classes}

    def objective_options(self) -> dict[str, dict[str, Any]]:
        """``{objective: {option: declaration}}``: the options each ``OBJECTIVES.register("name",
        Objective(..., options=(...)))`` lets a user set, declared on the ``Objective`` class."""
        fields = self.class_options().get("Objective", {})
        found = {}
        for node in self.nodes:
            name = _registration(node, "register", "OBJECTIVES")
            made = node.args[1] if name is not None and len(node.args) > 1 else None
            if isinstance(made, ast.Call):
                given = next((k.value for k in made.keywords if k.arg == "options"), None)
                names = self.value(given) if given is not None else ()
                if names is not _MISSING:
                    found[name] = {o: fields.get(o, Any) for o in names}
        return found


def _assigned_names(node: ast.AST) -> list[str]:
    """The names ``NAME = value`` (``A = B = value``) or ``NAME: type = value`` binds."""
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [node.target.id] if isinstance(node.target, ast.Name) else []
    return []


_READING: set[tuple[str, str]] = (
    set()
)  # (module, name) being read: constants that import each other


def _module_constant(module: str, name: str):
    """The value of the top-level constant ``name`` of ``module``'s source file, or ``_MISSING``
    (also for constants of two modules that refer to each other)."""
    path = module_source(module)
    if path is None or path.suffix != ".py" or (module, name) in _READING:
        return _MISSING
    _READING.add((module, name))
    try:
        return SourceFile(path).constant(name)
    except (OSError, PluginError, UnicodeDecodeError):
        return _MISSING
    finally:
        _READING.discard((module, name))
