"""Exact training checkpoints C_t (paper §3.3, App. A.3).

C_t holds the editable tensors, the optimizer state (compact: only the support's coordinates), the
scheduler position, the data cursor and every RNG state. Restoring C_t and continuing with the same
support reproduces the uninterrupted run bitwise on CPU; each branch restores independently.
On disk: ``<path>.safetensors`` (all tensors) + ``<path>.json`` (everything else, plus the tensor
file's sha256). Nothing is pickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from supportbench.errors import CheckpointError

FORMAT = 1


@dataclass
class OptimizerSlot:
    """AdamW state of one geometry tensor, restricted to the support's flat indices."""

    idx: torch.Tensor  # sorted flat indices (int64)
    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor
    step: float


@dataclass
class Checkpoint:
    step: int  # also the data cursor: batches are a function of step
    support: tuple[int, ...]
    editable: dict[str, torch.Tensor]  # full geometry tensors at step t
    optimizer: dict[str, OptimizerSlot]
    rng: dict  # torch / python / numpy states
    meta: dict = field(default_factory=dict)  # config fingerprint, objective, ...

    # ---- disk -----------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tensors = {f"editable/{k}": v.contiguous() for k, v in self.editable.items()}
        for k, s in self.optimizer.items():
            tensors[f"opt/{k}/idx"] = s.idx.contiguous()
            tensors[f"opt/{k}/exp_avg"] = s.exp_avg.contiguous()
            tensors[f"opt/{k}/exp_avg_sq"] = s.exp_avg_sq.contiguous()
        tensors["rng/torch"] = self.rng["torch"]
        tensors["rng/numpy_keys"] = torch.from_numpy(self.rng["numpy"][1].astype(np.int64))
        tfile = path.with_suffix(".safetensors")
        tmp = tfile.with_suffix(".safetensors.tmp")
        save_file(tensors, str(tmp))
        os.replace(tmp, tfile)
        sidecar = {
            "format": FORMAT,
            "step": self.step,
            "support": list(self.support),
            "meta": self.meta,
            "opt_steps": {k: s.step for k, s in self.optimizer.items()},
            "rng_python": _py_state_to_json(self.rng["python"]),
            "rng_numpy": [self.rng["numpy"][0], *map(_jsonable, self.rng["numpy"][2:])],
            "tensors_sha256": _sha256(tfile),
        }
        jfile = path.with_suffix(".json")
        tmpj = jfile.with_suffix(".json.tmp")
        tmpj.write_text(json.dumps(sidecar, indent=1))
        os.replace(tmpj, jfile)
        return jfile

    @classmethod
    def load(cls, path: str | Path) -> Checkpoint:
        path = Path(path)
        jfile, tfile = path.with_suffix(".json"), path.with_suffix(".safetensors")
        if not jfile.exists() or not tfile.exists():
            raise CheckpointError(f"checkpoint '{path}' needs both {jfile.name} and {tfile.name}")
        side = json.loads(jfile.read_text())
        if side.get("format") != FORMAT:
            raise CheckpointError(
                f"{jfile}: checkpoint format {side.get('format')!r}, this version reads {FORMAT}"
            )
        if _sha256(tfile) != side["tensors_sha256"]:
            raise CheckpointError(
                f"{tfile}: content does not match the sha256 in {jfile.name} (corrupt or edited)"
            )
        t = load_file(str(tfile))
        editable = {k[len("editable/") :]: v for k, v in t.items() if k.startswith("editable/")}
        optimizer = {}
        for k, st in side["opt_steps"].items():
            optimizer[k] = OptimizerSlot(
                t[f"opt/{k}/idx"], t[f"opt/{k}/exp_avg"], t[f"opt/{k}/exp_avg_sq"], st
            )
        np_state = (
            side["rng_numpy"][0],
            t["rng/numpy_keys"].numpy().astype(np.uint32),
            *side["rng_numpy"][1:],
        )
        rng = {
            "torch": t["rng/torch"],
            "python": _py_state_from_json(side["rng_python"]),
            "numpy": np_state,
        }
        return cls(side["step"], tuple(side["support"]), editable, optimizer, rng, side["meta"])


def capture_rng() -> dict:
    return {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }


def restore_rng(state: dict) -> None:
    torch.set_rng_state(state["torch"].clone())
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _jsonable(x):
    return x.item() if hasattr(x, "item") else x


def _py_state_to_json(s):
    return [s[0], list(s[1]), s[2]]


def _py_state_from_json(s):
    return (s[0], tuple(s[1]), s[2])
