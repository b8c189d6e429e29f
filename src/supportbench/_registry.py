"""One generic name -> object registry (methods, benchmarks, objectives share it).

What is registered can also be known without importing it: ``catalog`` reads the same registrations
from source (no torch) for listings, name checks and reports.

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
