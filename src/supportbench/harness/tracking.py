"""Optional live logging of a run to TensorBoard or Weights & Biases (issue 35): one callback.

A ``Runner`` given ``tracker="tensorboard"`` or ``tracker="wandb"`` (``run --log-to``) opens one
``Tracker`` per run it executes, hands it each curve point as the trainer makes it (``eval_every``;
keys ``curve/J``, ``curve/G_F``, ``curve/D_coll`` and ``curve/<component>``, at the point's step)
and, once the run is scored, the terminal outcome (``final/...`` at step T, the counts of the
enforcement check and of a relearning attack among them), then closes it. Runs reused from their
stored record are not logged again.

The tracker is a view, never the record: nothing reads it back, it is not part of a run's settings
or key, and a run's record and registry rows are the same with it or without (tested). Neither
package is a dependency of supportbench: asking for one that is not installed is refused before
any run starts, naming the ``pip install``; a tracker that fails while a run goes on is reported
once on stderr and dropped for the rest of that run, which goes on and is recorded as usual.

Where it writes: TensorBoard event files in ``<log_dir>/<run_key[:12]>`` (``tensorboard --logdir
<log_dir>``); W&B runs named by the run key in project ``$WANDB_PROJECT`` (default
``supportbench``), their local files under ``<log_dir>``; ``WANDB_MODE=offline`` keeps them off
the network (``wandb sync`` later), as on a cluster without internet.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from supportbench.errors import SpecError

# the package each tracker needs, and the module the check imports
PACKAGES: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "torch.utils.tensorboard"),
    "wandb": ("wandb", "wandb"),
}
TRACKERS = tuple(PACKAGES)


class Tracker(Protocol):
    """What the runner calls: scalars at a step, then ``close`` once."""

    def log(self, step: int, scalars: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


def check_tracker(kind: str | None) -> None:
    """Refuse an unknown tracker, or one whose package is not installed, before any run starts."""
    if kind is None:
        return
    if kind not in PACKAGES:
        raise SpecError(
            f"tracker {kind!r} is not one supportbench logs to; allowed: {', '.join(TRACKERS)} "
            "(or none: the record and the registry never need one)"
        )
    package, module = PACKAGES[kind]
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise SpecError(
            f"logging to {kind} needs the {package!r} package, which is not installed here "
            f"({exc}): `pip install {package}`, or leave the tracker out (the run's record and "
            "the registry do not need it)"
        ) from None


def open_tracker(kind: str, *, name: str, log_dir: Path, config: dict) -> Tracker:
    """A tracker of ``kind`` (``check_tracker`` first) for the run ``name`` with its settings."""
    return _OPENERS[kind](name=name, log_dir=Path(log_dir), config=config)


class _TensorBoard:
    def __init__(self, *, name: str, log_dir: Path, config: dict):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir / name[:12]))
        lines = [f"{k}: {v}" for k, v in sorted(config.items())]
        self.writer.add_text("spec", "\n\n".join(lines), 0)

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


class _Wandb:
    def __init__(self, *, name: str, log_dir: Path, config: dict):
        import wandb

        log_dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "supportbench"),
            name=name[:12],
            config=config,
            dir=str(log_dir),
        )

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        self.run.log(dict(scalars), step=step)

    def close(self) -> None:
        self.run.finish()


_OPENERS: dict[str, Callable[..., Tracker]] = {"tensorboard": _TensorBoard, "wandb": _Wandb}


def scalars(prefix: str, J: float, G_F: float, D_coll: float, components: Mapping) -> dict:
    """The numbers of a curve point or an outcome under ``prefix/``: J, G_F, D_coll and every
    finite numeric component under its display name (open-unlearning's where it has one)."""
    from supportbench.experiments.metric_names import display_name

    out = {f"{prefix}/J": float(J), f"{prefix}/G_F": float(G_F), f"{prefix}/D_coll": float(D_coll)}
    for key, value in components.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(float(value)):
            out[f"{prefix}/{display_name(key)}"] = float(value)
    return out


class Guarded:
    """A tracker whose failures never reach the run: the first one is reported on stderr and the
    tracker is dropped (the run goes on and is recorded as usual)."""

    def __init__(self, kind: str, opener: Callable[[], Tracker], run: str):
        self.kind, self.run, self.tracker = kind, run, None
        self._call(lambda: setattr(self, "tracker", opener()), "open")

    def log(self, step: int, prefix: str, J, G_F, D_coll, components: Mapping) -> None:
        """``scalars(prefix, ...)`` at ``step``, computed inside the guard too."""
        if self.tracker is not None:
            self._call(
                lambda: self.tracker.log(step, scalars(prefix, J, G_F, D_coll, components)), "log"
            )

    def close(self) -> None:
        if self.tracker is not None:
            self._call(self.tracker.close, "close")
            self.tracker = None

    def _call(self, fn: Callable[[], object], what: str) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - a view's failure must not fail the run
            print(
                f"warning: {self.kind} tracker failed to {what} for run {self.run[:12]} "
                f"({type(exc).__name__}: {exc}); the run goes on without it, its record unchanged",
                file=sys.stderr,
            )
            self.tracker = None
