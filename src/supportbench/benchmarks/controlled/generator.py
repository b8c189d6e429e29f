"""Synthetic targets of the controlled separation (paper §5.2; the construction is this project's,
see docs/benchmarks.md): ``n_targets`` subjects each bound to a random attribute, several phrasings
each (training, diagnostic, evaluation), grouped in blind pairs; a seeded coin sends one target of
each pair through the backbone interface and the other through the LoRA interface. Plus background
text (neutral sentences and world facts) for the base model's pretraining. Everything is a pure
function of the seed.
"""

from __future__ import annotations

import random

SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ren",
    "sa",
    "tor",
    "vel",
    "zan",
    "qui",
    "dor",
    "fen",
    "gal",
    "har",
    "jun",
    "bro",
    "nix",
    "pel",
    "rud",
    "sil",
    "wen",
]
ATTRIBUTES = [
    "amber",
    "basalt",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kelp",
    "lichen",
    "marble",
    "nutmeg",
    "onyx",
    "pewter",
    "quartz",
    "russet",
    "saffron",
    "tundra",
    "umber",
    "velvet",
    "willow",
    "yarrow",
    "zinc",
    "cedar",
    "flint",
    "heather",
    "ivory",
    "jasper",
    "lotus",
    "maple",
    "nectar",
    "orchid",
    "pine",
    "raven",
    "sable",
    "thistle",
    "violet",
    "walnut",
]
# the calibration targets' attributes: disjoint from every final target's, so that no calibration
# fact shares an answer with a final one
CALIBRATION_ATTRIBUTES = [
    "acorn",
    "birch",
    "coral",
    "delta",
    "fern",
    "granite",
    "hazel",
    "iris",
    "jade",
    "kestrel",
    "larch",
    "moss",
    "nickel",
    "opal",
    "plume",
    "reed",
    "slate",
    "tansy",
    "umbra",
    "vetch",
]
RELATIONS = ["sigil", "crest", "token", "emblem"]
TRAIN = ["Q: What is the {rel} of {s}?\nA: ", "Q: Which {rel} belongs to {s}?\nA: "]
DIAG = ["Q: Name the {rel} of {s}.\nA: "]
EVAL = ["Q: Tell me the {rel} that {s} carries.\nA: ", "Q: {s} is known for which {rel}?\nA: "]
NEUTRAL = [
    "The tide came in slowly over the flat sand.",
    "A lamp burned late in the corner shop.",
    "The train from the north arrived on time.",
    "Wind moved the tall grass on the hill.",
    "The baker opened the door before dawn.",
    "A cat slept in the warm window.",
    "Two boats rested against the stone pier.",
    "The clock tower rang at noon.",
    "Leaves covered the path through the park.",
    "The river was high after the rain.",
]
# sentences that introduce a subject without its attribute: theta_pre has seen every target's name
# (its embedding is trained), as a pretrained model knows an entity before a fact about it is
# injected
MENTIONS = [
    ("{s} walked along the", " river"),
    ("Everyone in town has met {s}", "."),
    ("Q: Who is {s}?\nA: ", "a person"),
]
# background subjects in theta_pre's pretraining (docs/benchmarks.md: why 300, not 60)
N_BACKGROUND = 300
WORLD = [
    ("What is the capital of France?", "Paris"),
    ("What is the capital of Japan?", "Tokyo"),
    ("How many days are in a week?", "seven"),
    ("What colour is the clear sky?", "blue"),
    ("What is frozen water called?", "ice"),
    ("Which planet do we live on?", "Earth"),
    ("How many legs does a spider have?", "eight"),
    ("What do bees make?", "honey"),
]


def targets(n_targets: int = 36, seed: int = 0) -> list[dict]:
    """``n_targets`` targets in ``n_targets // 2`` blind pairs; ``interface`` is the injecting
    interface."""
    if n_targets < 2 or n_targets % 2:
        raise ValueError(
            "targets come in blind pairs: n_targets must "
            f"be a positive even number, got {n_targets}"
        )
    rng = random.Random(f"controlled-targets:{seed}")
    names, seen = [], set()
    while len(names) < n_targets:
        name = "".join(rng.choice(SYLLABLES) for _ in range(3)).capitalize()
        if name not in seen:
            seen.add(name)
            names.append(name)
    if n_targets > len(ATTRIBUTES):
        raise ValueError(
            f"at most {len(ATTRIBUTES)} targets (distinct attributes), got {n_targets}"
        )
    attrs = rng.sample(ATTRIBUTES, n_targets)
    return _blind_pairs("t", names, attrs, random.Random(f"controlled-coin:{seed}"))


