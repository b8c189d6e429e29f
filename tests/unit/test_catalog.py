"""The plugin catalog names every method, benchmark and objective as the imported registries do,
reads constant class attributes from source without running them, and keeps the listings free of
torch."""

import subprocess
import sys
import textwrap
from importlib import import_module

import pytest

from supportbench import catalog
from supportbench.benchmarks.base import BENCHMARKS
from supportbench.methods.base import METHODS
from supportbench.unlearning.objectives import OBJECTIVES

REGISTRIES = {"method": METHODS, "benchmark": BENCHMARKS, "objective": OBJECTIVES}


def resolve(target: str):
    module, _, name = target.partition(":")
    return getattr(import_module(module), name)


@pytest.mark.parametrize("kind", ["method", "benchmark", "objective"])
def test_the_catalog_names_what_the_registry_imports(kind):
    registry = REGISTRIES[kind]
    entries = catalog.entries(kind)
    assert list(entries) == registry.names()
    for name, entry in entries.items():
        target = resolve(entry.target)
        if kind == "objective":  # instances registered by a call: the target is the registry
            assert target is registry and target.get(name).name == name
            continue
        cls = registry.get(name)
        assert target is cls, (name, entry.target)
        # every attribute the kind declares is read, with the class's own value
        assert set(entry.attrs) == set(catalog.KINDS[kind].attrs), (name, entry.attrs)
        for attr, value in entry.attrs.items():
            assert value == getattr(cls, attr), (name, attr)


def test_the_paper_methods_are_the_registered_built_ins():
    # a new method is one new file: the built-ins may grow past the paper's eleven
    assert set(catalog.PAPER_METHODS) <= set(catalog.builtins("method"))
    assert tuple(catalog.PAPER_METHODS)[1:] == catalog.BASELINES and len(catalog.BASELINES) == 10
    assert "intervention_score" not in catalog.BASELINES
    assert set(catalog.MODERN) < set(catalog.BASELINES)


def test_constant_expressions_are_read_and_code_is_not(tmp_path, monkeypatch):
    (tmp_path / "consts_mod.py").write_text('MODELS = {"a": "model-a"}\nNAMES = ("x", "y")\n')
    (tmp_path / "plug.py").write_text(
        textwrap.dedent("""
        from consts_mod import MODELS
        import consts_mod as unused
        from consts_mod import NAMES as N
        KIND = "k"
        LOOP = LOOP

        @register_thing("first")
        class First:
            A = MODELS["a"]
            B = N
            C = f"{KIND}-{N[1]}"
            D = len(N)          # a call: needs code
            E = LOOP            # refers to itself
            F = MODELS["nope"]  # no such key

        @register_thing("second")
        class Second(First):
            C = ["own", 1.5, None]
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    source = catalog.SourceFile(tmp_path / "plug.py")
    attrs = source.class_attrs(("A", "B", "C", "D", "E", "F"))
    assert attrs["First"] == {"A": "model-a", "B": ("x", "y"), "C": "k-y"}
    # a subclass inherits what it does not set
    assert attrs["Second"] == {"A": "model-a", "B": ("x", "y"), "C": ["own", 1.5, None]}
    assert source.registered_classes("register_thing") == [("first", "First"), ("second", "Second")]


def test_module_attributes_chains_and_cycles(tmp_path, monkeypatch):
    """``from P import module`` then ``module.NAME``; ``A = B = value``; two modules whose
    constants refer to each other read as missing, never as an endless recursion."""
    (tmp_path / "pkgc").mkdir()
    (tmp_path / "pkgc" / "__init__.py").write_text("")
    (tmp_path / "pkgc" / "consts.py").write_text('FIRST = SECOND = ("a", "b")\n')
    (tmp_path / "pkgc" / "cyc_a.py").write_text("from pkgc.cyc_b import Y\nX = Y\n")
    (tmp_path / "pkgc" / "cyc_b.py").write_text("from pkgc.cyc_a import X\nY = X\n")
    (tmp_path / "user.py").write_text(
        textwrap.dedent("""
        from pkgc import consts
        from pkgc.cyc_a import X

        class User:
            shown = label = "chained"
            first = consts.FIRST
            second = consts.SECOND
            cyclic = X
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    attrs = catalog.SourceFile(tmp_path / "user.py").class_attrs(
        ("shown", "label", "first", "second", "cyclic")
    )
    assert attrs["User"] == {
        "shown": "chained",
        "label": "chained",
        "first": ("a", "b"),
        "second": ("a", "b"),
    }


def test_a_syntax_error_in_a_dropped_file_names_the_file_and_line(tmp_path):
    from supportbench.errors import PluginError

    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\ndef f(:\n")
    with pytest.raises(PluginError, match=r"bad\.py, line 2: syntax error"):
        catalog.SourceFile(bad)


def test_listings_import_no_torch():
    """benchmarks, objectives and methods list from source: torch is never imported."""
    code = textwrap.dedent("""
        import contextlib, io, sys
        from supportbench.cli import main
        with contextlib.redirect_stdout(io.StringIO()) as out:
            codes = [main([c]) for c in ("benchmarks", "objectives", "methods")]
        print(codes, "torch" in sys.modules, "tiny-qwen2" in out.getvalue())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["[0,", "0,", "0]", "False", "True"], r.stdout + r.stderr


@pytest.mark.parametrize("kind", ["method", "objective"])
def test_the_catalog_reads_every_option_declaration_as_the_import_declares_it(kind):
    """The registry range-checks a record's ``method.x``/``objective.x`` with the declarations the
    catalog reads from source (no torch); they must be the imported classes' own, option by
    option (type, bounds, unit, meaning), for every built-in."""
    from supportbench import _options

    for name in REGISTRIES[kind].names():
        if kind == "objective":
            made = OBJECTIVES.get(name)
            fields = _options.declared(type(made))
            want = {o: fields[o][0] for o in made.options}
        else:
            want = {k: hint for k, (hint, _) in _options.declared(METHODS.get(name)).items()}
        assert catalog.declared_options(kind, name) == want, name
    assert catalog.declared_options(kind, "no_such_name") is None


def test_options_are_inherited_through_every_base_of_the_file(tmp_path):
    """``C(B)``, ``B(A)`` in one file: C declares A's option too (review: one level was read); a
    plain annotated field is an option (a new method file's ``scale: float = 2.0``)."""
    from typing import Any

    path = tmp_path / "m.py"
    path.write_text(
        textwrap.dedent("""
        class A:
            a: option(float, gt=0) = 1.0
        class B(A):
            b: option(int, ge=1) = 2
        class C(B):
            c: option(float, le=1) = 0.5
            a: option(float, gt=1) = 2.0
            scale: float = 2.0
            shape: tuple[int, ...] = (1,)
            requires: ClassVar[tuple] = ("grad:F",)
            cache: dict = field(init=False, default_factory=dict)
        """)
    )
    got = catalog.SourceFile(path).class_options()
    # a plain annotated field is an option too (a dataclass's init field), a ClassVar or a
    # field(init=False) is not
    assert sorted(got["C"]) == ["a", "b", "c", "scale", "shape"] and sorted(got["B"]) == ["a", "b"]
    assert got["C"]["scale"] is float and got["C"]["shape"] is Any
    from supportbench import _options

    assert got["C"]["a"] == _options.option(float, gt=1)  # the subclass's own wins
