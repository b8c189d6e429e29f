"""The layers of docs/architecture.md hold: imports point down, plain-data layers stay torch-free."""

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")


@pytest.mark.parametrize("module", ["supportbench.experiments.plan", "supportbench.experiments.decisions",
                                    "supportbench.registry.audit", "supportbench.registry.ingest",
                                    "supportbench.reports.report", "supportbench.cli"])
def test_plain_layers_leave_torch_out(module):
    code = textwrap.dedent(f"""
        import sys, importlib
        importlib.import_module({module!r})
        heavy = [m for m in ("torch", "transformers", "peft") if m in sys.modules]
        print(",".join(heavy))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"importing {module} pulled in {out}"


def _lint(src_root: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(src_root), "PATH": str(Path(sys.executable).parent)}
    return subprocess.run([LINT, "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True, env=env)


def test_import_contracts_hold():
    r = _lint(ROOT / "src")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("where, line", [
    ("unlearning/support.py", "from supportbench.methods import base as _forbidden  # noqa"),
    ("methods/random.py", "from supportbench.harness import runner as _forbidden  # noqa"),
    ("benchmarks/base.py", "from supportbench.methods import diagnostics as _forbidden  # noqa"),
    ("registry/audit.py", "import torch as _forbidden  # noqa"),
    ("experiments/spec.py", "from supportbench.unlearning import data as _forbidden  # noqa"),
])
def test_a_forbidden_import_breaks_the_contracts(tmp_path, where, line):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "supportbench", src / "supportbench",
                    ignore=shutil.ignore_patterns("__pycache__"))
    f = src / "supportbench" / where
    f.write_text(f.read_text() + "\n" + line + "\n")
    r = _lint(src)
    assert r.returncode != 0, f"adding {line!r} to {where} was not caught:\n{r.stdout}"
    assert "BROKEN" in r.stdout
