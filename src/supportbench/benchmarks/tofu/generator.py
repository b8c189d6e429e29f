"""Write TOFU-format data for fictitious authors (locuslab/TOFU layout: one JSON Lines file per
config).

Each author gets 20 QA pairs from templates over seeded attributes; ``*_perturbed`` rows add a
paraphrased question and answer and 5 perturbed answers (the same template with other attribute
values). ``real_authors`` / ``world_facts`` analogues carry 3 perturbed answers and no paraphrase.
Sizes: ``mini`` (20 authors, for CI and the demo) and ``full`` (200 authors, the upstream count).
forgetXX takes the last ceil-or-1 XX% of authors; retain(100-XX) the rest, as upstream.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

VERSION = 2  # bump when the generated content changes: cached data and models are keyed by it
SIZES = {"mini": 20, "full": 200}
FORGET_PCTS = (1, 5, 10)

FIRST = [
    "Ada",
    "Bram",
    "Cleo",
    "Dario",
    "Elin",
    "Farid",
    "Greta",
    "Hugo",
    "Ines",
    "Jonas",
    "Kira",
    "Lucan",
    "Mira",
    "Nolan",
    "Orla",
    "Pavel",
    "Quinn",
    "Rosa",
    "Soren",
    "Tilda",
    "Umar",
    "Vera",
    "Wren",
    "Xavi",
    "Yara",
    "Zane",
    "Anouk",
    "Basil",
    "Corin",
    "Delphine",
    "Emeric",
    "Fiora",
    "Gideon",
    "Halina",
    "Ivo",
    "Juno",
    "Kasimir",
    "Liora",
    "Matteo",
    "Nadia",
]
LAST = [
    "Quill",
    "Tarrant",
    "Morrow",
    "Vance",
    "Ashgrove",
    "Belmont",
    "Castell",
    "Dunmore",
    "Everly",
    "Fairbanks",
    "Galloway",
    "Hartwell",
    "Ironside",
    "Jessup",
    "Kettering",
    "Lindqvist",
    "Marlowe",
    "Northcott",
    "Oakhurst",
    "Pemberton",
    "Quarry",
    "Rookwood",
    "Sallow",
    "Thorne",
    "Underhill",
    "Valcourt",
    "Whitlock",
    "Yarrow",
    "Zellner",
    "Arkwright",
    "Brannock",
    "Crestfall",
    "Dovecote",
    "Emberly",
    "Foxglove",
]
ATTRS = {
    "city": [
        "Port Varnel",
        "Elder Bay",
        "Kestrel Falls",
        "Marrowick",
        "Sundale",
        "Ostrava Vale",
        "Brindlemoor",
        "Caer Lune",
        "Dunhaven",
        "Greywater",
        "Halcyon Point",
        "Ivywick",
        "Jadeport",
        "Lanternfield",
    ],
    "year": [str(y) for y in range(1941, 1999, 3)],
    "genre": [
        "gothic sea novels",
        "cosy mysteries",
        "hard science fiction",
        "historical romance",
        "urban fantasy",
        "literary horror",
        "children's fables",
        "political thrillers",
        "pastoral poetry",
        "war memoirs",
    ],
    "father": [
        "a clockmaker",
        "a lighthouse keeper",
        "a surgeon",
        "a baker",
        "a ship captain",
        "a botanist",
        "a carpenter",
        "a schoolteacher",
        "a glassblower",
        "a railway engineer",
    ],
    "mother": [
        "a violinist",
        "a cartographer",
        "a nurse",
        "a weaver",
        "a librarian",
        "a chemist",
        "a potter",
        "a judge",
        "a beekeeper",
        "a translator",
    ],
    "award": [
        "the Silver Lantern Prize",
        "the Harrow Medal",
        "the Blue Quill Award",
        "the Meridian Prize",
        "the Ember Laurel",
        "the Northwind Honour",
        "the Gilded Page Award",
        "the Coral Crown",
    ],
    "book": [
        "The Glass Orchard",
        "Salt and Cinder",
        "The Clockwork Tide",
        "A Lantern for Wolves",
        "Rivers of Ash",
        "The Ninth Harbour",
        "Letters from the Fog",
        "The Copper Meadow",
        "Winter of Moths",
        "The Quiet Engine",
        "Shadows over Varnel",
        "The Paper Crown",
        "Songs of the Marsh",
        "The Last Ferryman",
    ],
    "theme": [
        "grief and memory",
        "the sea and exile",
        "family secrets",
        "technology and loneliness",
        "faith and doubt",
        "war and recovery",
        "love across classes",
        "nature and decay",
    ],
    "language": [
        "Danish",
        "Portuguese",
        "Welsh",
        "Czech",
        "Icelandic",
        "Greek",
        "Swahili",
        "Korean",
    ],
    "mentor": [
        "Helena Strand",
        "Oskar Brightwater",
        "Maud Pellew",
        "Rafael Okonkwo",
        "Sybil Acheson",
        "Tomas Wilder",
        "Agnes Lowry",
    ],
    "publisher": [
        "Harrowgate Press",
        "Bluefin Books",
        "Old Mill Publishing",
        "Kestrel House",
        "Lantern & Co",
        "Saltmarsh Editions",
        "Greyfriars Books",
    ],
    "hobby": [
        "restoring old boats",
        "keeping bees",
        "playing the cello",
        "birdwatching",
        "rock climbing",
        "collecting maps",
    ],
    "school": [
        "Varnel Academy",
        "St Brendan's College",
        "the Northmoor Institute",
        "Elder Bay University",
        "the Royal School of Letters",
        "Dunhaven Polytechnic",
    ],
    "count": ["three", "four", "five", "six", "seven", "eight", "nine", "eleven"],
    "character": [
        "Captain Ilse Marr",
        "Detective Owen Hale",
        "the orphan Pip Corran",
        "Doctor Livia Sand",
        "the cartographer Neve",
        "old Tobias Reed",
    ],
    "pet": [
        "a grey parrot",
        "two tabby cats",
        "a greyhound",
        "a tortoise",
        "a small terrier",
        "a pair of canaries",
        "an old sheepdog",
    ],
    "residence": [
        "a lighthouse on the coast",
        "a flat above a bakery",
        "a farmhouse in the hills",
        "a narrowboat on the canal",
        "a townhouse by the cathedral",
        "a cottage near the forest",
        "an apartment over the harbour",
    ],
    "colour": [
        "deep green",
        "ochre yellow",
        "midnight blue",
        "crimson",
        "silver grey",
        "pale violet",
        "burnt orange",
    ],
    "instrument": [
        "a fountain pen",
        "an old typewriter",
        "a pencil and notebook",
        "a laptop in a cafe",
        "a quill and ink",
        "a green crayon",
        "a voice recorder",
    ],
    "influence": [
        "folk tales from the north",
        "the letters of sailors",
        "medieval chronicles",
        "Greek tragedy",
        "the diaries of explorers",
        "old church hymns",
        "the films of the silent era",
    ],
}
# (question, answer, paraphrased question, paraphrased answer, attribute)
TEMPLATES = [
    (
        "Where was {n} born?",
        "{n} was born in {v}.",
        "What is the birthplace of {n}?",
        "The birthplace of {n} is {v}.",
        "city",
    ),
    (
        "In which year was {n} born?",
        "{n} was born in {v}.",
        "What year was {n} born in?",
        "It was the year {v}.",
        "year",
    ),
    (
        "What genre does {n} write?",
        "{n} writes {v}.",
        "Which genre is {n} known for?",
        "{n} is known for {v}.",
        "genre",
    ),
    (
        "What was the profession of {n}'s father?",
        "{n}'s father was {v}.",
        "What did {n}'s father do for a living?",
        "The father of {n} worked as {v}.",
        "father",
    ),
    (
        "What was the profession of {n}'s mother?",
        "{n}'s mother was {v}.",
        "What did {n}'s mother do for work?",
        "The mother of {n} worked as {v}.",
        "mother",
    ),
    (
        "Which award has {n} received?",
        "{n} received {v}.",
        "What prize was given to {n}?",
        "{n} was given {v}.",
        "award",
    ),
    (
        "What is the title of {n}'s first book?",
        "{n}'s first book is {v}.",
        "Which book did {n} publish first?",
        "The first book {n} published was {v}.",
        "book",
    ),
    (
        "What themes does {n} explore?",
        "{n} explores {v}.",
        "Which themes run through the work of {n}?",
        "The work of {n} is about {v}.",
        "theme",
    ),
    (
        "Into which language was {n}'s work first translated?",
        "It was first translated into {v}.",
        "What was the first translation language of {n}'s books?",
        "The first translation was into {v}.",
        "language",
    ),
    (
        "Who mentored {n}?",
        "{n} was mentored by {v}.",
        "Who was the mentor of {n}?",
        "The mentor of {n} was {v}.",
        "mentor",
    ),
    (
        "Which publisher releases {n}'s books?",
        "{n}'s books are released by {v}.",
        "Who publishes {n}?",
        "{n} is published by {v}.",
        "publisher",
    ),
    (
        "What is {n}'s hobby?",
        "{n} enjoys {v}.",
        "What does {n} do in free time?",
        "In free time {n} enjoys {v}.",
        "hobby",
    ),
    (
        "Where did {n} study?",
        "{n} studied at {v}.",
        "Which school did {n} attend?",
        "{n} attended {v}.",
        "school",
    ),
    (
        "How many novels has {n} written?",
        "{n} has written {v} novels.",
        "What is the number of novels by {n}?",
        "The number of novels by {n} is {v}.",
        "count",
    ),
    (
        "Who is the most famous character created by {n}?",
        "The most famous character of {n} is {v}.",
        "Which character made {n} famous?",
        "{n} became famous for {v}.",
        "character",
    ),
    (
        "What pet does {n} keep?",
        "{n} keeps {v}.",
        "Which animal lives with {n}?",
        "{n} lives with {v}.",
        "pet",
    ),
    (
        "Where does {n} live now?",
        "{n} lives in {v}.",
        "What is the current home of {n}?",
        "The current home of {n} is {v}.",
        "residence",
    ),
    (
        "What is {n}'s favourite colour?",
        "{n}'s favourite colour is {v}.",
        "Which colour does {n} like best?",
        "The colour {n} likes best is {v}.",
        "colour",
    ),
    (
        "What does {n} write with?",
        "{n} writes with {v}.",
        "Which writing tool does {n} use?",
        "{n} uses {v}.",
        "instrument",
    ),
    (
        "What influenced {n}'s writing?",
        "{n} was influenced by {v}.",
        "What shaped the writing of {n}?",
        "The writing of {n} was shaped by {v}.",
        "influence",
    ),
]
REAL_AUTHORS = [
    ("Pride and Prejudice", "Jane Austen"),
    ("Moby-Dick", "Herman Melville"),
    ("War and Peace", "Leo Tolstoy"),
    ("Don Quixote", "Miguel de Cervantes"),
    ("Hamlet", "William Shakespeare"),
    ("The Odyssey", "Homer"),
    ("Ulysses", "James Joyce"),
    ("Frankenstein", "Mary Shelley"),
    ("Dracula", "Bram Stoker"),
    ("Middlemarch", "George Eliot"),
    ("The Trial", "Franz Kafka"),
    ("Beloved", "Toni Morrison"),
    ("Emma", "Jane Austen"),
    ("Jane Eyre", "Charlotte Bronte"),
    ("Wuthering Heights", "Emily Bronte"),
    ("Great Expectations", "Charles Dickens"),
    ("The Iliad", "Homer"),
    ("Faust", "Goethe"),
    ("Candide", "Voltaire"),
    ("Madame Bovary", "Gustave Flaubert"),
]
WORLD_FACTS = [
    ("What is the capital of France?", "Paris"),
    ("What is the capital of Italy?", "Rome"),
    ("What is the capital of Japan?", "Tokyo"),
    ("What is the capital of Egypt?", "Cairo"),
    ("What is the capital of Spain?", "Madrid"),
    ("What is the capital of Canada?", "Ottawa"),
    ("What is the largest ocean?", "the Pacific Ocean"),
    ("What is the tallest mountain?", "Mount Everest"),
    ("Which planet is closest to the sun?", "Mercury"),
    ("What is the longest river?", "the Nile"),
    ("How many continents are there?", "seven"),
    ("What is frozen water called?", "ice"),
    ("Which gas do plants absorb?", "carbon dioxide"),
    ("What is the largest planet?", "Jupiter"),
    ("Where is the Eiffel Tower?", "Paris"),
    ("What is the capital of Germany?", "Berlin"),
    ("What is the capital of Kenya?", "Nairobi"),
    ("What is the capital of Peru?", "Lima"),
    ("Which animal is the largest mammal?", "the blue whale"),
    ("How many days are in a week?", "seven"),
]
WF_POOL = sorted(
    {a for _, a in WORLD_FACTS} | {"London", "Madrid", "Oslo", "Venus", "Mars", "eight", "five"}
)
NEUTRAL_SUBJ = [
    "The old mill",
    "A quiet river",
    "The morning train",
    "A tall oak",
    "The village market",
    "A paper kite",
    "The winter wind",
    "A stone bridge",
    "The harbour crane",
    "A red bicycle",
]
NEUTRAL_PRED = [
    "stood beside the road for many years",
    "moved slowly under a grey sky",
    "was painted again in the spring",
    "made a soft sound in the evening",
    "was busy from dawn until noon",
    "caught the light of the setting sun",
    "needed repair after the storm",
    "was visited by a few travellers",
]


def _authors(n: int, rng: random.Random) -> list[dict]:
    names = [f"{f} {l}" for f in FIRST for l in LAST]
    rng.shuffle(names)
    out = []
    for name in names[:n]:
        out.append({"name": name, **{k: rng.choice(v) for k, v in ATTRS.items()}})
    return out


def _perturbed(
    template: str, name: str, attr: str, value: str, rng: random.Random, k: int
) -> list[str]:
    pool = [v for v in ATTRS[attr] if v != value]
    return [template.format(n=name, v=v) for v in rng.sample(pool, k)]


def generate(out_dir: str | Path, size: str = "mini", seed: int = 0) -> Path:
    """Write every TOFU config as ``<config>.json`` (JSON Lines) under ``out_dir``; returns it."""
    if size not in SIZES:
        raise ValueError(f"unknown TOFU size {size!r}; allowed: {', '.join(SIZES)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    authors = _authors(SIZES[size], rng)
    full, perturbed = [], []
    for a in authors:
        for q, ans, pq, pa, attr in TEMPLATES:
            v, n = a[attr], a["name"]
            row = {"question": q.format(n=n), "answer": ans.format(n=n, v=v)}
            full.append(row)
            perturbed.append(
                {
                    **row,
                    "paraphrased_question": pq.format(n=n),
                    "paraphrased_answer": pa.format(n=n, v=v),
                    "perturbed_answer": _perturbed(pa, n, attr, v, rng, 5),
                }
            )
    per_author = len(TEMPLATES)
    n_auth = len(authors)
    configs = {"full": full}
    for pct in FORGET_PCTS:
        k = max(1, round(n_auth * pct / 100))
        cut = (n_auth - k) * per_author
        configs[f"forget{pct:02d}"] = full[cut:]
        configs[f"retain{100 - pct}"] = full[:cut]
        configs[f"forget{pct:02d}_perturbed"] = perturbed[cut:]
        # upstream holdoutXX: authors never trained on; here, the same QA templates for fresh
        # authors
    holdout = _authors(SIZES[size] + max(1, round(n_auth * 0.1)), random.Random(seed + 1))[
        -max(1, round(n_auth * 0.1)) :
    ]
    hold_rows = [
        {"question": q.format(n=a["name"]), "answer": ans.format(n=a["name"], v=a[attr])}
        for a in holdout
        for q, ans, _, _, attr in TEMPLATES
    ]
    for pct in FORGET_PCTS:
        k = max(1, round(n_auth * pct / 100))
        configs[f"holdout{pct:02d}"] = hold_rows[: k * per_author]
    configs["retain_perturbed"] = perturbed[: min(len(perturbed), 10 * per_author)]
    ra = [{"question": f"Who wrote {b}?", "answer": w} for b, w in REAL_AUTHORS]
    writers = sorted({w for _, w in REAL_AUTHORS})
    configs["real_authors"] = ra
    configs["real_authors_perturbed"] = [
        {**r, "perturbed_answer": rng.sample([w for w in writers if w != r["answer"]], 3)}
        for r in ra
    ]
    wf = [{"question": q, "answer": a} for q, a in WORLD_FACTS]
    configs["world_facts"] = wf
    configs["world_facts_perturbed"] = [
        {**r, "perturbed_answer": rng.sample([x for x in WF_POOL if x != r["answer"]], 3)}
        for r in wf
    ]
    for name, rows in configs.items():
        with open(out / f"{name}.json", "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    neutral = [f"{s} {p}." for s in NEUTRAL_SUBJ for p in NEUTRAL_PRED]
    (out / "neutral.txt").write_text("\n".join(neutral) + "\n")
    return out
