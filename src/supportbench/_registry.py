"""One generic name -> object registry (methods, benchmarks, objectives share it).

Modelled on lm-evaluation-harness: a decorator to register, built-ins imported lazily on first
lookup, third-party plugins discovered through an entry-point group, "did you mean" on a miss.
A registry may ``check`` each object it is given (the benchmark registry checks the declared members
of the ``Benchmark`` protocol); a built-in that fails the check is an error at import. A plugin that
cannot be used — it fails to import or the check, its entry-point name is not an identifier, or it
has the name of a built-in (which always wins) — is reported in ``broken`` with the reason and
skipped; it never breaks the listing or the built-ins.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from supportbench.errors import DuplicateNameError, PluginError, UnknownNameError

T = TypeVar("T")


def package_modules(package: str, exclude: Iterable[str] = ()) -> Callable[[], list[str]]:
    """Every module of ``package`` (one file each, not ``_private`` ones, not ``exclude``), found by
    scanning the package's folder when the registry first loads its built-ins."""

    def scan() -> list[str]:
        import pkgutil

        pkg = importlib.import_module(package)
        skip = set(exclude)
        return [
            f"{package}.{m.name}"
            for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name)
            if not m.ispkg and not m.name.startswith("_") and m.name not in skip
        ]

    return scan


def parse_source(path):
    """The AST of a source file read without importing it; a syntax error is a ``PluginError``
    naming the file and line (one line, exit 2), not an internal error: a method file dropped into a
    package folder is the user's, and so is the fix."""
    import ast
    from pathlib import Path

    try:
        return ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise PluginError(
            f"{path}, line {exc.lineno}: syntax error: {exc.msg}; fix the file or remove it (it is "
            "read, without being imported, whenever methods or benchmarks are listed)"
        ) from None


def declared_names(
    package: str, decorator: str, exclude: Iterable[str] = (), recursive: bool = False
) -> list[str]:
    """The names a package's modules register with ``@decorator("name")``, read from their source
    (AST) without importing them (no torch): for checks that must stay light, e.g.
    ``sweep --dry-run``. ``recursive`` reads subpackages too (benchmarks live in
    ``benchmarks/<name>/adapter.py``)."""
    import ast
    import importlib.util
    import pkgutil
    from pathlib import Path

    spec = importlib.util.find_spec(package)
    names = []
    if recursive:
        paths = [
            p
            for folder in spec.submodule_search_locations
            for p in sorted(Path(folder).rglob("*.py"))
            if not p.stem.startswith("_") and p.stem not in set(exclude)
        ]
    else:
        paths = [
            Path(m.module_finder.path) / f"{m.name}.py"
            for m in pkgutil.iter_modules(spec.submodule_search_locations)
            if not (m.ispkg or m.name.startswith("_") or m.name in set(exclude))
        ]
    for path in paths:
        for node in ast.walk(parse_source(path)):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == decorator
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.append(node.args[0].value)
    return sorted(set(names))


def declared_class_attrs(package: str, decorator: str, attr: str) -> dict[str, object]:
    """``{name: value}`` of a class attribute ``attr`` of every class a package (subpackages
    included) registers with ``@decorator("name")``, read from source without importing anything
    (see ``file_class_attrs`` for what can be read). A class whose value cannot be read is left out:
    the caller imports it instead."""
    import importlib.util
    from pathlib import Path

    found: dict[str, object] = {}
    root = importlib.util.find_spec(package)  # a package's spec is found without importing it
    for folder in root.submodule_search_locations:
        for path in sorted(Path(folder).rglob("*.py")):
            found.update(
                {
                    n: v[attr]
                    for n, v in file_class_attrs(path, decorator, (attr,)).items()
                    if attr in v
                }
            )
    return found


