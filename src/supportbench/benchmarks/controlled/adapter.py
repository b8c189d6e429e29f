"""The controlled separation of localization and intervention (paper §5.2, Table 1); construction
defined here (docs/benchmarks.md, "Controlled separation").

theta_pre: a tiny Qwen2 preset trained on background text (world facts, neutral sentences, 300
background subjects with their attributes, every target's name without its attribute), or a local
model folder as is. Interfaces (``interfaces.py``): a seeded block of one layer's MLP neurons
(backbone) and a LoRA of equal size on the same layer's down-projection. Injection: the backbone's
           targets into the block, then the LoRA's targets
into the LoRA (keeping the backbone's); theta_0 = the injected model (LoRA unmerged). Cached.

A *field* is a target (``t00`` ... ``t35``); a run's *method* is an interface (``backbone`` or
``lora``): the intervention trains the objective restricted to that interface with the same batches,
steps, learning rate, optimizer and seed. J is the project's: G_F = NLL increase on the target's
evaluation phrasings; D_coll from the other targets' evaluation phrasings (retain) and the world
facts (protected); beside it the bounded J (``evaluators.bounded_terminal_score``, from answer
probabilities). Components recorded with every run: every registered locator's outcome-blind score
(``locators/``, computed once from theta_0, the diagnostic phrasings and the background subjects) as
``locator:<name>``, the primary locator's as ``storage_score``, ``injected_backbone``, its blind
``pair`` and the nuisance covariates.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from supportbench._options import option
from supportbench.benchmarks import evaluators as ev
from supportbench.benchmarks.base import (
    EvalSplit,
    Outcome,
    Prepared,
    Roles,
    build_code,
    building,
    check_disjoint,
    content_key,
    default_cache_dir,
    j_components,
    j_items,
    register_benchmark,
    require_prepared,
    to_outcome,
)
from supportbench.benchmarks.controlled import generator as gen
from supportbench.benchmarks.controlled import interfaces as itf_mod
from supportbench.benchmarks.controlled.locators import LOCATORS, LocatorInputs, locate_all
from supportbench.benchmarks.controlled.locators.first_order import first_order_terms
from supportbench.errors import SpecError, UnknownNameError
from supportbench.experiments.controlled_decision import auroc
from supportbench.experiments.identity import content_identity
from supportbench.experiments.spec import DEFAULT_MODELS
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
from supportbench.unlearning.relearn import Probe, RelearnSet
from supportbench.unlearning.train import FinetuneConfig, finetune

# v2: built reproducibly (seeded LoRA init, one thread); v3: 300 background subjects and target
# mentions in theta_pre, a block of whole neurons, injection in two phases (docs/benchmarks.md)
PREP_VERSION = "controlled-prepare-v3"


@register_benchmark("controlled")
class Controlled:
    DEFAULT_MODEL = DEFAULT_MODELS["controlled"]  # the paper uses Qwen2.5-7B
    DEFAULT_FIELD = "t00"
    # a run's method is the interface it unlearns through (intervene)
    INTERFACES = itf_mod.INTERFACES
    pretrain_config = FinetuneConfig(epochs=30, lr=3e-3, batch_size=8)

    def __init__(
        self,
        cache_dir: str | Path | None = None,
        progress: bool = True,
        device: str | None = None,
        n_targets: option(
            int, ge=2, le=1000, doc="final targets (an even number: blind pairs)"
        ) = 36,
        rank: option(int, ge=1, le=4096, doc="the LoRA's rank (sets both interfaces' size)") = 12,
        layer: option(
            int, ge=-1024, le=1023, doc="the layer of both interfaces (-1: the last)"
        ) = -1,
        build: int = 0,
        inject_epochs: option(int, ge=1, le=100_000, doc="epochs of each injection phase") = 100,
        inject_lr: option(float, gt=0, le=1, doc="the injections' learning rate") = 1e-2,
        adapter: option(
            str | None, doc="a ready LoRA adapter folder (identified by content)"
        ) = None,
        primary_locator: option(
            str, doc="the locator whose score is storage_score"
        ) = "first_order",
        n_calibration_targets: option(
            int, ge=0, le=1000, doc="targets for the frozen decision"
        ) = 12,
        decision: option(
            str | None, doc="the frozen controlled decision's hash (set by it)"
        ) = None,
    ):
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.progress, self.device = progress, resolve_device(device)
        # the build seeds the whole construction: targets, pairs, background, interfaces, LoRA init,
        # theta_pre
        self.n_targets, self.rank, self.layer, self.build = n_targets, rank, layer, int(build)
        seed = self.build
        self.inject_epochs, self.inject_lr, self.adapter = inject_epochs, inject_lr, adapter
        LOCATORS.get(primary_locator)  # an unknown name fails here, before any work
        # its score is the record's storage_score (Table 1's)
        self.primary_locator = primary_locator
        try:
            self.targets = {t["id"]: t for t in gen.targets(n_targets, seed)}
        except ValueError as exc:
            raise SpecError(f"benchmark.n_targets: {exc}") from None
        # calibration targets c00 ...: injected into the same theta_0, never a final field; only the
        # frozen controlled decision reads them (experiments.controlled_decision)
        self.n_calibration = n_calibration_targets
        try:
            self.calibration = {
                t["id"]: t for t in gen.calibration_targets(n_calibration_targets, n_targets, seed)
            }
        except ValueError as exc:
            raise SpecError(f"benchmark.n_calibration_targets: {exc}") from None
        self.all_targets = {**self.targets, **self.calibration}
        # the calibration attributes join pretraining through one background subject each
        # (generator)
        self._extra = tuple(t["attribute"] for t in self.calibration.values())
        # the frozen controlled decision these runs follow (its hash; informational)
        self.decision = decision
        self._prepared: Prepared | None = None
        self._roles: dict = {}
        self.locator_scores: dict[str, dict[str, float]] = {}  # locator -> target -> signed score
        # the same on the calibration targets
        self.calibration_locator_scores: dict[str, dict[str, float]] = {}
        # target -> first-order terms, nuisance covariates
        self.terms: dict[str, dict[str, float]] = {}
        self.itf: itf_mod.Interfaces | None = None
        self.recall: dict[str, float] = {}

    @classmethod
    def field_names(cls, options: dict) -> tuple[str, ...]:
        """The targets t00 ... of ``benchmark.n_targets`` (default 36), then the calibration targets
        c00 ... of ``benchmark.n_calibration_targets`` (default 12; runs only for the frozen
        decision)."""
        return tuple(
            f"t{k:02d}" for k in range(int(options.get("n_targets", 36)))
        ) + cls.calibration_fields(options)

    @classmethod
    def check_inputs(cls, options: dict, field: str, settings: dict) -> None:
        """The controlled separation generates its data; its targets come in blind pairs; a given
        adapter must be a folder."""
        n = options.get("n_targets", 36)
        if isinstance(n, int) and not isinstance(n, bool) and n % 2:
            raise SpecError(
                "benchmark.n_targets: targets come in blind pairs: n_targets must be a positive "
                f"even number, got {n}"
            )
        adapter = options.get("adapter")
        if adapter is not None and not Path(adapter).is_dir():
            raise SpecError(f"benchmark.adapter '{adapter}' is not a folder (a saved LoRA adapter)")

    @classmethod
    def calibration_fields(cls, options: dict) -> tuple[str, ...]:
        """The calibration targets: never a final field (Table 1 reads only the others)."""
        return tuple(f"c{k:02d}" for k in range(int(options.get("n_calibration_targets", 12))))

    @property
    def data_hash(self) -> str:
        cal = [list(self.calibration.values())] if self.calibration else []
        return content_key(gen.targets(self.n_targets, self.build), self._background(), *cal)

    def _background(self) -> list[tuple[str, str]]:
        """theta_pre's pretraining pairs (``generator.background``): every target's name is
        mentioned."""
        return gen.background(
            self.build, self._extra, mentioned=[t["subject"] for t in self.all_targets.values()]
        )

    # ---- theta_0 ---------------------------------------------------------------------------------
    def _rows(self, t: dict, kind: str) -> list[tuple[str, str]]:
        return [(p, t["attribute"]) for p in t[kind]]

    def prepare(self, model_preset: str) -> Prepared:
        base_identity(model_preset)
        seed = self.build
        self._roles = {}
        key = content_key(
            PREP_VERSION,
            build_code(type(self)),
            self.data_hash,
            base_identity(model_preset),
            self.rank,
            self.layer,
            self.build,
            self.n_calibration,
            self.inject_epochs,
            self.inject_lr,
            vars(self.pretrain_config),
            seed,
            content_identity(self.adapter, "benchmark.adapter") if self.adapter else "None",
        )
        label = Path(model_preset).name if is_model_dir(model_preset) else model_preset
        root = self.cache_dir / "controlled" / f"{label}-{key}"
        hit = (root / "theta0" / "config.json").is_file()
        if not hit:
            with building(root) as tmp, reproducible_build(seed):
                self._build(model_preset, seed, tmp)
        base, tok = load_model(root / "theta0", device=self.device)
        self.itf = itf_mod.make_interfaces(base, self.layer, self.rank, self.build)
        model = itf_mod.load_lora(base, root / "adapter", self.itf)
        model.eval()
        meta = json.loads((root / "meta.json").read_text())
        self.recall = meta["recall"]
        self._prepared = Prepared(model, tok, str(root), model_hash(model), self.data_hash, hit)
        # outcome-blind, once per theta_0: no run exists yet, and the locators see only these inputs
        itf_mod._freeze(model)
        background = self._tok(
            gen.background_subjects(
                seed=self.build, phrasings=gen.DIAG, extra_attributes=self._extra
            )
        )
        self.terms = {}
        # final and calibration targets located apart: a locator that standardises across targets
        # never mixes them
        for targets, attr in (
            (self.targets, "locator_scores"),
            (self.calibration, "calibration_locator_scores"),
        ):
            if not targets:
                setattr(self, attr, {})
                continue
            probes = itf_mod.TargetProbes(
                {k: self._tok(self._rows(t, "diag")) for k, t in targets.items()}
            )
            setattr(self, attr, locate_all(model, self.itf, LocatorInputs(probes, background)))
            self.terms.update(first_order_terms(model, self.itf, probes))
        return self._prepared

    def calibration_aurocs(self) -> dict[str, float | None]:
        """Every locator's localization AUROC on the calibration targets (label: injected through
        the backbone; a signed score > 0 points to the backbone): construction data, read before any
        unlearning run."""
        require_prepared(self._prepared, "calibration_aurocs()")
        keys = sorted(self.calibration)
        y = [int(self.calibration[k]["interface"] == "backbone") for k in keys]
        return {
            name: auroc([s[k] for k in keys], y)
            for name, s in sorted(self.calibration_locator_scores.items())
        }

    def _build(self, model_preset: str, seed: int, out: Path) -> None:
        bg = self._background()
        if is_model_dir(model_preset):
            base, tok = load_model(model_preset, device=self.device)  # pretrained: theta_pre as is
        else:
            texts = [p + a for p, a in bg] + [
                p + t["attribute"]
                for t in self.all_targets.values()
                for k in ("train", "diag", "eval")
                for p in t[k]
            ]
            attrs = gen.ATTRIBUTES + (gen.CALIBRATION_ATTRIBUTES if self.calibration else [])
            tok = train_tokenizer(texts + list(attrs) * 50, 2048)  # every attribute one token
            base = build_model(model_preset, tok, seed=seed).to(self.device)
            data = tokenize_pairs(tok, [p for p, _ in bg], [a for _, a in bg])
            finetune(
                base,
                data,
                self.pretrain_config,
                progress=self.progress,
                desc="prepare controlled (theta_pre)",
            )
        itf = itf_mod.make_interfaces(base, self.layer, self.rank, self.build)
        model = (
            itf_mod.load_lora(base, self.adapter, itf)
            if self.adapter
            else itf_mod.attach_lora(base, itf, seed=self.build)
        )
        rows = {
            w: [
                r
                for t in self.all_targets.values()
                if t["interface"] == w
                for r in self._rows(t, "train")
            ]
            for w in itf_mod.INTERFACES
        }
        sets = {
            w: tokenize_pairs(tok, [p for p, _ in rs], [a for _, a in rs]) for w, rs in rows.items()
        }
        bgs = gen.background_subjects(seed=self.build, extra_attributes=self._extra)
        itf_mod.inject(
            model,
            itf,
            sets,
            epochs=self.inject_epochs,
            lr=self.inject_lr,
            batch_size=8,
            seed=self.build,
            replay=tokenize_pairs(tok, [p for p, _ in bgs], [a for _, a in bgs]),
        )
        recall = {}
        for k, t in self.all_targets.items():
            s, n = dataset_nll(
                model, tokenize_pairs(tok, t["eval"], [t["attribute"]] * len(t["eval"]))
            )
            recall[k] = float(torch.exp(-s / n).mean())
        # theta_0 on disk: the base weights (backbone block injected) and the adapter, kept unmerged
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out / "adapter")
        base_sd = {
            k.replace("base_model.model.", "").replace(".base_layer", ""): v
            for k, v in model.state_dict().items()
            if "lora_" not in k
        }
        fresh = (
            build_model(model_preset, tok, seed=seed)
            if not is_model_dir(model_preset)
            else load_model(model_preset)[0]
        )
        fresh.load_state_dict(base_sd)
        save_model(fresh, tok, out / "theta0")
        (out / "meta.json").write_text(
            json.dumps(
                {
                    "recall": recall,
                    "interfaces": {
                        "layer": itf.layer,
                        "columns": list(itf.columns),
                        "rank": itf.rank,
                        "size": itf.size,
                    },
                },
                indent=1,
            )
        )

    # ---- roles -----------------------------------------------------------------------------------
    def _tok(self, pairs):
        return tokenize_pairs(
            self._prepared.tokenizer, [p for p, _ in pairs], [a for _, a in pairs]
        )

    def _split(self, name, pairs) -> EvalSplit:
        rows = [{"question": p, "answer": a} for p, a in pairs]
        return EvalSplit(name, self._tok(pairs), rows, [p for p, _ in pairs])

    def roles(self, field: str, seed: int) -> Roles:
        if field not in self.all_targets:
            raise UnknownNameError("controlled target", field, self.all_targets)
        require_prepared(self._prepared, "roles()")
        if (field, seed) in self._roles:
            return self._roles[(field, seed)]
        # a final target's retain set is the other final targets; a calibration target's, the other
        # calibration targets: nothing measured on a calibration target reads a final one
        group = self.calibration if field in self.calibration else self.targets
        t = group[field]
        others = [o for k, o in group.items() if k != field]
        world = [(f"Q: {q}\nA: ", a) for q, a in gen.WORLD]
        neutral = gen.base_facts()[len(gen.WORLD) :]
        records = DiagnosticRecords(
            F=self._tok(self._rows(t, "diag")),
            R=self._tok([r for o in others for r in self._rows(o, "diag")]),
            P=self._tok(world[: len(world) // 2]),
            N=self._tok(neutral),
        )
        split = {
            "forget": self._split("forget", self._rows(t, "eval")),
            "retain": self._split("retain", [r for o in others for r in self._rows(o, "eval")]),
            "protected": self._split("protected", world),
        }
        # F and R
        diag = [
            {"question": p, "answer": a} for o in (t, *others) for p, a in self._rows(o, "diag")
        ]
        check_disjoint(field, diag, {"eval": split})  # dev is the same split
        roles = Roles(
            field,
            seed,
            records,
            self._tok(self._rows(t, "train")),
            self._tok([r for o in others for r in self._rows(o, "train")]),
            {"dev": split, "eval": split},
            data_hash=self.data_hash,
            notes={"injected": t["interface"], "pair": t["pair"], "recall": self.recall.get(field)},
        )
        self._roles[(field, seed)] = roles
        return roles

    def relearn_set(self, roles: Roles) -> RelearnSet:
        """The relearning attack on the controlled separation: the attacker fine-tunes on the
        background subjects' facts in the targets' training phrasings (theta_pre's pretraining
        subjects: no run's role reads them); the unit is the run's target, probed by its evaluation
        phrasings, its attribute the target string."""
        require_prepared(self._prepared, "relearn_set()")
        pairs = gen.background_subjects(
            seed=self.build, phrasings=gen.TRAIN, extra_attributes=self._extra
        )
        split = roles.splits["eval"]["forget"]
        tok = self._prepared.tokenizer
        return RelearnSet(
            train=self._tok(pairs),
            probes=(Probe(roles.field, tuple(split.prompts), split.rows[0]["answer"].strip()),),
            generate=lambda model, prompts: ev.greedy_answers(model, tok, prompts, 8),
        )

    # ---- the intervention and its outcome --------------------------------------------------------
    def intervene(self, spec, model, roles: Roles, objective, data, config, on_step=None) -> dict:
        if spec.method not in self.INTERFACES:
            raise UnknownNameError("controlled interface", spec.method, self.INTERFACES)
        itf_mod.unlearn(model, self.itf, spec.method, objective, data, config, on_step)
        size = self.itf.size if spec.method == "backbone" else self.itf.lora_size
        return {
            "interface": spec.method,
            "n_groups": 1,
            "cost": size,
            "budget": size,
            "groups": list(self.itf.columns) if spec.method == "backbone" else [],
        }

    def allowed(self, model, method: str) -> dict[str, torch.Tensor]:
        """What an intervention through ``method`` may change (``interfaces.allowed``)."""
        return itf_mod.allowed(model, self.itf, method)

    @torch.no_grad()
    def evaluate(self, model, roles: Roles, which: str = "eval", full: bool = False) -> Outcome:
        comp, nll = j_components(model, roles, which, allowed=("dev", "eval"))
        base = roles.theta0_nll[which]
        drop = {k: ev.probability(base[k], n) - ev.probability(s, n) for k, (s, n) in nll.items()}
        comp.update(ev.bounded_terminal_score(drop["forget"], drop["retain"], drop["protected"]))
        t, k = self.terms[roles.field], roles.field
        located = self.calibration_locator_scores if k in self.calibration else self.locator_scores
        comp.update({f"locator:{name}": scores[k] for name, scores in located.items()})
        # theta_0's diagnostic NLL encodes the label (the backbone holds its targets more weakly):
        # see reports.stats.covariate_aurocs before reading a residualized AUROC
        comp.update(
            storage_score=located[self.primary_locator][k],
            first_order_e_backbone=t["e_backbone"],
            first_order_e_lora=t["e_lora"],
            nuisance_nll=t["nll"],
            nuisance_grad_norm=t["grad_norm"],
            injected_backbone=float(roles.notes["injected"] == "backbone"),
            pair=float(roles.notes["pair"]),
            recall=roles.notes["recall"],
        )
        return to_outcome(comp, j_items(roles, which, nll))
