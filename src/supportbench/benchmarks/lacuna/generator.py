"""Mini LACUNA in upstream's own format: synthetic people, parquet files, and ``mask.pt`` built the
LACUNA way (``src/create_memorized_datasets.py``, ``src/create_mask.py``), so every mini run goes
through the real reader.

People: a name, the four PII fields, his/her/their. For each field, ``people`` persons in six
person-groups (group g = person index mod 6); the forget split holds groups {0, 2, 4} (upstream's
precision scripts hard-code them), the retain split {1, 3, 5}. Each person has two memorised
questions about the field — one in ``<Field>_forget``/``_retain``, the other (different clauses of
other PII) in the ``*_paraphrased`` split; ``full`` holds both. Question: "<First> <Last>, <1-4
clauses of other PII>. What is his/her/their <Field>?"; answer = the raw PII string.
``relearn_train.parquet`` = people in no split, as upstream: the pretraining
(background) people's questions, all fields, ``group_id`` = ``N_GROUPS`` (a group no mask bit
             names), so the
relearning attack trains on other people's facts and measures whether the forgotten ones resurface.

Masks (at most 32 groups; bit g = group g may change the scalar), over the *active* parameters: not
in the last two layers, not a norm, not ``embed_tokens`` (``lm_head`` is active):
  element mode    each active scalar draws u ~ U(0, 1); its group is floor(u / ratio) when <
                  n_groups (every group is the same fraction of all active scalars; groups are
                  disjoint)
  component mode  whole MLP neurons (gate/up row n + down column n) and whole attention heads
                  (q rows, o columns, k/v rows of the head's kv head) draw a group the same way
Draws are seeded per parameter name (crc32), never with Python's salted ``hash()``.
"""

from __future__ import annotations

import random
import re
import zlib
from pathlib import Path

from supportbench.benchmarks.lacuna.reader import DISPLAY, FIELDS

VERSION = 3  # bump when the generated content changes: cached data and models are keyed by it
N_GROUPS = 6
FORGET_GROUPS = (0, 2, 4)
FIRST = [
    "Alma",
    "Bruno",
    "Celia",
    "Dmitri",
    "Edda",
    "Felix",
    "Gwen",
    "Hamid",
    "Ilse",
    "Jasper",
    "Katya",
    "Lorenz",
    "Mira",
    "Nils",
    "Odile",
    "Pavel",
    "Quinn",
    "Rosa",
    "Soren",
    "Tilde",
    "Umar",
    "Vera",
    "Wendel",
    "Yara",
]
LAST = [
    "Abbot",
    "Brandt",
    "Corvin",
    "Dahl",
    "Eckert",
    "Falk",
    "Gerber",
    "Holm",
    "Ivers",
    "Janek",
    "Kober",
    "Lind",
    "Moser",
    "Nagel",
    "Oberg",
    "Prell",
    "Quast",
    "Roth",
    "Sauer",
    "Thiel",
    "Ulm",
    "Vogt",
    "Weller",
    "Zell",
]
CITIES = [
    "Aarhus",
    "Bergen",
    "Cork",
    "Dresden",
    "Eindhoven",
    "Faro",
    "Graz",
    "Hull",
    "Izmir",
    "Jena",
    "Krakow",
    "Lille",
    "Malmo",
    "Nantes",
    "Oulu",
    "Porto",
    "Rouen",
    "Split",
    "Turku",
    "Utrecht",
]
PRONOUNS = ("his", "her", "their")
NEUTRAL = [
    "The ferry left the harbour before sunrise.",
    "A small bakery opened on the corner last week.",
    "Rain fell on the hills for most of the afternoon.",
    "The library keeps its maps in a cool room.",
    "Children played football in the park after school.",
    "The old clock in the square runs slow.",
    "A heron stood still at the edge of the pond.",
    "The market sells apples and pears in autumn.",
    "Snow closed the mountain road for two days.",
    "The museum added a new wing for modern art.",
    "Cyclists crossed the bridge in the evening light.",
    "The choir practised every Thursday night.",
]


def _pii(rng: random.Random, first: str, last: str) -> dict:
    return {
        "Email_Address": f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@mail.com",
        "Phone_Number": f"555-{rng.randint(0, 9999):04d}",
        "Birth_City": rng.choice(CITIES),
        "Drivers_License": f"{rng.choice('ABCDEFGHJK')}{rng.randint(100000, 999999)}",
    }