def file_class_attrs(
    path, decorator: str | None, attrs: tuple[str, ...]
) -> dict[str, dict[str, object]]:
    """``{name: {attr: value}}`` for the classes of one source file registered with
    ``@decorator("name")`` (every class under its own name when ``decorator`` is None), read without
    importing the file. A value can be read when it is a constant expression: literals, tuples,
    f-strings and names of the module's own constants, or ``module.NAME`` of a
    ``from P import module`` whose ``NAME`` is a literal. A subclass without its own value inherits
    the first base's of the same file."""
    import ast
    import importlib.util

    tree = parse_source(path)
    consts: dict[str, object] = {}  # the module's own top-level constants
    # local name -> (P, X) of ``from P import X [as name]``
    aliases: dict[str, tuple[str, str]] = {}

    def module_constant(module: str, name: str):
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return _MISSING
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            return _MISSING
        for node in parse_source(spec.origin).body:
            if isinstance(node, ast.Assign) and any(
                getattr(t, "id", None) == name for t in node.targets
            ):
                return value_of(node.value, {})
        return _MISSING

    def value_of(node, names):  # a constant expression's value, or _MISSING
        match node:
            case ast.Constant():
                return node.value
            case ast.Tuple() | ast.List():
                items = [value_of(e, names) for e in node.elts]
                if any(i is _MISSING for i in items):
                    return _MISSING
                return tuple(items) if isinstance(node, ast.Tuple) else items
            case ast.Name(id=n) if n in names:
                return names[n]
            case ast.Name(id=n) if n in aliases:  # ``from P import CONSTANT``
                return module_constant(*aliases[n])
            case ast.JoinedStr():
                parts = []
                for v in node.values:
                    x = value_of(v.value if isinstance(v, ast.FormattedValue) else v, names)
                    if x is _MISSING or (
                        isinstance(v, ast.FormattedValue) and (v.format_spec or v.conversion != -1)
                    ):
                        return _MISSING
                    parts.append(str(x))
                return "".join(parts)
            # ``from P import module``
            case ast.Attribute(value=ast.Name(id=mod)) if mod in aliases:
                return module_constant(".".join(aliases[mod]), node.attr)
        return _MISSING

    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                aliases[a.asname or a.name] = (node.module, a.name)
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            v = value_of(node.value, consts)
            if v is not _MISSING:
                consts[node.targets[0].id] = v
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    own: dict[str, dict[str, object]] = {}  # class name -> its own readable attributes
    for cls in classes:
        for stmt in cls.body:
            targets = (
                stmt.targets
                if isinstance(stmt, ast.Assign)
                else [stmt.target]
                if isinstance(stmt, ast.AnnAssign) and stmt.value is not None
                else []
            )
            for t in targets:
                if getattr(t, "id", None) in attrs:
                    v = value_of(stmt.value, consts)
                    if v is not _MISSING:
                        own.setdefault(cls.name, {})[t.id] = v
    found: dict[str, dict[str, object]] = {}
    for cls in classes:
        names = (
            [cls.name]
            if decorator is None
            else [
                d.args[0].value
                for d in cls.decorator_list
                if isinstance(d, ast.Call)
                and getattr(d.func, "id", getattr(d.func, "attr", None)) == decorator
                and d.args
                and isinstance(d.args[0], ast.Constant)
                and isinstance(d.args[0].value, str)
            ]
        )
        chain = [cls.name, *(getattr(b, "id", None) for b in cls.bases)]
        values = {
            a: next((own[c][a] for c in chain if a in own.get(c, {})), _MISSING) for a in attrs
        }
        for n in names:
            found[n] = {a: v for a, v in values.items() if v is not _MISSING}
    return found


_MISSING = object()


def plugin_names(group: str) -> list[str]:
    """Entry-point names of a plugin group (nothing is imported)."""
    return sorted(ep.name for ep in entry_points(group=group))


def module_source(module: str):
    """The ``.py`` file of a module, found without importing it or its parent packages
    (``find_spec`` of ``a.b`` would import ``a``, whose ``__init__`` may import torch): the
    top-level package is located, then the path is walked. None when the module is not a plain
    source file (a namespace package, an extension)."""
    import importlib.util
    from pathlib import Path

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


def plugin_class_attrs(group: str, attr: str) -> dict[str, object]:
    """``{entry-point name: value}`` of class attribute ``attr`` of every plugin of ``group`` that
    points at a class (``module:Class``), read from the plugin's source file (``file_class_attrs``)
    without importing it. A plugin whose file or value cannot be read so is left out: the caller
    falls back (e.g. to the name)."""
    found: dict[str, object] = {}
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        module, _, qualname = ep.value.partition(":")
        cls = qualname.strip().split(".")[-1]
        path = module_source(module.strip()) if cls else None
        if path is None:
            continue
        try:
            values = file_class_attrs(path, None, (attr,))
        except (OSError, PluginError, UnicodeDecodeError):
            continue
        if attr in values.get(cls, {}):
            found[ep.name] = values[cls][attr]
    return found


