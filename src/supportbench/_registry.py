"""One generic name -> object registry (methods, benchmarks, objectives share it).

Modelled on lm-evaluation-harness: a decorator to register, built-ins imported lazily on first
lookup, third-party plugins discovered through an entry-point group, "did you mean" on a miss.
A registry may ``check`` each object it is given (the benchmark registry checks the declared members of
the ``Benchmark`` protocol); a built-in that fails the check is an error at import. A plugin that cannot
be used — it fails to import or the check, its entry-point name is not an identifier, or it has the name
of a built-in (which always wins) — is reported in ``broken`` with the reason and skipped; it never breaks
the listing or the built-ins.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from supportbench.errors import DuplicateNameError, UnknownNameError

T = TypeVar("T")


def package_modules(package: str, exclude: Iterable[str] = ()) -> Callable[[], list[str]]:
    """Every module of ``package`` (one file each, not ``_private`` ones, not ``exclude``), found by scanning
    the package's folder when the registry first loads its built-ins."""
    def scan() -> list[str]:
        import pkgutil

        pkg = importlib.import_module(package)
        skip = set(exclude)
        return [f"{package}.{m.name}" for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name)
                if not m.ispkg and not m.name.startswith("_") and m.name not in skip]

    return scan


def declared_names(package: str, decorator: str, exclude: Iterable[str] = ()) -> list[str]:
    """The names a package's modules register with ``@decorator("name")``, read from their source (AST)
    without importing them (no torch): for checks that must stay light, e.g. ``sweep --dry-run``."""
    import ast
    import importlib.util
    import pkgutil
    from pathlib import Path

    spec = importlib.util.find_spec(package)
    names = []
    for m in pkgutil.iter_modules(spec.submodule_search_locations):
        if m.ispkg or m.name.startswith("_") or m.name in set(exclude):
            continue
        path = Path(m.module_finder.path) / f"{m.name}.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == decorator
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                names.append(node.args[0].value)
    return sorted(set(names))


def declared_class_attrs(package: str, decorator: str, attr: str) -> dict[str, object]:
    """``{name: value}`` of a class attribute ``attr`` of every class a package (subpackages included)
    registers with ``@decorator("name")``, read from source without importing anything. The value is a literal
    in the class body, or ``module.NAME`` of a ``from P import module`` import whose ``NAME`` is a literal in
    that module. A class whose value cannot be read this way is left out: the caller imports it instead."""
    import ast
    import importlib.util
    from pathlib import Path

    def literal(node):
        try:
            return True, ast.literal_eval(node)
        except ValueError:
            return False, None

    def module_constant(module: str, name: str):
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            return False, None
        for node in ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
                return literal(node.value)
        return False, None

    found: dict[str, object] = {}
    root = importlib.util.find_spec(package)   # a package's spec is found without importing it
    for folder in root.submodule_search_locations:
        for path in sorted(Path(folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            aliases = {}   # local name -> the module it names (``from P import mod [as alias]``)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    for a in node.names:
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            own: dict[str, object] = {}       # class name -> its readable ``attr`` (this module's classes)
            classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
            for cls in classes:
                for stmt in cls.body:
                    if isinstance(stmt, ast.Assign) and any(getattr(t, "id", None) == attr for t in stmt.targets):
                        v = stmt.value
                        ok, value = literal(v)
                        if not ok and isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) \
                                and v.value.id in aliases:
                            ok, value = module_constant(aliases[v.value.id], v.attr)
                        if ok:
                            own[cls.name] = value
            for cls in classes:
                names = [d.args[0].value for d in cls.decorator_list
                         if isinstance(d, ast.Call)
                         and getattr(d.func, "id", getattr(d.func, "attr", None)) == decorator
                         and d.args and isinstance(d.args[0], ast.Constant) and isinstance(d.args[0].value, str)]
                # its own value, else the first base of this module that has one (a subclass inherits it)
                chain = [cls.name, *(getattr(b, "id", None) for b in cls.bases)]
                value = next((own[c] for c in chain if c in own), _MISSING)
                if names and value is not _MISSING:
                    found.update(dict.fromkeys(names, value))
    return found


_MISSING = object()


def plugin_names(group: str) -> list[str]:
    """Entry-point names of a plugin group (nothing is imported)."""
    return sorted(ep.name for ep in entry_points(group=group))


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
        # a list of modules, or a function giving them when first needed (``package_modules``: every file of a
        # package, so that a new file is a new built-in without editing a list)
        self._builtin_modules = builtin_modules if callable(builtin_modules) else tuple(builtin_modules)
        self._group = entry_point_group
        self._error = error
        self._check = check  # raises (naming the object and what is expected) to refuse a registration
        self._items: dict[str, T] = {}
        self._plugins: set[str] = set()
        self.broken: dict[str, str] = {}  # plugin entry-point name -> why it was skipped (broken or shadowed)
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
                    f"{getattr(existing, '__module__', '?')}.{getattr(existing, '__qualname__', existing)}"
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
            mods = self._builtin_modules() if callable(self._builtin_modules) else self._builtin_modules
            for mod in mods:
                importlib.import_module(mod)

    def _load_plugins(self) -> None:
        if self._plugins_loaded or self._group is None:
            return
        self._plugins_loaded = True
        self._load_builtins()  # a plugin never replaces a built-in, so the built-ins must be known first
        for ep in entry_points(group=self._group):
            if not ep.name.isidentifier():
                suggestion = "".join(c if c.isalnum() or c == "_" else "_" for c in ep.name)
                self.broken[ep.name] = (f"entry-point name {ep.name!r} is not a Python identifier "
                                        f"(rename it, e.g. {suggestion!r})")
                continue
            if ep.name in self._items:
                if ep.name not in self._plugins:
                    self.broken[ep.name] = (f"shadowed: a built-in {self.kind} is named {ep.name!r}, so the plugin "
                                            f"{ep.value} is ignored (rename its entry point)")
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