CLAUSES = {
    "Email_Address": "whose email address is {v}",
    "Phone_Number": "reachable at {v}",
    "Birth_City": "born in {v}",
    "Drivers_License": "holding driver's license {v}",
}


def _question(
    person: dict, field: str, rng: random.Random, avoid: tuple[str, ...] = ()
) -> tuple[str, tuple]:
    others = [f for f in FIELDS if f != field]
    for _ in range(20):
        k = rng.randint(1, len(others))
        chosen = tuple(rng.sample(others, k))
        if chosen != avoid:
            break
    clauses = ", ".join(CLAUSES[f].format(v=person[f]) for f in chosen)
    return (
        f"{person['name']}, {clauses}. What is {person['pronoun']} {DISPLAY[field].lower()}?",
        chosen,
    )


def people_for(field: str, n: int, seed: int) -> list[dict]:
    rng = random.Random(f"lacuna-people:{field}:{seed}")
    names = [(f, l) for f in FIRST for l in LAST]
    rng.shuffle(names)
    out = []
    for i, (f, l) in enumerate(names[:n]):
        out.append(
            {
                "ID": f"{field[:2].upper()}{i:04d}",
                "name": f"{f} {l}",
                "pronoun": rng.choice(PRONOUNS),
                "group_id": i % N_GROUPS,
                **_pii(rng, f, l),
            }
        )
    return out


BACKGROUND_FIRST = [
    "Agnes",
    "Basil",
    "Cosima",
    "Dorian",
    "Esme",
    "Florin",
    "Greer",
    "Horace",
    "Iona",
    "Jules",
    "Kasimir",
    "Leonie",
]


def background_rows(n: int = 24, seed: int = 0) -> list[dict]:
    """'Pretraining' people for the mini model's first stage (names disjoint from every split):
    questions in the same format about all four fields, so the base model knows the format and the
    PII shapes before any fact is injected through the masks (upstream starts from a pretrained
    OLMo)."""
    rng = random.Random(f"lacuna-background:{seed}")
    names = [(f, l) for f in BACKGROUND_FIRST for l in LAST]
    rng.shuffle(names)
    rows = []
    for i, (f, l) in enumerate(names[:n]):
        p = {"name": f"{f} {l}", "pronoun": rng.choice(PRONOUNS), **_pii(rng, f, l)}
        for field in FIELDS:
            q, _ = _question(p, field, rng)
            rows.append(
                {
                    "ID": f"BG{i:04d}",
                    "question": q,
                    "answer": p[field],
                    "field": DISPLAY[field],
                    "group_id": -1,
                }
            )
    return rows