class Registry(Generic[T]):
    def __init__(
        self,
        kind: str,
        builtin_modules: Iterable[str] | Callable[[], Iterable[str]] = (),
        entry_point_group: str | None = None,
        error: type[UnknownNameError] = UnknownNameError,
        check: Callable[[str, T], None] | None = None,
    ):
        self.kind = kind
        # a list of modules, or a function giving them when first needed (``package_modules``: every
        # file of a package, so that a new file is a new built-in without editing a list)
        self._builtin_modules = (
            builtin_modules if callable(builtin_modules) else tuple(builtin_modules)
        )
        self._group = entry_point_group
        self._error = error
        # raises (naming the object and what is expected) to refuse a registration
        self._check = check
        self._items: dict[str, T] = {}
        self._plugins: set[str] = set()
        # plugin entry-point name -> why it was skipped (broken or shadowed)
        self.broken: dict[str, str] = {}
        self._builtins_loaded = False
        self._plugins_loaded = False

    def register(self, name: str, obj: T | None = None) -> Callable[[T], T] | T:
        """``@registry.register("name")`` or ``registry.register("name", obj)``."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{self.kind} name must be a Python identifier, got {name!r}")

        def add(o: T) -> T:
            existing = self._items.get(name)
            if existing is not None and existing is not o:
                raise DuplicateNameError(
                    f"{self.kind} '{name}' is already registered by "
                    f"{getattr(existing, '__module__', '?')}."
                    f"{getattr(existing, '__qualname__', existing)}"
                )
            if self._check is not None:
                self._check(name, o)
            self._items[name] = o
            if isinstance(o, type):  # classes learn their registered name
                o.name = name  # type: ignore[attr-defined]
            return o

        return add if obj is None else add(obj)

    def _load_builtins(self) -> None:
        if not self._builtins_loaded:
            self._builtins_loaded = True
            mods = (
                self._builtin_modules()
                if callable(self._builtin_modules)
                else self._builtin_modules
            )
            for mod in mods:
                try:
                    importlib.import_module(mod)
                # a file dropped into the package: the user's to fix, named as such
                except SyntaxError as exc:
                    self._builtins_loaded = False
                    raise PluginError(
                        f"{exc.filename}, line {exc.lineno}: syntax error: {exc.msg}; fix the file "
                        f"or remove it (module {mod})"
                    ) from None

    def _load_plugins(self) -> None:
        if self._plugins_loaded or self._group is None:
            return
        self._plugins_loaded = True
        # a plugin never replaces a built-in, so the built-ins must be known first
        self._load_builtins()
        for ep in entry_points(group=self._group):
            if not ep.name.isidentifier():
                suggestion = "".join(c if c.isalnum() or c == "_" else "_" for c in ep.name)
                self.broken[ep.name] = (
                    f"entry-point name {ep.name!r} is not a Python identifier "
                    f"(rename it, e.g. {suggestion!r})"
                )
                continue
            if ep.name in self._items:
                if ep.name not in self._plugins:
                    self.broken[ep.name] = (
                        f"shadowed: a built-in {self.kind} is named {ep.name!r}, so the plugin "
                        f"{ep.value} is ignored (rename its entry point)"
                    )
                continue
            try:  # a plugin's own decorator runs the check during load()
                self.register(ep.name, ep.load())
            except Exception as exc:  # a broken plugin must not break the listing
                self.broken[ep.name] = f"{type(exc).__name__}: {exc}"
                continue
            self._plugins.add(ep.name)

    def _load(self) -> None:
        self._load_builtins()
        self._load_plugins()

    def get(self, name: str) -> T:
        self._load_builtins()
        if name not in self._items:
            self._load_plugins()
        try:
            return self._items[name]
        except KeyError:
            raise self._error(self.kind, name, self._items, self._plugins) from None

    def names(self) -> list[str]:
        self._load()
        return sorted(self._items)

    def plugins(self) -> list[str]:
        self._load()
        return sorted(self._plugins)

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._items

    def unregister(self, name: str) -> None:
        """For tests that register throwaway entries."""
        self._items.pop(name, None)
        self._plugins.discard(name)
