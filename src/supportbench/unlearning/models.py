"""Models for unlearning: tiny presets trained here, or any local HF causal LM.

Presets exist in the architectures of the paper's models — Llama (Natural-TOFU), OLMo 3 (LACUNA) and
Qwen2 (the controlled experiment) — so the geometry code runs on each family's parameter names.
The default path on a CPU machine builds a 2-4 layer model with a byte-level BPE
tokenizer trained offline (``tokenizers``) on the benchmark's own texts. Real models load from a
local directory with ``AutoModelForCausalLM.from_pretrained`` and go through exactly the same code.
Weights are saved with safetensors only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from supportbench import _cpumode
from supportbench.errors import SpecError, SupportbenchError, UnknownNameError

SPECIAL_TOKENS = {"pad": "<pad>", "bos": "<s>", "eos": "</s>", "unk": "<unk>"}


@dataclass(frozen=True)
class ModelPreset:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    vocab_size: int = 2048
    max_position_embeddings: int = 256
    arch: str = "llama"  # llama | olmo3 | qwen2


PRESETS: dict[str, ModelPreset] = {
    # 2 layers: fast enough for CI; memorises the mini benchmarks in a few hundred steps.
    "tiny-llama": ModelPreset(
        hidden_size=96, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4
    ),
    "small-llama": ModelPreset(
        hidden_size=160,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        vocab_size=4096,
    ),
    # LACUNA's masks skip the last two layers, so its preset needs four (two carry the injected
    # facts)
    "tiny-olmo3": ModelPreset(
        hidden_size=96,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        arch="olmo3",
    ),
    "tiny-qwen2": ModelPreset(
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        arch="qwen2",
    ),
}
ARCHES = ("llama", "olmo3", "qwen2")


def preset_config(p: ModelPreset, vocab_size: int | None = None, **special):
    """The transformers config of a preset (``special``: pad/bos/eos token ids)."""
    import transformers

    if p.arch not in ARCHES:
        raise SupportbenchError(
            f"unknown preset architecture {p.arch!r}; allowed: {', '.join(ARCHES)}"
        )
    kw = dict(
        vocab_size=vocab_size or p.vocab_size,
        hidden_size=p.hidden_size,
        intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_hidden_layers,
        num_attention_heads=p.num_attention_heads,
        num_key_value_heads=p.num_attention_heads,
        max_position_embeddings=p.max_position_embeddings,
        tie_word_embeddings=False,
        attention_dropout=0.0,
        **special,
    )
    if (
        p.arch == "olmo3"
    ):  # every layer full attention: the tiny sequences never reach a sliding window
        return transformers.Olmo3Config(**kw, layer_types=["full_attention"] * p.num_hidden_layers)
    if p.arch == "qwen2":
        return transformers.Qwen2Config(**kw, use_sliding_window=False)
    return transformers.LlamaConfig(**kw)


def get_preset(name: str) -> ModelPreset:
    if name not in PRESETS:
        raise UnknownNameError("model preset", name, PRESETS)
    return PRESETS[name]


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``auto`` (or None): the first CUDA GPU when there is one, else the CPU; otherwise as
    given."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise SupportbenchError(
            f"unknown device {device!r} ({exc}); use auto, cpu, cuda or cuda:N"
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise SupportbenchError(
                f"device {device!r}: this machine has no CUDA GPU (torch {torch.__version__}, "
                f"CUDA build: {torch.version.cuda or 'none'}); use --device cpu or auto"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise SupportbenchError(
                f"device {device!r}: there are {torch.cuda.device_count()} CUDA GPU(s), "
                f"numbered 0..{torch.cuda.device_count() - 1}"
            )
    elif dev.type not in ("cpu", "mps", "meta"):
        raise SupportbenchError(
            f"device {device!r}: unsupported device type {dev.type!r}; use auto, cpu, cuda or "
            "cuda:N"
        )
    return dev


def is_model_dir(model: str) -> bool:
    """True when ``model`` names a local Hugging Face model directory rather than a preset."""
    return model not in PRESETS and (Path(model) / "config.json").is_file()


def base_identity(model: str) -> dict:
    """What identifies a base model for caching: a preset's sizes, or a local directory's content
    (the same identity as in run keys: config and weights, not the path) -- replacing the weights
    invalidates derived caches, moving the folder does not."""
    if model in PRESETS:
        return vars(PRESETS[model])
    if is_model_dir(model):
        from supportbench.experiments.identity import model_identity

        return {"model": model_identity(model)}
    raise UnknownNameError(
        "model preset or local model directory (with config.json)", model, PRESETS
    )


def base_model(model: str, tokenizer_texts: Iterable[str] = (), seed: int = 0, tokenizer=None):
    """(model, tokenizer) to fine-tune: the pretrained model and tokenizer of a local directory, or
    a fresh preset model with ``tokenizer`` (default: one trained on ``tokenizer_texts``)."""
    if is_model_dir(model):
        return load_model(model)
    tok = tokenizer or train_tokenizer(tokenizer_texts, get_preset(model).vocab_size)
    return build_model(model, tok, seed=seed), tok


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048):
    """Byte-level BPE trained offline on ``texts``; lossless decode (needed for ROUGE on
    generations)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk"]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=SPECIAL_TOKENS["pad"],
        bos_token=SPECIAL_TOKENS["bos"],
        eos_token=SPECIAL_TOKENS["eos"],
        unk_token=SPECIAL_TOKENS["unk"],
    )


