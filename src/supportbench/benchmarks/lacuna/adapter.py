"""LACUNA (paper §5.4): person-PII facts injected through known parameter masks; J and localization
precision.

Two ways in (docs/benchmarks.md):
* **Real artifacts** — ``benchmark.data_dir`` = the data folder or the artifact root
  (``reader.resolve_layout``); the run's ``model`` is the instruction-tuned folder
  (``intruction_tuned/``), theta_0 as is; ``mask.pt`` is read from the regime folder (or
  ``benchmark.mask``). Nothing is written into the artifacts.
* **Mini** (a preset model, the default) — ``generator`` writes people and parquet files in
  upstream's format and builds ``mask.pt``. The preset is first pretrained on background people
  (same format, other names) and neutral text (theta_pre, all parameters: upstream starts from a
  pretrained OLMo), then the facts are injected by masked continual pretraining
  (``unlearning.train.masked_finetune``): each micro-batch of group g's facts updates only the
  scalars whose bit g is set, neutral text updates everything. theta_0 = the result. Data, mask,
  theta_pre and theta_0 are cached by content.

Roles for field F and seed s (disjoint by construction: diagnostics use each person's first
question, dev/eval the other one):
  F        ``F_forget`` rows (also the unlearning train set)
  forget dev/eval   ``F_forget_paraphrased`` rows, split by a seeded hash of the person ID (1/3 dev,
                    2/3 eval)
  R        ``G_retain`` rows with G = the paired field (Email→Birth City, Birth City→Email,
           Phone→Birth City, Driver's License→Email); retain dev/eval from
           ``G_retain_paraphrased``; retain train set = ``G_retain``
  P        retain people of the two remaining fields (``*_retain``); protected dev/eval from their
           paraphrases
  N        neutral sentences
J = G_F − D_coll exactly as TOFU's (``evaluators.terminal_score``). Components:
forget/retain/protected probability; localization precision (ROC-AUC and precision@{0.1, 1, 5, 10}%
of |W − W_theta0| against the forget-group bits and the all-group bits); with ``eval_full``:
ROUGE-L recall, exact memorization and extraction strength on the plain and paraphrased
forget/retain splits.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, replace
from pathlib import Path
from typing import Literal

import torch

from supportbench._options import option
from supportbench.benchmarks import base, saved
from supportbench.benchmarks import evaluators as ev
from supportbench.benchmarks.base import EvalSplit, Prepared, Roles, register_benchmark
from supportbench.benchmarks.lacuna import generator as gen
from supportbench.benchmarks.lacuna import precision as prec
from supportbench.benchmarks.lacuna.reader import (
    FIELDS,
    RETAIN_PAIR,
    check_field,
    check_groups_have_bits,
    group_bits,
    load_mask,
    read_split,
    resolve_layout,
    scored,
    tensor_reader,
)
from supportbench.errors import SpecError
from supportbench.experiments.spec import DEFAULT_MODELS
from supportbench.unlearning import models
from supportbench.unlearning.data import (
    DiagnosticRecords,
    TokenizedSet,
    concat_sets,
    tokenize_pairs,
    tokenize_qa,
)
from supportbench.unlearning.formats import (
    LACUNA_TAGS,
    LacunaInstructionFormat,
    OpenUnlearningFormat,
)
from supportbench.unlearning.relearn import Probe, RelearnSet
from supportbench.unlearning.train import FinetuneConfig, finetune, masked_finetune

# v2: built reproducibly (one thread); v3: upstream's text formats;
# v4: isolated groups (group dropout, unowned scalars frozen, 120 epochs)
PREP_VERSION = "lacuna-prepare-v4"
# the text formats (unlearning/formats.py; docs/upstream-formats.md): LACUNA's instruction tuning
# for what theta_0 learns, J and the diagnostics (relearning: the same on raw values);
# open-unlearning's QA rows (LACUNA's tags, joint tokens, EOS) for the unlearning sets, the
# behavioural metrics (exact memorization, extraction strength, ROUGE-L) and generation prompts
INSTRUCTION = LacunaInstructionFormat()
RELEARN = LacunaInstructionFormat(panorama=False)
EVALUATION = OpenUnlearningFormat(LACUNA_TAGS)
ALL_GROUPS = range(gen.N_GROUPS)


@register_benchmark("lacuna")
class Lacuna:
    DEFAULT_MODEL = DEFAULT_MODELS["lacuna"]  # the paper uses OLMo 3 7B
    DEFAULT_FIELD = "Email_Address"
    INTERFACES = ()  # runs score and train a support
    FIELDS = FIELDS
    # mini: the preset learns the PII facts from scratch through its masks (AdamW, upstream's weight
    # decay 0.1). 120 epochs with group dropout 0.25 and unowned scalars frozen: the first setting
    # of bench/lacuna_isolation.py's grid (least intervention first) that passes both construction
    # gates (every group isolated, ratio < 0.1, and memorised, NLL < 0.5), measured on theta_pre and
    # theta_0 alone (docs/benchmarks.md); no unlearning outcome
    finetune_config = FinetuneConfig(epochs=120, lr=3e-3, batch_size=8, weight_decay=0.1)
    pretrain_config = FinetuneConfig(epochs=30, lr=3e-3, batch_size=16, weight_decay=0.1)

    def __init__(
        self,
        data_dir: option(
            str | None, doc="LACUNA's artifact root or data folder; none: generated here"
        ) = None,
        cache_dir: str | Path | None = None,
        progress: bool = True,
        device: str | None = None,
        people: option(int, ge=6, le=100_000, doc="generated people per field") = 24,
        mask_mode: option(
            Literal["element", "component"], doc="the generated masks' unit"
        ) = "element",
        mask_ratio: option(float, gt=0, le=1, doc="share of scalars each group's mask owns") = 0.1,
        mask: option(str | None, doc="a mask.pt to use (identified by content)") = None,
        lacuna_size: option(str | None, doc="the model-size folder of the artifact root") = None,
        regime: option(Literal["masked", "unmasked"], doc="the artifact regime") = "masked",
        forget_groups: option(
            tuple[int, ...], doc="the groups whose facts are forgotten"
        ) = gen.FORGET_GROUPS,
        max_new_tokens: option(int, ge=1, le=4096, unit="tokens", doc="generation length") = 24,
        precision_max_exact: option(
            int, ge=1, unit="scalars", doc="largest tensor ranked exactly for precision"
        ) = 1 << 24,
        finetune: option(
            dict | None, doc="the injection recipe: benchmark.finetune.<option>"
        ) = None,
        build: int = 0,
        group_dropout: option(
            float,
            ge=0,
            lt=1,
            doc="probability of dropping another group's delta in a group's injection step",
        ) = 0.25,
        unowned_frozen: option(
            bool, doc="scalars no group owns never move in the injection"
        ) = True,
    ):
        if mask_mode not in ("element", "component"):
            raise SpecError(
                f"benchmark.mask_mode must be 'element' or 'component', got {mask_mode!r}"
            )
        self.cache_dir = Path(cache_dir) if cache_dir else base.default_cache_dir()
        self.progress = progress
        self.device = models.resolve_device(device)
        # the build seeds the construction: generated people, masks, theta_pre's initialisation and
        # batch order
        self.people, self.mask_mode, self.mask_ratio, self.build = (
            people,
            mask_mode,
            mask_ratio,
            int(build),
        )
        self.max_new_tokens, self.precision_max_exact = max_new_tokens, precision_max_exact
        self.forget_groups = tuple(int(g) for g in forget_groups)
        if not 0.0 <= group_dropout < 1.0:
            raise SpecError(f"benchmark.group_dropout must be in [0, 1), got {group_dropout!r}")
        self.group_dropout, self.unowned_frozen = float(group_dropout), bool(unowned_frozen)
        if finetune:
            known = set(asdict(self.finetune_config))
            bad = set(finetune) - known
            if bad:
                raise SpecError(
                    f"unknown fine-tuning option(s) {sorted(bad)}; allowed: {sorted(known)}"
                )
            self.finetune_config = replace(self.finetune_config, **finetune)
        self.layout = resolve_layout(data_dir, lacuna_size, regime) if data_dir else None
        self.mask_file = Path(mask) if mask else (self.layout.mask_path if self.layout else None)
        if (
            data_dir
            and not mask
            and self.mask_file is not None
            and not self.mask_file.resolve().is_relative_to(Path(data_dir).resolve())
        ):
            # a run is known by the content of the paths it names: a mask found outside them would
            # not be
            raise SpecError(
                f"LACUNA would read the mask from '{self.mask_file}', outside benchmark.data_dir "
                f"'{data_dir}': name it with benchmark.mask={self.mask_file} (so that its content "
                "is part of the run's identity), or set benchmark.data_dir to the artifact root"
            )
        self._prepared: Prepared | None = None
        self._mask: dict | None = None
        self._data_dir: Path | None = self.layout.data_dir if self.layout else None
        self._roles: dict = {}
        self._rows: dict = {}

    @classmethod
    def field_names(cls, options: dict) -> tuple[str, ...]:
        """The fields a run may name (checked before any work); the same for every option."""
        return FIELDS

    @classmethod
    def check_inputs(cls, options: dict, field: str, settings: dict) -> None:
        """A given artifact root's layout and the splits a run of ``field`` reads (every file
        parsed: an empty or truncated one is named); a given mask file must exist."""
        data_dir = options.get("data_dir")
        if data_dir is not None:
            layout = resolve_layout(
                data_dir, options.get("lacuna_size"), options.get("regime", "masked")
            )
            for f in FIELDS:
                for split in (
                    "full",
                    "forget",
                    "retain",
                    "forget_paraphrased",
                    "retain_paraphrased",
                ):
                    read_split(layout.data_dir, f, split)
        mask = options.get("mask")
        if mask is not None and not Path(mask).is_file():
            raise SpecError(f"benchmark.mask '{mask}' is not a file (LACUNA's mask.pt)")

    # ---- data ------------------------------------------------------------------------------------
    def rows(self, field: str, split: str) -> list[dict]:
        key = (field, split)
        if key not in self._rows:
            self._rows[key] = read_split(self._data_dir, field, split)
        return self._rows[key]

    def neutral_texts(self) -> list[str]:
        p = self._data_dir / "neutral.txt" if self._data_dir else None
        texts = p.read_text().splitlines() if p is not None and p.is_file() else []
        return [t for t in texts if t.strip()] or list(gen.NEUTRAL)

    @property
    def data_hash(self) -> str:
        h = hashlib.sha256()
        d = self._data_dir
        files = [*d.glob("*.parquet"), *filter(saved.is_saved, d.iterdir())]
        for f in sorted(files):
            h.update(f.name.encode())
            h.update(saved.content_bytes(f))
        return h.hexdigest()[:16]

    # ---- theta_0 ---------------------------------------------------------------------------------
    def prepare(self, model_preset: str) -> Prepared:
        models.base_identity(model_preset)  # an unknown name fails here, before any data is read
        self._roles = {}
        if models.is_model_dir(model_preset):
            if self.layout is None:
                raise SpecError(
                    "LACUNA with a local model needs benchmark.data_dir "
                    "(the artifact root or data folder)"
                )
            if self.mask_file is None:
                raise SpecError(
                    f"no mask.pt next to '{self.layout.data_dir}': set benchmark.mask to its path"
                )
            model, tok = models.load_model(model_preset, device=self.device)
            path, hit = Path(model_preset), True
        else:
            model, tok, path, hit = self._mini(model_preset, self.build)
        params = {n: p for n, p in model.named_parameters()}
        self._mask = load_mask(self.mask_file, params)
        self._prepared = Prepared(
            model, tok, str(path), models.model_hash(model), self.data_hash, hit
        )
        return self._prepared

    def _mini(self, preset: str, seed: int):
        key = base.content_key(
            PREP_VERSION,
            base.build_code(type(self)),
            gen.VERSION,
            self.people,
            self.build,
            models.base_identity(preset),
            self.mask_mode,
            self.mask_ratio,
            asdict(self.finetune_config),
            asdict(self.pretrain_config),
            seed,
            self.group_dropout,
            self.unowned_frozen,
        )
        root = self.cache_dir / "lacuna" / f"{preset}-{key}"
        data, model_dir = root / "data-masked" / "data", root / "masked"
        if not (model_dir / "config.json").is_file() or not (model_dir / "mask.pt").is_file():
            with base.building(root) as tmp:
                gen.generate(tmp / "data-masked" / "data", people=self.people, seed=self.build)
                self._data_dir = tmp / "data-masked" / "data"
                with models.reproducible_build(seed):
                    net, tok = self._inject(preset, seed, tmp / "masked", tmp / "pretrained")
                models.save_model(net, tok, tmp / "masked")
            hit = False
        else:
            hit = True
        self._data_dir, self._rows, self._pre_dir = data, {}, root / "pretrained"
        self.mask_file = model_dir / "mask.pt"
        model, tok = models.load_model(model_dir, device=self.device)
        return model, tok, model_dir, hit

    def _neutral_pairs(self) -> list[tuple[str, str]]:
        return [
            (" ".join(t.split(" ")[:3]) + " ", " ".join(t.split(" ")[3:]))
            for t in self.neutral_texts()
        ]

    def _inject(self, preset: str, seed: int, out: Path, pre_dir: Path):
        background = gen.background_rows(seed=self.build)
        texts = [r["question"] + " " + r["answer"] for f in FIELDS for r in self.rows(f, "full")]
        texts += [r["question"] + " " + r["answer"] for r in background]
        tags = (
            LACUNA_TAGS.user_start_tag + "x" + LACUNA_TAGS.user_end_tag + LACUNA_TAGS.asst_start_tag
        )
        tok = models.train_tokenizer(texts + self.neutral_texts() + [tags], 2048)
        net = models.build_model(preset, tok, seed=seed).to(self.device)
        neutral = self._neutral_pairs()
        pre = self._with_neutral(tok, background, neutral)
        finetune(
            net,
            pre,
            self.pretrain_config,
            progress=self.progress,
            desc="prepare lacuna (pretraining)",
        )
        models.save_model(net, tok, pre_dir)  # theta_pre: the weights injection starts from
        mask = gen.build_mask(net, self.mask_mode, self.mask_ratio, seed=self.build)
        out.mkdir(parents=True, exist_ok=True)
        torch.save(mask, out / "mask.pt")
        facts = [r for f in FIELDS for r in self.rows(f, "full")]
        groups = [r["group_id"] for r in facts] + [-1] * len(neutral)
        data = self._with_neutral(tok, facts, neutral)
        masked_finetune(
            net,
            data,
            torch.tensor(groups),
            mask,
            self.finetune_config,
            progress=self.progress,
            desc=f"prepare lacuna ({self.mask_mode} masks)",
            group_dropout=self.group_dropout,
            unowned_frozen=self.unowned_frozen,
        )
        return net, tok

    def theta_pre(self):
        """The mini model before injection (the weights masked pretraining started from)."""
        if getattr(self, "_pre_dir", None) is None:
            raise SpecError(
                "theta_pre exists only for the mini benchmark (a preset model), after prepare()"
            )
        return models.load_model(self._pre_dir, device=self.device)[0]

    # ---- roles -----------------------------------------------------------------------------------
    @staticmethod
    def _qa(tok, rows: list[dict], subjects: bool = False, fmt=INSTRUCTION) -> TokenizedSet:
        """Rows in a QA format (default LACUNA's instruction format: what theta_0 learns and what J
        scores); ``subjects``: the person's name (the question's opening clause) as the subject
        span that the attribution diagnostics (AP-MLP, Projected Causal) corrupt."""
        subj = [r["question"].split(",")[0] for r in rows] if subjects else None
        return tokenize_qa(
            tok, fmt, [r["question"] for r in rows], [r["answer"] for r in rows], subjects=subj
        )

    def _with_neutral(self, tok, rows: list[dict], neutral: list[tuple[str, str]]) -> TokenizedSet:
        """``rows`` as QA records, then the neutral (prompt, continuation) pairs as raw text (no
        EOS): what pretraining and the injection train on."""
        pairs = tokenize_pairs(
            tok, [p for p, _ in neutral], [a for _, a in neutral], append_eos=False
        )
        return concat_sets([self._qa(tok, rows), pairs], tok.pad_token_id)

    def _tok(self, rows: list[dict], subjects: bool = False) -> TokenizedSet:
        return self._qa(self._prepared.tokenizer, rows, subjects)

    def _split(self, name: str, rows: list[dict]) -> EvalSplit:
        return EvalSplit(name, self._tok(rows), rows, [r["question"] for r in rows])

    @staticmethod
    def _dev_eval(rows: list[dict], seed: int) -> tuple[list[dict], list[dict]]:
        """Split by a seeded hash of the person ID: the third of the people with the smallest hashes
        go to development, the rest to evaluation (never an empty side when there are two people or
        more)."""

        def h(r):
            return hashlib.sha256(f"{seed}:{r['ID']}".encode()).hexdigest()

        ids = sorted({r["ID"] for r in rows}, key=lambda i: h({"ID": i}))
        dev = set(ids[: max(1, len(ids) // 3)]) if len(ids) > 1 else set()
        return [r for r in rows if r["ID"] in dev], [r for r in rows if r["ID"] not in dev]

    def roles(self, field: str, seed: int) -> Roles:
        check_field(field)
        base.require_prepared(self._prepared, "roles(): tokenisation uses theta_0's tokenizer")
        key = (field, seed)
        if key in self._roles:
            return self._roles[key]
        forget = self.rows(field, "forget")
        groups = sorted({r["group_id"] for r in forget})
        check_groups_have_bits(self._mask, groups, str(self.mask_file))
        pair = RETAIN_PAIR[field]
        retain = self.rows(pair, "retain")
        others = [f for f in FIELDS if f not in (field, pair)]
        protected = [r for f in others for r in self.rows(f, "retain")]
        f_dev, f_eval = self._dev_eval(self.rows(field, "forget_paraphrased"), seed)
        r_dev, r_eval = self._dev_eval(self.rows(pair, "retain_paraphrased"), seed)
        p_dev, p_eval = self._dev_eval(
            [r for f in others for r in self.rows(f, "retain_paraphrased")], seed
        )
        nd = self._neutral_pairs()
        records = DiagnosticRecords(
            F=self._tok(forget, True),
            R=self._tok(retain, True),
            P=self._tok(protected),
            N=tokenize_pairs(self._prepared.tokenizer, [p for p, _ in nd], [a for _, a in nd]),
        )
        splits = base.role_splits(
            self._split,
            dev=(f_dev, r_dev, p_dev),
            eval=(f_eval, r_eval, p_eval),
            plain=(forget, retain),
        )
        base.check_disjoint(
            field, forget + retain + protected, {w: splits[w] for w in ("dev", "eval")}
        )
        # unlearning trains on open-unlearning's QA rows (LACUNA runs its NPO/SimNPO/GradDiff
        # through open-unlearning's QADataset with its tags), not on the instruction format theta_0
        # learned
        train = {
            k: self._qa(self._prepared.tokenizer, rows, fmt=EVALUATION)
            for k, rows in (("forget", forget), ("retain", retain))
        }
        roles = Roles(
            field,
            seed,
            records,
            train["forget"],
            train["retain"],
            splits,
            data_hash=self.data_hash,
            notes={"forget_groups": groups, "retain_field": pair},
        )
        self._roles[key] = roles
        return roles

    # ---- evaluation ------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(
        self, model, roles: Roles, which: str = "eval", full: bool = False
    ) -> base.Outcome:
        # "plain" is diagnostic rows
        comp, nll = base.j_components(model, roles, which, allowed=("dev", "eval"))
        comp["evaluation_set"] = f"{which}: paraphrased questions"
        if which == "eval":
            comp.update(self.precision(model, roles))
        if full:
            comp.update(self._behaviour(model, roles))
        return base.to_outcome(comp, base.j_items(roles, which, nll))

    def _behaviour(self, model, roles: Roles) -> dict:
        out = {}
        for split_name, parts in (("", roles.splits["eval"]), ("plain_", roles.splits["plain"])):
            for k in ("forget", "retain"):
                s = parts[k]
                em, es = ev.token_match(
                    model, self._qa(self._prepared.tokenizer, s.rows, fmt=EVALUATION)
                )
                gens = ev.greedy_answers(
                    model, self._prepared.tokenizer, s.prompts, self.max_new_tokens, fmt=EVALUATION
                )
                out[f"{split_name}{k}_exact_memorization"] = float(em.nanmean())
                out[f"{split_name}{k}_extraction_strength"] = float(es.nanmean())
                out[f"{split_name}{k}_rouge"] = sum(
                    ev.rouge_l_recall(gens, [r["answer"] for r in s.rows])
                ) / len(gens)
        return out

    def relearn_set(self, roles: Roles) -> RelearnSet:
        """Upstream's relearning attack (``relearn.py``, ``extraction_leakage.py``): the attacker
        trains on ``relearn_train`` (people in no split, raw values as ``relearn.py`` formats them);
        a unit is a forgotten person (``ID``), probed by their evaluation questions, and their PII
        string is the target."""
        from supportbench.benchmarks.lacuna.reader import read_relearn

        rows = read_relearn(self._data_dir)
        if not rows:
            raise SpecError(
                f"the relearning attack needs relearn_train.parquet in '{self._data_dir}' "
                "(people in no split, as upstream's create_memorized_datasets.py writes it)"
            )
        split = roles.splits["eval"]["forget"]
        units: dict[str, list] = {}
        for r, prompt in zip(split.rows, split.prompts, strict=True):
            units.setdefault(str(r["ID"]), [r["answer"], []])[1].append(prompt)
        tok = self._prepared.tokenizer
        return RelearnSet(
            train=self._qa(tok, rows, fmt=RELEARN),
            probes=tuple(Probe(u, tuple(ps), t) for u, (t, ps) in units.items()),
            generate=lambda model, prompts: ev.greedy_answers(
                model, tok, prompts, self.max_new_tokens, fmt=EVALUATION
            ),
        )

    def precision(self, model, roles: Roles) -> dict:
        """Localization precision of |W - W_theta0| against the forget-group and all-group bits,
        streamed. theta_0 is read from disk in its stored dtype and cast to the run's (``model``'s)
        dtype, as the run itself cast it before unlearning: an untouched scalar then differs by
        exactly 0 in any dtype."""
        forget_bits = group_bits(roles.notes["forget_groups"])
        truths = {"precision_forget": forget_bits, "precision_all": group_bits(ALL_GROUPS)}
        params = dict(model.named_parameters())
        names = [n for n in self._mask if n in params and scored(n)]
        before = tensor_reader(Path(self._prepared.path), "theta_0")

        def sources():
            for name in names:
                w = params[name].detach().reshape(-1)
                b = before(name)
                m = self._mask[name]
                yield (
                    name,
                    w.numel(),
                    (
                        lambda s, e, w=w, b=b, m=m: (
                            (w[s:e].float().cpu() - b[s:e].to(w.dtype).float()).abs(),
                            m[s:e],
                        )
                    ),
                )

        res = prec.localization_precision(sources, truths, max_exact=self.precision_max_exact)
        out = {}
        for t, r in res.items():
            out.update(r.to_dict(t))
        return out