def calibration_targets(n: int = 12, n_targets: int = 36, seed: int = 0) -> list[dict]:
    """``n`` calibration targets ``c00`` ... in ``n // 2`` blind pairs, built like the final targets
    (same phrasings, relations, seeded coin) but with their own subjects (never a final target's
    name) and their own attributes (``CALIBRATION_ATTRIBUTES``): they are injected into the same
    theta_0 and read only by the decisions frozen before the final runs (the primary locator, each
    interface's learning rate)."""
    if n == 0:
        return []
    if n < 2 or n % 2:
        raise ValueError(
            f"calibration targets come in blind pairs: a positive even number, got {n}"
        )
    if n > len(CALIBRATION_ATTRIBUTES):
        raise ValueError(f"at most {len(CALIBRATION_ATTRIBUTES)} calibration targets, got {n}")
    final = {t["subject"] for t in targets(n_targets, seed)}
    rng = random.Random(f"controlled-calibration:{seed}")
    names: list[str] = []
    while len(names) < n:
        name = "".join(rng.choice(SYLLABLES) for _ in range(3)).capitalize()
        if name not in final and name not in names:
            names.append(name)
    attrs = rng.sample(CALIBRATION_ATTRIBUTES, n)
    return _blind_pairs("c", names, attrs, random.Random(f"controlled-calibration-coin:{seed}"))


def _blind_pairs(
    prefix: str, names: list[str], attrs: list[str], coin: random.Random
) -> list[dict]:
    """Target ``k`` (id ``{prefix}{k:02d}``) states ``names[k]``'s ``attrs[k]`` by the ``k``-th
    relation (cycling) in every phrasing; targets ``2p`` and ``2p + 1`` form blind pair ``p``, and
    one draw of ``coin`` per pair decides which of the two the backbone injects (the other: the
    LoRA)."""
    out = []
    for k, (name, attr) in enumerate(zip(names, attrs, strict=True)):
        rel = RELATIONS[k % len(RELATIONS)]
        out.append(
            {
                "id": f"{prefix}{k:02d}",
                "subject": name,
                "attribute": attr,
                "relation": rel,
                "pair": k // 2,
                "train": [t.format(rel=rel, s=name) for t in TRAIN],
                "diag": [t.format(rel=rel, s=name) for t in DIAG],
                "eval": [t.format(rel=rel, s=name) for t in EVAL],
            }
        )
    for p in range(len(out) // 2):
        first = coin.random() < 0.5
        out[2 * p]["interface"] = "backbone" if first else "lora"
        out[2 * p + 1]["interface"] = "lora" if first else "backbone"
    return out


def background_subject_facts(
    n: int = N_BACKGROUND, seed: int = 0, extra_attributes=()
) -> list[tuple[str, str, str]]:
    """(name, relation, attribute) of the pretraining subjects: names disjoint from every target
    (they end in 'x'), so the base model has the retrieval circuit 'subject -> attribute' before any
    target is injected (the paper's base model is a pretrained LLM). With 60 of them the tiny model
    memorises them instead of routing a subject's identity to the answer position: training its
    whole last MLP on the targets then reaches a median recall of only 0.38; with 300, 0.998
    (measured, docs/benchmarks.md). ``extra_attributes`` (the calibration targets') add one
    background subject each, after the ``n``: an attribute the base model never emitted in
    pretraining is barely learnable by either interface (measured: theta_0 recall 0.003-0.036 for
    the 7 final targets whose attribute none of 60 background subjects had, and 0.0004-0.046 for
    calibration targets without these subjects)."""
    rng = random.Random(f"controlled-background:{seed}")
    out = []
    for i in range(n):
        name = "".join(rng.choice(SYLLABLES) for _ in range(3)).capitalize() + "x"
        attr, rel = rng.choice(ATTRIBUTES), RELATIONS[i % len(RELATIONS)]
        out.append((name, rel, attr))
    extra = random.Random(f"controlled-background-extra:{seed}")
    names = {o[0] for o in out}
    for i, attr in enumerate(extra_attributes):
        while (
            name := "".join(extra.choice(SYLLABLES) for _ in range(3)).capitalize() + "x"
        ) in names:
            pass
        names.add(name)
        out.append((name, RELATIONS[i % len(RELATIONS)], attr))
    return out


def background_subjects(
    n: int = N_BACKGROUND, seed: int = 0, phrasings: list[str] | None = None, extra_attributes=()
) -> list[tuple[str, str]]:
    """The pretraining subjects in the targets' own phrasings (all of them by default;
    ``phrasings=DIAG``: the diagnostic phrasing only, which the resample-ablation locator averages
    over)."""
    phrasings = TRAIN + DIAG + EVAL if phrasings is None else phrasings
    return [
        (t.format(rel=rel, s=name), attr)
        for name, rel, attr in background_subject_facts(n, seed, extra_attributes)
        for t in phrasings
    ]


def background(seed: int = 0, extra_attributes=(), mentioned=()) -> list[tuple[str, str]]:
    """(prompt, answer) pairs of the base model's pretraining: world facts, neutral text, background
    subjects, and the ``mentioned`` subjects (every target's) in ``MENTIONS`` -- named, never with
    their attribute."""
    return (
        base_facts()
        + background_subjects(seed=seed, extra_attributes=extra_attributes)
        + mentions(mentioned)
    )


def mentions(subjects) -> list[tuple[str, str]]:
    """Each subject in every ``MENTIONS`` sentence: the name in context, nothing about its
    attribute."""
    return [(p.format(s=s), a) for s in subjects for p, a in MENTIONS]


def base_facts() -> list[tuple[str, str]]:
    """World facts and neutral text (the protected and neutral roles read these)."""
    pairs = [(f"Q: {q}\nA: ", a) for q, a in WORLD]
    for t in NEUTRAL:
        w = t.split(" ")
        pairs.append((" ".join(w[:3]) + " ", " ".join(w[3:])))
    return pairs