def build_model(preset: str | ModelPreset, tokenizer, seed: int = 0):
    """A freshly initialised causal LM of the preset's architecture, sized by ``preset``."""
    from transformers import AutoModelForCausalLM

    p = get_preset(preset) if isinstance(preset, str) else preset
    cfg = preset_config(
        p,
        len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg)
    model.eval()
    return model


# theta_0 trains on one intra-op thread: ATen splits its reductions (sums, norms, bias gradients)
# into one chunk per thread, so the last bits of every training step -- and after a few hundred
# steps the weights -- depend on the thread count of the process that happens to build it (a sweep
# worker has 1, a shell 2).
BUILD_THREADS = 1


def cpu_mode() -> str:
    """The CPU kernels this process computes with (``supportbench._cpumode``: ``avx2``, ``portable``
    or ``native-<capability>``); part of every theta_0 cache key and of every record's
    provenance."""
    return _cpumode.effective(torch.backends.cpu.get_cpu_capability())


@contextmanager
def reproducible_build(seed: int) -> Iterator[None]:
    """Build a cached base model (theta_0) as a pure function of its spec: torch's intra-op threads
    pinned to ``BUILD_THREADS`` and the global RNG seeded with ``seed`` (torch seeds it randomly in
    every process, so anything drawing from it -- a LoRA's init -- would differ per process); both
    restored afterwards."""
    prev = torch.get_num_threads()
    torch.set_num_threads(BUILD_THREADS)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            yield
    finally:
        torch.set_num_threads(prev)


def save_model(model, tokenizer, path: str | Path) -> Path:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


WEIGHT_PATTERNS = (
    "*.safetensors",
    "pytorch_model*.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")


def check_model_dir(path: str | Path) -> None:
    """Fail fast, naming the folder, unless ``path`` holds what ``load_model`` needs: a readable
    config.json, weights, and a tokenizer."""
    import json as _json

    path = Path(path)
    if not path.is_dir():
        raise SupportbenchError(f"no model at '{path}': not a directory")
    cfg = path / "config.json"
    if not cfg.is_file():
        raise SupportbenchError(f"'{path}' is not a Hugging Face model directory: no config.json")
    try:
        conf = _json.loads(cfg.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, _json.JSONDecodeError) as exc:
        raise SupportbenchError(f"'{cfg}' is not valid JSON: {exc}") from None
    if not isinstance(conf, dict) or "model_type" not in conf:
        raise SupportbenchError(f"'{cfg}' has no 'model_type': not a transformers config")
    if not any(f.is_file() for pat in WEIGHT_PATTERNS for f in path.glob(pat)):
        raise SupportbenchError(
            f"model directory '{path}' has config.json but no weights (looked for "
            f"{', '.join(WEIGHT_PATTERNS)})"
        )
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise SupportbenchError(
            f"model directory '{path}' has no tokenizer (looked for {', '.join(TOKENIZER_FILES)})"
        )


