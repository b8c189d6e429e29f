"""TOFU (Maini et al. 2024) and Natural-TOFU (the paper's variant, §5.3) adapters.

Reader: the real locuslab/TOFU files from a local directory — JSON Lines per config
(``<config>.json``) or the older ``<config>_dataset.json`` files (optionally under ``default/``);
each config's fields are validated, errors name file and line. forgetXX pairs with retain(100-XX).

Protocol. A local pretrained model directory (``model=/path/to/hf-model``) is fine-tuned on ``full``
with TOFU's recipe (5 epochs, lr 1e-5, batch 32, weight decay 0.01, one warm-up epoch); the retain
model (forget-quality reference) is the same base fine-tuned on ``retain(100-XX)``. A preset has no
pretraining, so its "pretraining" knowledge is trained jointly: theta_0 = preset fine-tuned on
``full`` + real_authors + world_facts + neutral text (retain model: ``retain(100-XX)`` instead of
``full``). Both are cached, keyed by the data's content hash, the base model's identity and the
recipe.

Roles for field forgetXX and seed s (disjoint by construction, see docs/benchmarks.md):
  per forget author, its 20 QA are permuted by s: 5 -> F diagnostics, 5 -> dev, 10 -> eval;
  retain: R diagnostics from retain rows outside retain_perturbed, dev/eval from retain_perturbed;
  protected (real_authors + world_facts): thirds for P diagnostics / dev / eval;
  neutral: generic sentences -> N diagnostics only.
Unlearning trains on the whole forgetXX set with retain(100-XX) as the retain set.
J (paper Eq. 19): G_F = mean forget-eval increase of summed answer NLL vs theta_0; D_coll =
max(0, mean retain increase) + max(0, mean protected increase).
TOFU's own metrics (probability, truth ratio, forget quality, ROUGE-L, model utility) are added as
components when ``evaluate(..., full=True)``.
Natural-TOFU asks the dev/eval questions in their paraphrased (natural) form.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, replace
from pathlib import Path
from typing import Literal

import torch

from supportbench._options import option
from supportbench.benchmarks import base
from supportbench.benchmarks import evaluators as ev
from supportbench.benchmarks.base import EvalSplit, Prepared, Roles, register_benchmark
from supportbench.benchmarks.tofu import generator as gen
from supportbench.benchmarks.tofu.reader import (
    FICTITIOUS_PERTURBED,
    FIELDS,
    PROTECTED,
    QA_PER_AUTHOR,
    _hash_files,
    author_names,
    read_config,
    read_pair,
    subject_in,
)
from supportbench.errors import SpecError, UnknownNameError
from supportbench.experiments.spec import DEFAULT_MODELS
from supportbench.unlearning import models
from supportbench.unlearning.data import (
    DiagnosticRecords,
    TokenizedSet,
    concat_sets,
    dataset_nll,
    tokenize_qa,
)
from supportbench.unlearning.formats import TOFU_TAGS, QAFormat, RawFormat, chat_format
from supportbench.unlearning.relearn import Probe, RelearnSet
from supportbench.unlearning.train import FinetuneConfig, finetune

# the configs a data folder's hash covers (the record's data_hash): every one a run may read
HASHED_CONFIGS = (
    "full",
    *FIELDS,
    *(f"retain{100 - int(f[-2:])}" for f in FIELDS),
    *FICTITIOUS_PERTURBED,
    *PROTECTED,
)

CHAT_TEMPLATE_CHOICES = ("auto", "on", "off")
THETA0_CHOICES = ("finetune", "given")
# open-unlearning's template_args a user may set (configs/model/*.yaml); apply_chat_template is
# chat_template
TEMPLATE_KEYS = (
    "user_start_tag",
    "user_end_tag",
    "asst_start_tag",
    "asst_end_tag",
    "system_prompt",
    "system_prompt_with_special_tokens",
    "date_string",
)
# open-unlearning's TOFU datasets (configs/data/datasets/TOFU_QA_*.yaml: max_length)
MAX_LENGTH = 512
# v3: built reproducibly (one thread); v4: open-unlearning's text format
PREP_VERSION = "tofu-prepare-v4"


# ---- the benchmark -------------------------------------------------------------------------------
@register_benchmark("tofu")
class Tofu:
    DEFAULT_MODEL = DEFAULT_MODELS["tofu"]
    DEFAULT_FIELD = "forget10"
    INTERFACES = ()  # runs score and train a support
    PATH_OPTIONS = ("data_dir", "retain_model")  # identified by content, not by path
    FIELDS = FIELDS
    question_key = "question"  # the question form used by dev/eval splits
    # tiny presets, from scratch
    finetune_config = FinetuneConfig(epochs=30, lr=3e-3, batch_size=16)
    # pretrained local models: TOFU's fine-tuning recipe (Maini et al. 2024)
    pretrained_finetune_config = FinetuneConfig(
        epochs=5, lr=1e-5, batch_size=32, weight_decay=0.01, warmup_frac=0.2
    )

    def __init__(
        self,
        data_dir: option(
            str | None, doc="a local folder of TOFU's files (upstream layout); none: generated here"
        ) = None,
        size: option(Literal["mini", "full"], doc="the generated data: 20 or 200 authors") = "mini",
        cache_dir: str | Path | None = None,
        progress: bool = True,
        max_new_tokens: option(
            int, ge=1, le=4096, unit="tokens", doc="generation length for TOFU's ROUGE-L"
        ) = 200,
        finetune: option(
            dict | None,
            doc="theta_0's fine-tuning recipe: benchmark.finetune.<option> "
            "(epochs, lr, batch_size, weight_decay, warmup_frac)",
        ) = None,
        device: str | None = None,
        chat_template: option(
            Literal["auto", "on", "off"], doc="prompts through the tokenizer's chat template"
        ) = "auto",
        theta0: option(
            Literal["finetune", "given"], doc="fine-tune theta_0 here, or use the model as given"
        ) = "finetune",
        retain_model: option(
            str | None, doc="a ready retain model folder for forget quality"
        ) = None,
        template: option(
            dict | None, doc="open-unlearning's template_args: benchmark.template.<arg>"
        ) = None,
        build: int = 0,
    ):
        if size not in gen.SIZES:
            raise SpecError(f"benchmark.size={size!r}; allowed: {', '.join(gen.SIZES)}")
        if chat_template not in CHAT_TEMPLATE_CHOICES:
            raise SpecError(
                f"benchmark.chat_template={chat_template!r}; "
                f"allowed: {', '.join(CHAT_TEMPLATE_CHOICES)}"
            )
        if theta0 not in THETA0_CHOICES:
            raise SpecError(f"benchmark.theta0={theta0!r}; allowed: {', '.join(THETA0_CHOICES)}")
        bad = sorted(set(template or {}) - set(TEMPLATE_KEYS))
        if bad:
            raise SpecError(
                f"unknown benchmark.template option(s) {bad}; allowed: {', '.join(TEMPLATE_KEYS)} "
                "(open-unlearning's template_args; apply_chat_template is benchmark.chat_template)"
            )
        for k, v in (template or {}).items():
            if not isinstance(v, str):
                raise SpecError(f"benchmark.template.{k}={v!r} must be a string")
        if retain_model is not None:
            # names the folder and what it lacks, before any work
            models.check_model_dir(retain_model)
        # theta0="given": the run's model is a ready fine-tuned theta_0 (e.g. open-unlearning's
        # tofu_*_full), used as it is; retain_model: a ready retain model (tofu_*_retain90 for
        # forget10), instead of one trained
        self.theta0, self.retain_model_path, self.template = (
            theta0,
            retain_model,
            dict(template or {}),
        )
        if theta0 == "given" and build:
            raise SpecError(
                f"build {build}: a given theta_0 is one model, built elsewhere; builds other than "
                "0 rebuild theta_0 here (benchmark.theta0=finetune)"
            )
        # seeds the generated data and theta_0's training (docs/benchmarks.md)
        self.build = int(build)
        self.cache_dir = Path(cache_dir) if cache_dir else base.default_cache_dir()
        if data_dir is None:
            # build 0 keeps the folder name it had before builds existed
            suffix = f"-b{self.build}" if self.build else ""
            data_dir = self.cache_dir / "data" / f"tofu-{size}-g{gen.VERSION}{suffix}"
            if not (data_dir / "full.json").exists():
                with base.building(data_dir) as tmp:
                    gen.generate(tmp, size=size, seed=self.build)
        self.data_dir = Path(data_dir)
        if not self.data_dir.is_dir():
            raise SpecError(f"TOFU data directory '{self.data_dir}' does not exist")
        self.progress = progress
        self.max_new_tokens = max_new_tokens
        self.chat_template = chat_template
        # where its models train and run (not part of any identity)
        self.device = models.resolve_device(device)
        # e.g. {"epochs": 3, "batch_size": 8}: overrides the recipe for either kind of base
        if finetune:
            known = set(FinetuneConfig.__dataclass_fields__)
            bad = sorted(set(finetune) - known)
            if bad:
                raise SpecError(
                    f"unknown fine-tuning option(s) {bad}; allowed: {', '.join(sorted(known))}"
                )
            self.finetune_config = replace(self.finetune_config, **finetune)
            self.pretrained_finetune_config = replace(self.pretrained_finetune_config, **finetune)
        self._rows: dict[str, list[dict]] = {}
        self._prepared: Prepared | None = None
        self._retain_models: dict[str, object] = {}
        self._roles: dict[tuple, Roles] = {}
        self._relearn: dict[tuple, list[str]] = {}  # (field, seed) -> background text in no role
        self._retain_tr: dict[tuple, torch.Tensor] = {}
        self._preset: str | None = None

    @classmethod
    def field_names(cls, options: dict) -> tuple[str, ...]:
        """The fields a run may name (checked before any work); the same for every option."""
        return FIELDS

    @classmethod
    def check_inputs(cls, options: dict, field: str, settings: dict) -> None:
        """A given data folder's files a run of ``field`` reads (every row parsed: a truncated file
        is named), and, with a given theta_0, the retain model that TOFU's metrics need."""
        data_dir = options.get("data_dir")
        if data_dir is not None:
            if not Path(data_dir).exists():
                raise SpecError(
                    f"benchmark.data_dir '{data_dir}' does not exist (a folder of TOFU's files)"
                )
            if not Path(data_dir).is_dir():
                raise SpecError(
                    f"benchmark.data_dir '{data_dir}' is a file, not a folder of TOFU's files"
                )
            background = (
                ()
                if models.is_model_dir(settings.get("model", ""))
                else ("real_authors", "world_facts")
            )
            for config in (
                "full",
                *PROTECTED,
                "retain_perturbed",
                f"{field}_perturbed",
                *background,
            ):
                read_config(data_dir, config)
            read_pair(data_dir, field)
            # every config the run's data hash reads, whichever field runs (a broken or missing
            # forget05 failed a forget10 run after its start, review D4 of issue 37)
            _hash_files(Path(data_dir), HASHED_CONFIGS)
        if (
            options.get("theta0") == "given"
            and settings.get("eval_full")
            and options.get("retain_model") is None
        ):
            raise SpecError(
                f"eval_full computes TOFU's forget quality against the retain model of {field}, "
                "and none can be trained from a given theta_0: name one with --retain-model PATH "
                "(= benchmark.retain_model; open-unlearning's "
                f"tofu_<model>_retain{100 - int(field[-2:])}), or leave eval_full out"
            )

    def rows(self, config: str) -> list[dict]:
        if config not in self._rows:
            self._rows[config] = read_config(self.data_dir, config)
        return self._rows[config]

    def neutral_texts(self) -> list[str]:
        p = self.data_dir / "neutral.txt"
        texts = p.read_text().splitlines() if p.exists() else []
        return [t for t in texts if t.strip()] or [
            f"{s} {q}." for s in gen.NEUTRAL_SUBJ for q in gen.NEUTRAL_PRED
        ]

    @property
    def data_hash(self) -> str:
        return _hash_files(self.data_dir, HASHED_CONFIGS)

    # ---- theta_0 ---------------------------------------------------------------------------------
    def _format(self, tokenizer) -> QAFormat:
        """open-unlearning's format for this tokenizer (``benchmark.chat_template``;
        docs/upstream-formats.md)."""
        try:
            return chat_format(tokenizer, self.chat_template, overrides=self.template)
        except ValueError as exc:
            raise SpecError(str(exc)) from None

    def _background(self) -> tuple[list[dict], list[tuple[str, str]]]:
        """'Pretraining' knowledge of the tiny base model: real authors and world facts (QA rows, in
        the QA format) and generic text (plain continuations)."""
        qa = [r for c in ("real_authors", "world_facts") for r in self.rows(c)]
        text = []
        for t in self.neutral_texts():
            w = t.split(" ")
            text.append((" ".join(w[:3]) + " ", " ".join(w[3:])))
        return qa, text

    def _tokenizer_texts(self) -> list[str]:
        texts = [r["question"] + " " + r["answer"] for r in self.rows("full")]
        for c in (*FICTITIOUS_PERTURBED, *PROTECTED):
            for r in self.rows(c):
                texts += [
                    r.get("paraphrased_question", ""),
                    r.get("paraphrased_answer", ""),
                    *r["perturbed_answer"],
                ]
        tags = TOFU_TAGS.user_start_tag + "x" + TOFU_TAGS.user_end_tag + TOFU_TAGS.asst_start_tag
        # a trained tokenizer has no chat template: the tags
        return texts + self.neutral_texts() + [tags]

    def _recipe(self, model: str) -> FinetuneConfig:
        return (
            self.pretrained_finetune_config if models.is_model_dir(model) else self.finetune_config
        )

    def _train_model(self, model: str, seed: int, rows: list[dict], desc: str):
        """A fresh base (preset or local directory) fine-tuned on ``rows`` (+ background for
        presets)."""
        qa, text = list(rows), []
        if not models.is_model_dir(model):
            bg_qa, text = self._background()
            qa += bg_qa
        # retain model: theta_0's
        shared = self._prepared.tokenizer if self._prepared is not None else None
        net, tokenizer = models.base_model(
            model, () if shared else self._tokenizer_texts(), seed=seed, tokenizer=shared
        )
        net.to(self.device)
        fmt = self._format(tokenizer)
        data = tokenize_qa(
            tokenizer, fmt, [r["question"] for r in qa], [r["answer"] for r in qa], MAX_LENGTH
        )
        if text:
            data = concat_sets(
                [
                    data,
                    tokenize_qa(tokenizer, RawFormat(), [p for p, _ in text], [a for _, a in text]),
                ],
                tokenizer.pad_token_id,
            )
        finetune(net, data, self._recipe(model), progress=self.progress, desc=desc)
        return net, tokenizer

    def _cached_model(self, kind: str, model: str, seed: int, rows: list[dict]):
        key = base.content_key(
            PREP_VERSION,
            base.build_code(type(self)),
            kind,
            self.data_hash,
            models.base_identity(model),
            asdict(self._recipe(model)),
            seed,
            self.chat_template,
            *([self.template] if self.template else []),
        )
        label = Path(model).name if models.is_model_dir(model) else model
        path = self.cache_dir / "models" / f"{self.name}-{kind}-{label}-{key}"
        if (path / "config.json").exists():
            net, tok = models.load_model(path, device=self.device)
            return net, tok, path, True
        with models.reproducible_build(seed):
            net, tokenizer = self._train_model(
                model, seed, rows, desc=f"prepare {self.name} {kind}"
            )
        with base.building(path) as tmp:
            models.save_model(net, tokenizer, tmp)
        return net, tokenizer, path, False

    def prepare(self, model_preset: str = "tiny-llama") -> Prepared:
        """theta_0 for ``model_preset`` (a preset name, or a local HF model directory to fine-tune)
        and this benchmark's build (the seed of its training)."""
        models.base_identity(model_preset)  # an unknown name fails here, before any data is read
        if model_preset != self._preset:  # roles and references belong to one model
            self._roles, self._retain_models, self._retain_tr = {}, {}, {}
        self._prepared = None
        if self.theta0 == "given":  # a ready theta_0: loaded as it is, never trained again
            if not models.is_model_dir(model_preset):
                raise SpecError(
                    "benchmark.theta0=given needs the model to be a local model folder (a "
                    "fine-tuned theta_0, e.g. open-unlearning's "
                    f"tofu_<model>_full); got {model_preset!r}"
                )
            model, tok = models.load_model(model_preset, device=self.device)
            path, hit = model_preset, True
        else:
            model, tok, path, hit = self._cached_model(
                "full", model_preset, self.build, self.rows("full")
            )
        self._prepared = Prepared(
            model, tok, str(path), models.model_hash(model), self.data_hash, hit
        )
        self._preset = model_preset
        return self._prepared

    def retain_model(self, field: str):
        if field not in self._retain_models:
            base.require_prepared(self._prepared, "asking for the retain model")
            if self.retain_model_path is not None:
                model, _ = models.load_model(self.retain_model_path, device=self.device)
            elif self.theta0 == "given":
                raise SpecError(
                    "TOFU's forget quality needs a retain model, and none can be trained from a "
                    "given theta_0: name one with --retain-model PATH (= benchmark.retain_model; "
                    f"open-unlearning's tofu_<model>_retain{100 - int(field[-2:])} for {field})"
                )
            else:
                _, retain = read_pair(self.data_dir, field)
                model, _, _, _ = self._cached_model(
                    f"retain{100 - int(field[-2:])}", self._preset, self.build, retain
                )
            self._retain_models[field] = model
        return self._retain_models[field]

    # ---- roles -----------------------------------------------------------------------------------
    def _tok(self, questions, answers, subjects=None, fmt: QAFormat | None = None) -> TokenizedSet:
        tok = self._prepared.tokenizer
        return tokenize_qa(
            tok, fmt or self._format(tok), questions, answers, MAX_LENGTH, subjects=subjects
        )

    def _split(self, name: str, rows: list[dict]) -> EvalSplit:
        questions = [r.get(self.question_key) or r["question"] for r in rows]
        return EvalSplit(name, self._tok(questions, [r["answer"] for r in rows]), rows, questions)

    def roles(self, field: str, seed: int) -> Roles:
        if field not in FIELDS:
            raise UnknownNameError("TOFU field", field, FIELDS)
        base.require_prepared(self._prepared, "roles(): tokenisation uses theta_0's tokenizer")
        key = (field, seed)
        if key in self._roles:
            return self._roles[key]
        forget, retain = read_pair(self.data_dir, field)
        # authors by position (20 consecutive rows each), before any shuffling
        fp = [
            {**r, "author": n}
            for r, n in zip(
                self.rows(f"{field}_perturbed"), author_names(self.rows(f"{field}_perturbed"))
            )
        ]
        retain = [{**r, "author": n} for r, n in zip(retain, author_names(retain))]
        rng = random.Random(seed * 9973 + 17)
        f_diag, f_dev, f_eval = [], [], []
        for a in range(0, len(fp), QA_PER_AUTHOR):
            block = fp[a : a + QA_PER_AUTHOR]
            rng.shuffle(block)
            q = max(1, len(block) // 4)
            f_diag += block[:q]
            f_dev += block[q : 2 * q]
            f_eval += block[2 * q :]
        rp = self.rows("retain_perturbed")
        rp_q = {r["question"] for r in rp}
        retain_q = {r["question"] for r in retain}
        r_pool = [r for r in rp if r["question"] in retain_q]
        rng.shuffle(r_pool)
        r_plain = [r for r in retain if r["question"] not in rp_q]
        r_diag = rng.sample(r_plain, min(40, len(r_plain)))
        half = len(r_pool) // 2
        r_dev, r_eval = r_pool[: min(half, 40)], r_pool[half : half + 80]
        prot = [
            {**r, "source": c.replace("_perturbed", "")} for c in PROTECTED for r in self.rows(c)
        ]
        rng.shuffle(prot)
        third = len(prot) // 3
        p_diag, p_dev, p_eval = prot[:third], prot[third : 2 * third], prot[2 * third :]
        neutral = self.neutral_texts()
        n_diag = rng.sample(neutral, min(20, len(neutral)))
        # the relearning attack's data: the background text no role reads
        self._relearn[key] = [t for t in neutral if t not in set(n_diag)]

        notes = {}

        def diag(rows, role=None):
            prompts = [r["question"] for r in rows]
            subj = None
            if role:
                subj = [subject_in(r["question"], r.get("author")) for r in rows]
                notes[f"{role}_rows_without_subject"] = sum(s is None for s in subj)
                notes[f"{role}_rows"] = len(rows)
            return self._tok(prompts, [r["answer"] for r in rows], subj)

        nd = [(" ".join(t.split(" ")[:3]) + " ", " ".join(t.split(" ")[3:])) for t in n_diag]
        records = DiagnosticRecords(
            F=diag(f_diag, "F"),
            R=diag(r_diag, "R"),
            P=diag(p_diag),
            N=self._tok([p for p, _ in nd], [a for _, a in nd], fmt=RawFormat()),
        )
        train_f = self._tok([r["question"] for r in forget], [r["answer"] for r in forget])
        train_r = self._tok([r["question"] for r in retain], [r["answer"] for r in retain])
        splits = base.role_splits(
            self._split, dev=(f_dev, r_dev, p_dev), eval=(f_eval, r_eval, p_eval)
        )
        base.check_disjoint(field, f_diag + r_diag + p_diag, splits)
        roles = Roles(
            field, seed, records, train_f, train_r, splits, data_hash=self.data_hash, notes=notes
        )
        self._roles[key] = roles
        return roles

    # ---- evaluation ------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(
        self, model, roles: Roles, which: str = "eval", full: bool = False
    ) -> base.Outcome:
        comp, nll = base.j_components(model, roles, which, allowed=("dev", "eval"))
        items = base.j_items(roles, which, nll)
        if full:
            comp.update(self._tofu_metrics(model, roles, which, nll, items))
        return base.to_outcome(comp, items)

    def _answer_nll(self, model, split: EvalSplit, answers: list[str]) -> torch.Tensor:
        """Per item: mean answer-token NLL of ``answers`` after the split's questions
        (open-unlearning's avg_loss)."""
        return ev.mean_token_nll(*dataset_nll(model, self._tok(split.prompts, answers)))

    def _perturbed_nll(self, model, split: EvalSplit) -> torch.Tensor:
        k = min(len(r["perturbed_answer"]) for r in split.rows)
        return torch.stack(
            [
                self._answer_nll(model, split, [r["perturbed_answer"][j] for r in split.rows])
                for j in range(k)
            ],
            1,
        )

    def _truth_ratio(self, model, split: EvalSplit, correct_key: str) -> torch.Tensor:
        correct = [r.get(correct_key) or r["answer"] for r in split.rows]
        return ev.truth_ratio(
            self._answer_nll(model, split, correct), self._perturbed_nll(model, split)
        )

    def _tofu_metrics(self, model, roles: Roles, which: str, nll, items: dict) -> dict:
        """TOFU's metrics; ``items`` gains the per-item truth ratios (the model's on forget and
        retain, the retain model's on forget: forget quality is the KS test of the first against the
        last)."""
        parts = roles.splits[which]
        out = {}
        tr_f = self._truth_ratio(model, parts["forget"], "paraphrased_answer")
        out["forget_truth_ratio"] = ev.truth_ratio_forget(tr_f)
        # a curve's slice (Roles.head) is a prefix of the split: its own entry, by length
        key = (roles.field, roles.seed, which, len(parts["forget"]))
        if key not in self._retain_tr:
            retain_model = self.retain_model(roles.field)
            self._retain_tr[key] = self._truth_ratio(
                retain_model, parts["forget"], "paraphrased_answer"
            )
        out["forget_quality"] = ev.forget_quality(tr_f.tolist(), self._retain_tr[key].tolist())
        items.update(
            {
                "truth_ratio:forget": tr_f.tolist(),
                "truth_ratio_retain_model:forget": self._retain_tr[key].tolist(),
            }
        )
        gens = {
            k: self.generate(model, parts[k].prompts) for k in ("forget", "retain", "protected")
        }
        out["forget_rouge"] = _mean(
            ev.rouge_l_recall(gens["forget"], [r["answer"] for r in parts["forget"].rows])
        )
        utility = []
        tr_r = self._truth_ratio(model, parts["retain"], "paraphrased_answer")
        items["truth_ratio:retain"] = tr_r.tolist()
        r_vals = [
            float(ev.probability(*nll["retain"]).mean()),
            _mean(ev.rouge_l_recall(gens["retain"], [r["answer"] for r in parts["retain"].rows])),
            ev.truth_ratio_keep(tr_r),
        ]
        out.update(dict(zip(("retain_prob", "retain_rouge", "retain_truth_ratio"), r_vals)))
        utility += r_vals
        prot = parts["protected"]
        for src in ("real_authors", "world_facts"):
            idx = [i for i, r in enumerate(prot.rows) if r.get("source") == src]
            if not idx:
                continue
            sub = EvalSplit(
                src,
                prot.data.take(idx),
                [prot.rows[i] for i in idx],
                [prot.prompts[i] for i in idx],
            )
            nll_true = self._answer_nll(model, sub, [r["answer"] for r in sub.rows])
            nll_w = self._perturbed_nll(model, sub)
            vals = [
                float(ev.normalised_probability(nll_true, nll_w).mean()),
                _mean(
                    ev.rouge_l_recall(
                        [gens["protected"][i] for i in idx], [r["answer"] for r in sub.rows]
                    )
                ),
                ev.truth_ratio_keep(ev.truth_ratio(nll_true, nll_w)),
            ]
            out.update(dict(zip((f"{src}_prob", f"{src}_rouge", f"{src}_truth_ratio"), vals)))
            utility += vals
        out["model_utility"] = ev.model_utility(utility) if len(utility) == 9 else float("nan")
        return out

    def relearn_set(self, roles: Roles) -> RelearnSet:
        """The relearning attack on TOFU: TOFU has no question outside its roles (forgetXX and
        retain(100-XX) make ``full``; real authors and world facts are the protected role), so the
        attacker fine-tunes on the background text no role reads (the neutral sentences outside the
        N diagnostics): benign fine-tuning. A unit is one forget evaluation question, asked as the
        evaluation asks it (Natural-TOFU: paraphrased); its target is the answer."""
        rows = self._relearn.get((roles.field, roles.seed))
        if not rows:
            raise SpecError(
                f"the relearning attack on {self.name} needs background text outside the N "
                f"diagnostics (neutral.txt in '{self.data_dir}' holds {len(self.neutral_texts())} "
                "lines, all of them diagnostic records)"
            )
        pairs = [(" ".join(t.split(" ")[:3]) + " ", " ".join(t.split(" ")[3:])) for t in rows]
        split = roles.splits["eval"]["forget"]
        return RelearnSet(
            train=self._tok([p for p, _ in pairs], [a for _, a in pairs], fmt=RawFormat()),
            probes=tuple(
                Probe(f"q{i:04d}", (q,), r["answer"].strip())
                for i, (r, q) in enumerate(zip(split.rows, split.prompts, strict=True))
            ),
            generate=lambda model, prompts: self.generate(model, list(prompts)),
        )

    @torch.no_grad()
    def generate(self, model, questions: list[str], batch_size: int = 32) -> list[str]:
        """Greedy answers (ROUGE-L) after each question's prompt in the QA format, left-padded
        batches, stop at eos or max_new_tokens."""
        tok = self._prepared.tokenizer
        return ev.greedy_answers(
            model, tok, questions, self.max_new_tokens, batch_size, fmt=self._format(tok)
        )


@register_benchmark("natural_tofu")
class NaturalTofu(Tofu):
    """TOFU with dev/eval questions in their paraphrased (natural) form; used for the ten-method
    panel."""

    question_key = "paraphrased_question"


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else math.nan
