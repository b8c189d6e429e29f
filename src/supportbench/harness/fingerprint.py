"""What the code behind a run is, so a record computed by older code is never silently reused.

The run key hashes the resolved RunSpec: every setting the spec names. A fingerprint adds what code
decides: the method's effective hyperparameters and ``requires``, the objective's effective
settings, and the source files of everything that can change the run's outcome —

  unlearning   every file of ``supportbench/unlearning/`` (models, support, objectives, training,
               data)
  method       the method's module, the shared diagnostics and the method contract
               (``methods/base.py``)
  benchmark    every file of the benchmark's package (reader, generator, adapter, ...), the
               benchmark contract, the evaluator that defines J and the shared reader of
               ``datasets``' saved folders (``benchmarks/base.py``, ``evaluators.py``,
               ``saved.py``)
  harness      the runner (which turns a spec into a training configuration) and, for DIR-R runs,
               the orchestration of Algorithm 1, its compute accounting and the action set
               (``dirr.py``, ``compute.py``, ``experiments/decisions.py``)

Files are read from disk (not from whichever modules happen to be imported), so the fingerprint of a
spec is the same in every process running the same tree. Every record stores it; the runner reruns a
record whose fingerprint differs from the current code's (``stale``) unless told to reuse it, and
the audit reports experiments whose records mix fingerprints.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import sys
from pathlib import Path

from supportbench.experiments.identity import source_hash
from supportbench.experiments.record import Fingerprint
from supportbench.harness.resolve import ResolvedRun


def _module_file(obj) -> Path | str:
    """The source file defining ``obj`` (plugins live outside the package); 'unknown' if it has
    none."""
    try:
        return Path(inspect.getsourcefile(sys.modules[obj.__module__]) or "unknown").resolve()
    except (TypeError, KeyError):
        return "unknown"


def _package_dir(cls) -> Path | str:
    f = _module_file(cls)
    return f.parent if isinstance(f, Path) else f


def _jsonable(x):
    return json.loads(json.dumps(x, sort_keys=True, default=str))


def fingerprint(resolved: ResolvedRun) -> Fingerprint:
    """The fingerprint of the code that runs the resolved run (its objective, benchmark class and
    method as ``resolve`` built them); ``hash`` summarises the rest."""
    spec, objective, bench_cls = resolved.spec, resolved.objective, resolved.benchmark_cls
    bench_files = (
        _package_dir(bench_cls),
        "benchmarks/base.py",
        "benchmarks/evaluators.py",
        "benchmarks/saved.py",  # the TOFU and LACUNA readers' datasets-folder reading
        *(("experiments/controlled_decision.py",) if bench_cls.INTERFACES else ()),
    )
    if resolved.interface:  # an intervention the benchmark defines itself
        method_fp = {"interface": spec.method, "source": source_hash(*bench_files)}
    else:
        method = resolved.method
        method_fp = {
            "hyperparameters": _jsonable(getattr(method, "hyperparameters", {})),
            "requires": list(getattr(method, "requires", ())),
            "source": source_hash(
                _module_file(type(method)), "methods/diagnostics.py", "methods/base.py"
            ),
        }
    harness = ("harness/runner.py",) + (
        (
            "harness/dirr.py",
            "harness/compute.py",
            "experiments/decisions.py",
            "experiments/calibration.py",
        )
        if spec.variant == "dirr"
        else ()
    )
    fp = {
        "method": method_fp,
        "objective": {
            "settings": _jsonable(dataclasses.asdict(objective)),
            "source": source_hash("unlearning"),
        },
        "benchmark": {"source": source_hash(*bench_files)},
        "harness": {"source": source_hash(*harness)},
    }
    return Fingerprint(
        hash=hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16], **fp
    )
