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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="supportbench", description=__doc__.split("\n")[0])
    from supportbench import __version__

    p.add_argument("--version", action="version", version=f"supportbench {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    g = sub.add_parser("geometry", help="show the editable geometry (down-proj columns) of a local model")
    g.add_argument("model", help="path to a local Hugging Face causal LM directory")
    g.set_defaults(func=_cmd_geometry)
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
