"""What the code behind a run is, so a record computed by older code is never silently reused.

The run key hashes the RunSpec only: change a method's formula or default and the key stays the same.
A fingerprint adds what the spec does not say: the method's effective hyperparameters and the source of
its module and of the shared diagnostics, the objective's effective settings and source, and the
benchmark's module source (its data and model are hashed separately, in provenance). Every record
stores it; the runner reruns a record whose fingerprint differs from the current code's (``stale``)
unless told to reuse it, and the audit reports experiments whose records mix fingerprints.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import sys
from functools import cache

from supportbench.benchmarks.base import BENCHMARKS
from supportbench.experiments.record import Fingerprint
from supportbench.experiments.spec import RunSpec
from supportbench.methods import diagnostics as _diagnostics
from supportbench.methods.base import get_method
from supportbench.unlearning import objectives as _objectives
from supportbench.unlearning.objectives import get_objective


@cache
def _module_hash(module_name: str) -> str:
    """sha256 of a module's source file (16 hex digits); 'unknown' where the source cannot be read."""
    try:
        src = inspect.getsource(sys.modules[module_name])
    except (OSError, TypeError, KeyError):
        return "unknown"
    return hashlib.sha256(src.encode()).hexdigest()[:16]


def _package_hash(module_name: str) -> str:
    """The benchmark's code: every loaded module of its package (reader, generator, adapter) and the
    shared evaluator that defines J."""
    package = module_name.rsplit(".", 1)[0] if "." in module_name else module_name
    names = sorted(m for m in list(sys.modules) if m == package or m.startswith(package + "."))
    names.append("supportbench.benchmarks.evaluators")
    return hashlib.sha256(" ".join(f"{m}={_module_hash(m)}" for m in names).encode()).hexdigest()[:16]


def _jsonable(x):
    return json.loads(json.dumps(x, sort_keys=True, default=str))


def fingerprint(spec: RunSpec) -> Fingerprint:
    """The fingerprint of the code that runs ``spec``; ``hash`` summarises the rest."""
    objective = get_objective(spec.objective, **spec.prefixed("objective."))
    bench_cls = BENCHMARKS.get(spec.benchmark)
    if spec.method in bench_cls.INTERFACES:  # an intervention the benchmark defines itself
        method_fp = {"interface": spec.method, "source": _package_hash(bench_cls.__module__)}
    else:
        method = get_method(spec.method, **spec.prefixed("method."))
        method_fp = {"hyperparameters": _jsonable(getattr(method, "hyperparameters", {})),
                     "requires": list(getattr(method, "requires", ())),
                     "source": _module_hash(type(method).__module__),
                     "diagnostics": _module_hash(_diagnostics.__name__)}
    fp = {
        "method": method_fp,
        "objective": {"settings": _jsonable(dataclasses.asdict(objective)),
                      "source": _module_hash(_objectives.__name__)},
        "benchmark": {"source": _package_hash(bench_cls.__module__)},
    }
    return Fingerprint(hash=hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16], **fp)
