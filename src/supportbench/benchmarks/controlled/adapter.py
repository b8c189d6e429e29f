"""The controlled separation of localization and intervention (paper §5.2, Table 1); construction defined here
(docs/benchmarks.md, "Controlled separation").

theta_pre: a tiny Qwen2 preset trained on background text (world facts, neutral sentences), or a local
model folder as is. Interfaces (``interfaces.py``): a seeded block of one layer's down-projection columns
(backbone) and a LoRA of equal size on the same down-projection. Injection: one joint run in which each
target's gradient reaches only its own interface; theta_0 = the injected model (LoRA unmerged). Cached.

A *field* is a target (``t00`` ... ``t35``); a run's *method* is an interface (``backbone`` or ``lora``): the
intervention trains the objective restricted to that interface with the same batches, steps, learning rate,
optimizer and seed. J is the project's: G_F = NLL increase on the target's evaluation phrasings; D_coll from
the other targets' evaluation phrasings (retain) and the world facts (protected). Components recorded with
every run: the target's outcome-blind storage score (computed once from theta_0 and the diagnostic
phrasings), ``injected_backbone``, its blind ``pair`` and the nuisance covariates.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from supportbench.benchmarks import evaluators as ev
from supportbench.benchmarks.base import (
    EvalSplit,
    Outcome,
    Prepared,
    Roles,
    default_cache_dir,
    publish,
    record_theta0_nll,
    register_benchmark,
)
from supportbench.benchmarks.controlled import generator as gen
from supportbench.benchmarks.controlled import interfaces as itf_mod
from supportbench.errors import SpecError, UnknownNameError
from supportbench.unlearning.data import DiagnosticRecords, dataset_nll, tokenize_pairs
from supportbench.unlearning.models import (
    base_identity,
    build_model,
    is_model_dir,
    load_model,
    model_hash,
    reproducible_build,
    resolve_device,
    save_model,
    train_tokenizer,
)
from supportbench.unlearning.train import FinetuneConfig, finetune

PREP_VERSION = "controlled-prepare-v2"  # v2: built reproducibly (seeded LoRA init, one thread)


@register_benchmark("controlled")
class Controlled:
    INTERFACES = itf_mod.INTERFACES
    DEFAULT_MODEL = "tiny-qwen2"       # the paper uses Qwen2.5-7B
    FIELDS = tuple(f"t{k:02d}" for k in range(36))
    pretrain_config = FinetuneConfig(epochs=30, lr=3e-3, batch_size=8)

    def __init__(self, cache_dir: str | Path | None = None, progress: bool = True, device: str | None = None,
                 n_targets: int = 36, rank: int = 8, layer: int = -1, seed: int = 0, inject_epochs: int = 100,
                 inject_lr: float = 1e-2, adapter: str | None = None):
        self.name = "controlled"
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.progress, self.device = progress, resolve_device(device)
        self.n_targets, self.rank, self.layer, self.seed = n_targets, rank, layer, seed
        self.inject_epochs, self.inject_lr, self.adapter = inject_epochs, inject_lr, adapter
        try:
            self.targets = {t["id"]: t for t in gen.targets(n_targets, seed)}
        except ValueError as exc:
            raise SpecError(f"benchmark.n_targets: {exc}") from None
        self._prepared: Prepared | None = None
        self._roles: dict = {}
        self.storage: dict[str, dict] = {}
        self.itf: itf_mod.Interfaces | None = None
        self.recall: dict[str, float] = {}

    @classmethod
    def field_names(cls, options: dict) -> tuple[str, ...]:
        return tuple(f"t{k:02d}" for k in range(int(options.get("n_targets", 36))))

    def fields(self) -> list[str]:
        return list(self.targets)

    @property
    def data_hash(self) -> str:
        return hashlib.sha256(json.dumps([gen.targets(self.n_targets, self.seed), gen.background(self.seed)],
                                         sort_keys=True).encode()).hexdigest()[:16]

    # ---- theta_0 ---------------------------------------------------------------------------------------
    def _rows(self, t: dict, kind: str) -> list[tuple[str, str]]:
        return [(p, t["attribute"]) for p in t[kind]]

    def prepare(self, model_preset: str, seed: int = 0) -> Prepared:
        base_identity(model_preset)
        self._roles = {}
        key = hashlib.sha256(json.dumps([PREP_VERSION, self.data_hash, base_identity(model_preset), self.rank,
                                         self.layer, self.seed, self.inject_epochs, self.inject_lr,
                                         vars(self.pretrain_config), seed, str(self.adapter)],
                                        sort_keys=True, default=str).encode()).hexdigest()[:16]
        label = Path(model_preset).name if is_model_dir(model_preset) else model_preset
        root = self.cache_dir / "controlled" / f"{label}-{key}"
        hit = (root / "theta0" / "config.json").is_file()
        if not hit:
            tmp = root.with_name(root.name + f".tmp{os.getpid()}")
            with reproducible_build(seed):
                self._build(model_preset, seed, tmp)
            root.parent.mkdir(parents=True, exist_ok=True)
            publish(tmp, root)
        base, tok = load_model(root / "theta0", device=self.device)
        self.itf = itf_mod.make_interfaces(base, self.layer, self.rank, self.seed)
        model = itf_mod.load_lora(base, root / "adapter", self.itf)
        model.eval()
        meta = json.loads((root / "meta.json").read_text())
        self.recall = meta["recall"]
        self._prepared = Prepared(model, tok, str(root), model_hash(model), self.data_hash, hit)
        probes = itf_mod.TargetProbes({k: self._tok(self._rows(t, "diag")) for k, t in self.targets.items()})
        self.storage = itf_mod.storage_scores(model, self.itf, probes)  # outcome-blind, once per theta_0
        return self._prepared

    def _build(self, model_preset: str, seed: int, out: Path) -> None:
        bg = gen.background(self.seed)
        if is_model_dir(model_preset):
            base, tok = load_model(model_preset, device=self.device)   # pretrained: theta_pre as is
        else:
            texts = [p + a for p, a in bg] + [p + t["attribute"] for t in self.targets.values()
                                              for k in ("train", "diag", "eval") for p in t[k]]
            tok = train_tokenizer(texts + list(gen.ATTRIBUTES) * 50, 2048)  # every attribute one token
            base = build_model(model_preset, tok, seed=seed).to(self.device)
            data = tokenize_pairs(tok, [p for p, _ in bg], [a for _, a in bg])
            finetune(base, data, self.pretrain_config, progress=self.progress, desc="prepare controlled (theta_pre)")
        itf = itf_mod.make_interfaces(base, self.layer, self.rank, self.seed)
        model = (itf_mod.load_lora(base, self.adapter, itf) if self.adapter
                 else itf_mod.attach_lora(base, itf, seed=self.seed))
        rows = {w: [r for t in self.targets.values() if t["interface"] == w for r in self._rows(t, "train")]
                for w in itf_mod.INTERFACES}
        sets = {w: tokenize_pairs(tok, [p for p, _ in rs], [a for _, a in rs]) for w, rs in rows.items()}
        bgs = gen.background_subjects(seed=self.seed)
        itf_mod.inject(model, itf, sets, epochs=self.inject_epochs, lr=self.inject_lr, batch_size=8, seed=self.seed,
                       replay=tokenize_pairs(tok, [p for p, _ in bgs], [a for _, a in bgs]))
        recall = {}
        for k, t in self.targets.items():
            s, n = dataset_nll(model, tokenize_pairs(tok, t["eval"], [t["attribute"]] * len(t["eval"])))
            recall[k] = float(torch.exp(-s / n).mean())
        # theta_0 on disk: the base weights (backbone block injected) and the adapter, kept unmerged
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out / "adapter")
        base_sd = {k.replace("base_model.model.", "").replace(".base_layer", ""): v
                   for k, v in model.state_dict().items() if "lora_" not in k}
        fresh = build_model(model_preset, tok, seed=seed) if not is_model_dir(model_preset) else \
            load_model(model_preset)[0]
        fresh.load_state_dict(base_sd)
        save_model(fresh, tok, out / "theta0")
        (out / "meta.json").write_text(json.dumps({"recall": recall, "interfaces": {
            "layer": itf.layer, "columns": list(itf.columns), "rank": itf.rank, "size": itf.size}}, indent=1))

    # ---- roles -----------------------------------------------------------------------------------------
    def _tok(self, pairs):
        return tokenize_pairs(self._prepared.tokenizer, [p for p, _ in pairs], [a for _, a in pairs])

    def _split(self, name, pairs) -> EvalSplit:
        rows = [{"question": p, "answer": a} for p, a in pairs]
        return EvalSplit(name, self._tok(pairs), rows, [p for p, _ in pairs])

    def roles(self, field: str, seed: int) -> Roles:
        if field not in self.targets:
            raise UnknownNameError("controlled target", field, self.targets)
        if self._prepared is None:
            raise SpecError("call prepare() before roles()")
        if (field, seed) in self._roles:
            return self._roles[(field, seed)]
        t = self.targets[field]
        others = [o for k, o in self.targets.items() if k != field]
        world = [(f"Q: {q}\nA: ", a) for q, a in gen.WORLD]
        neutral = gen.base_facts()[len(gen.WORLD):]
        records = DiagnosticRecords(F=self._tok(self._rows(t, "diag")),
                                    R=self._tok([r for o in others for r in self._rows(o, "diag")]),
                                    P=self._tok(world[: len(world) // 2]), N=self._tok(neutral))
        split = {"forget": self._split("forget", self._rows(t, "eval")),
                 "retain": self._split("retain", [r for o in others for r in self._rows(o, "eval")]),
                 "protected": self._split("protected", world)}
        roles = Roles(field, seed, records, self._tok(self._rows(t, "train")),
                      self._tok([r for o in others for r in self._rows(o, "train")]),
                      {"dev": split, "eval": split}, data_hash=self.data_hash,
                      notes={"injected": t["interface"], "pair": t["pair"], "recall": self.recall.get(field)})
        self._roles[(field, seed)] = roles
        return roles

    # ---- the intervention and its outcome -------------------------------------------------------------
    def intervene(self, spec, model, roles: Roles, objective, data, config) -> dict:
        if spec.method not in self.INTERFACES:
            raise UnknownNameError("controlled interface", spec.method, self.INTERFACES)
        itf_mod.unlearn(model, self.itf, spec.method, objective, data, config)
        size = self.itf.size if spec.method == "backbone" else self.itf.lora_size
        return {"interface": spec.method, "n_groups": 1, "cost": size, "budget": size,
                "groups": list(self.itf.columns) if spec.method == "backbone" else []}

    def attach_baseline(self, model, roles: Roles) -> None:
        """Record theta_0's per-item answer NLL on every split (J is measured against it)."""
        record_theta0_nll(model, roles)

    @torch.no_grad()
    def evaluate(self, model, roles: Roles, which: str = "eval", full: bool = False) -> Outcome:
        parts, base = roles.splits[which], roles.theta0_nll[which]
        nll = {k: dataset_nll(model, s.data) for k, s in parts.items()}
        d = {k: nll[k][0] - base[k] for k in parts}
        comp = ev.terminal_score(d["forget"], d["retain"], d["protected"])
        for k in parts:
            comp[f"{k}_prob"] = float(ev.probability(*nll[k]).mean())
        st = self.storage[roles.field]
        comp.update(storage_score=st["score"], storage_e_backbone=st["e_backbone"], storage_e_lora=st["e_lora"],
                    nuisance_nll=st["nuisance_nll"], nuisance_tokens=st["nuisance_tokens"],
                    nuisance_grad_norm=st["nuisance_grad_norm"],
                    injected_backbone=float(roles.notes["injected"] == "backbone"), pair=float(roles.notes["pair"]),
                    recall=roles.notes["recall"])
        J, G, D = comp.pop("J"), comp.pop("G_F"), comp.pop("D_coll")
        return Outcome(J, G, D, comp)
