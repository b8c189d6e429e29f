"""The ``supportbench`` command. Heavy imports (torch, transformers) happen inside the subcommands
that need them, so ``report``, ``audit`` and ``registry`` start fast."""

from __future__ import annotations

import argparse
import sys

from supportbench.errors import SupportbenchError


def _cmd_geometry(args) -> int:
    from supportbench.harness.models import load_model
    from supportbench.harness.support import discover_geometry

    model, _ = load_model(args.model)
    geo = discover_geometry(model)
    print(geo.describe())
    for t in geo.tensors:
        print(f"  {t.name}  groups {t.offset}..{t.offset + t.n - 1}  cost/group {t.group_cost}")
    return 0


def _cmd_methods(args) -> int:
    from supportbench.methods.base import METHODS

    names = METHODS.names()
    plugins = set(METHODS.plugins())
    rows = []
    for n in names:
        cls = METHODS.get(n)
        rows.append((n + (" (plugin)" if n in plugins else ""), ", ".join(getattr(cls, "requires", ())) or "-",
                     getattr(cls, "provenance", "") or "(no provenance given)"))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print(f"{'name':<{w0}}  {'needs':<{w1}}  provenance")
    for r in rows:
        prov = r[2] if args.full or len(r[2]) <= 90 else r[2][:87] + "..."
        print(f"{r[0]:<{w0}}  {r[1]:<{w1}}  {prov}")
    for name, err in sorted(METHODS.broken.items()):
        print(f"warning: plugin '{name}' failed to load and was skipped: {err}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="supportbench", description=__doc__.split("\n")[0])
    from supportbench import __version__

    p.add_argument("--version", action="version", version=f"supportbench {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    g = sub.add_parser("geometry", help="show the editable geometry (down-proj columns) of a local model")
    g.add_argument("model", help="path to a local Hugging Face causal LM directory")
    g.set_defaults(func=_cmd_geometry)
    m = sub.add_parser("methods", help="list selection methods: name, what data they need, provenance")
    m.add_argument("--full", action="store_true", help="do not shorten provenance")
    m.set_defaults(func=_cmd_methods)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SupportbenchError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