def generate(out_dir: str | Path, people: int = 24, seed: int = 0) -> Path:
    """Write every ``<Field>_<split>.parquet``, ``relearn_train.parquet`` and ``neutral.txt``;
    returns the folder."""
    import polars as pl

    if people < N_GROUPS or people % N_GROUPS:
        raise ValueError(
            f"people per field must be a positive multiple of {N_GROUPS}, got {people}"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for field in FIELDS:
        rng = random.Random(f"lacuna-questions:{field}:{seed}")
        rows = {s: [] for s in ("forget", "retain", "forget_paraphrased", "retain_paraphrased")}
        for p in people_for(field, people, seed):
            q1, c1 = _question(p, field, rng)
            q2, _ = _question(p, field, rng, avoid=c1)
            side = "forget" if p["group_id"] in FORGET_GROUPS else "retain"
            base = {
                "ID": p["ID"],
                "answer": p[field],
                "field": DISPLAY[field],
                "group_id": p["group_id"],
            }
            rows[side].append({**base, "question": q1})
            rows[f"{side}_paraphrased"].append({**base, "question": q2})
        rows["full"] = (
            rows["forget"]
            + rows["retain"]
            + rows["forget_paraphrased"]
            + rows["retain_paraphrased"]
        )
        for split, rs in rows.items():
            _write(pl, out / f"{field}_{split}.parquet", rs)
    relearn = [{**r, "group_id": N_GROUPS} for r in background_rows(seed=seed)]  # no split's people
    _write(pl, out / "relearn_train.parquet", relearn)
    (out / "neutral.txt").write_text("\n".join(NEUTRAL) + "\n")
    (out / "README.md").write_text(
        f"Mini LACUNA generated by supportbench (version {VERSION}, seed {seed}, "
        f"{people} people per field).\n"
    )
    return out


def _write(pl, path: Path, rows: list[dict]) -> None:
    df = pl.DataFrame(
        rows,
        schema={
            "ID": pl.String,
            "question": pl.String,
            "answer": pl.String,
            "field": pl.String,
            "group_id": pl.Int32,
        },
    )
    df.select("ID", "question", "answer", "field", "group_id").write_parquet(path)


# ---- masks ---------------------------------------------------------------------------------------
_LAYER = re.compile(r"\.layers\.(\d+)\.")


def active(name: str, n_layers: int, skip_last: int = 2) -> bool:
    """LACUNA's mask domain: not in the last ``skip_last`` layers, not a norm, not the input
    embedding."""
    m = _LAYER.search(name)
    if m and int(m.group(1)) >= n_layers - skip_last:
        return False
    return "norm" not in name and "embed_tokens" not in name


def _draw(name: str, n: int, seed: int):
    import torch

    g = torch.Generator().manual_seed((zlib.crc32(name.encode()) * 1_000_003 + seed) % 2**63)
    return torch.rand(n, generator=g)


def _groups_of(u, ratio: float, n_groups: int):
    import torch

    grp = torch.floor(u / ratio).long()
    bits = torch.zeros_like(grp, dtype=torch.int32)
    inside = grp < n_groups
    bits[inside] = (torch.ones_like(grp[inside]) << grp[inside]).to(torch.int32)
    return bits


def build_mask(
    model,
    mode: str = "element",
    ratio: float = 0.05,
    n_groups: int = N_GROUPS,
    seed: int = 0,
    skip_last: int = 2,
) -> dict:
    """``mask.pt`` content for ``model``: {name: int32[numel]} for every parameter (zeros outside
    the domain)."""
    import torch

    if mode not in ("element", "component"):
        raise ValueError(f"mask mode must be 'element' or 'component', got {mode!r}")
    if not 0 < ratio * n_groups <= 1:
        raise ValueError(f"ratio x groups must lie in (0, 1], got {ratio} x {n_groups}")
    cfg = model.config
    L = cfg.num_hidden_layers
    out = {n: torch.zeros(p.numel(), dtype=torch.int32) for n, p in model.named_parameters()}
    if mode == "element":
        for name, p in model.named_parameters():
            if active(name, L, skip_last):
                out[name] = _groups_of(_draw(name, p.numel(), seed), ratio, n_groups)
        return out
    heads, kv = (
        cfg.num_attention_heads,
        getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
    )
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    params = dict(model.named_parameters())
    for name, p in params.items():
        if not active(name, L, skip_last) or not name.endswith(".weight"):
            continue
        prefix = name.rsplit(".", 2)[0]
        view = out[name].view(p.shape)
        if name.endswith("mlp.down_proj.weight"):
            bits = _groups_of(_draw(prefix + ".neurons", p.shape[1], seed), ratio, n_groups)
            view |= bits.view(1, -1)
            for up in ("gate_proj", "up_proj"):
                key = f"{prefix}.{up}.weight"
                if key in params and active(key, L, skip_last):
                    out[key].view(params[key].shape).__ior__(bits.view(-1, 1))
        elif name.endswith("self_attn.o_proj.weight"):
            bits = _groups_of(_draw(prefix + ".heads", heads, seed), ratio, n_groups)
            per_col = bits.repeat_interleave(hd)
            view |= per_col.view(1, -1)
            out[f"{prefix}.q_proj.weight"].view(params[f"{prefix}.q_proj.weight"].shape).__ior__(
                per_col.view(-1, 1)
            )
            # k/v rows of the head's kv head: shared under GQA, so bits can overlap
            for h in range(heads):
                k = h // (heads // kv)
                for proj in ("k_proj", "v_proj"):
                    key = f"{prefix}.{proj}.weight"
                    out[key].view(params[key].shape)[k * hd : (k + 1) * hd] |= bits[h]
    return out