def read_config(path: str | Path):
    """A local model folder's transformers config, or a ``SupportbenchError`` naming config.json and
    what is wrong with it (not JSON, no model_type, a value transformers refuses)."""
    from transformers import AutoConfig

    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        raise SupportbenchError(f"'{path}' is not a Hugging Face model directory: no config.json")
    try:
        conf = AutoConfig.from_pretrained(str(path), local_files_only=True)
    # transformers raises ValueError, KeyError, OSError, JSON errors
    except Exception as exc:  # noqa: BLE001
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SupportbenchError(f"'{cfg}' is not a usable transformers config: {first}") from None
    _check_sizes(conf, cfg)
    return conf


# a config's sizes, each a whole number from 1 to a bound far above any released model's (the
# largest open models: ~128 layers, hidden 16,384-25,600, FFN 53,248-106,496, vocabularies ~256k);
# a model built from sizes outside them is not one to plan or load (0 or less fails inside torch,
# 10^5 layers build for minutes even on the meta device, 4,096 for 50 s)
CONFIG_SIZES = {
    "num_hidden_layers": 1_024,
    "hidden_size": 1 << 18,
    "intermediate_size": 1 << 21,
    "num_attention_heads": 1 << 14,
    "num_key_value_heads": 1 << 14,
    "head_dim": 1 << 14,
    "vocab_size": 1 << 24,
    "max_position_embeddings": 1 << 30,
}


def _check_sizes(conf, cfg: Path) -> None:
    for name, most in CONFIG_SIZES.items():
        v = getattr(conf, name, None)
        if v is None:  # optional (kv heads, head_dim), or a size this architecture names otherwise
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= most:
            raise SupportbenchError(
                f"'{cfg}': {name} = {v!r:.40} is not allowed; a whole number from 1 to {most:,}"
            )


def geometry_shape(model: str) -> tuple[int, int]:
    """(smallest group cost, total editable cost) of a preset or a local model's geometry, from its
    config alone: the model is built on the meta device, nothing is allocated or loaded."""
    from supportbench.unlearning.support import discover_geometry

    if model in PRESETS:
        cfg = preset_config(PRESETS[model], pad_token_id=0, bos_token_id=1, eos_token_id=2)
    else:
        check_model_dir(model)
        cfg = read_config(model)
    geo = discover_geometry(meta_from_config(cfg, model))
    return int(geo.costs.min()), int(geo.total_cost)


def meta_from_config(cfg, model: str):
    """The model of ``cfg`` on the meta device (nothing allocated); a config transformers accepts
    but cannot build (sizes that do not divide, a head count above the width) is refused naming
    ``model``, not an internal error."""
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(cfg)
    except (RuntimeError, ValueError, ZeroDivisionError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SupportbenchError(
            f"model {model!r}: its config cannot build a model: {first:.200}"
        ) from None


def load_model(path: str | Path, dtype: torch.dtype | None = None, device: str | None = None):
    """Load a local HF causal LM + tokenizer (safetensors weights); never reaches a hub."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per load would drown the sweep's own progress
    path = Path(path)
    check_model_dir(path)
    kwargs = {"local_files_only": True}
    if dtype is not None:
        kwargs["dtype"] = dtype
    model, info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True, **kwargs)
    missing = sorted(info.get("missing_keys") or [])
    if missing:  # transformers would initialise them afresh and the run would look ok
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise SpecError(
            f"model directory '{path}': its weights lack {len(missing)} tensor(s) the "
            f"config needs: {', '.join(missing[:5])}{more} (a damaged or partial checkpoint)"
        )
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if device:
        model.to(device)
    model.eval()
    return model, tokenizer


def model_hash(model) -> str:
    """Content hash of all parameters (order-stable); the model part of a run's provenance."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        # raw bytes, whatever the dtype (numpy has no bfloat16)
        h.update(p.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]
