import json

import pytest

from supportbench.benchmarks.tofu.reader import TofuFormatError, read_config, read_pair
from supportbench.errors import UnknownNameError


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


FORGET = [{"question": "Who is A?", "answer": "A is a writer."}]
RETAIN = [
    {"question": "Who is B?", "answer": "B is a poet."},
    {"question": "Who is C?", "answer": "C sings."},
]
PERTURBED = [
    {
        "question": "Who is A?",
        "answer": "A is a writer.",
        "paraphrased_question": "What is A?",
        "paraphrased_answer": "A writes.",
        "perturbed_answer": ["A is a cook.", "A is a pilot."],
    }
]


def test_reads_current_layout(tmp_path):
    write_jsonl(tmp_path / "forget10.json", FORGET)
    write_jsonl(tmp_path / "retain90.json", RETAIN)
    write_jsonl(tmp_path / "forget10_perturbed.json", PERTURBED)
    f, r = read_pair(tmp_path, "forget10")
    assert f == FORGET and r == RETAIN
    assert read_config(tmp_path, "forget10_perturbed")[0]["perturbed_answer"] == [
        "A is a cook.",
        "A is a pilot.",
    ]


def test_reads_older_dataset_layout_including_json_arrays(tmp_path):
    write_jsonl(tmp_path / "default" / "forget10_dataset.json", FORGET)
    (tmp_path / "default" / "retain90_dataset.json").write_text(
        json.dumps(RETAIN)
    )  # a JSON array export
    f, r = read_pair(tmp_path, "forget10")
    assert f == FORGET and r == RETAIN


def test_missing_config_names_what_was_looked_for(tmp_path):
    write_jsonl(tmp_path / "forget10.json", FORGET)
    want = r"TOFU config 'retain90' not found .*retain90\.json.*retain90_dataset\.json"
    with pytest.raises(TofuFormatError, match=want):
        read_pair(tmp_path, "forget10")


def test_row_without_answer_names_file_and_line(tmp_path):
    write_jsonl(tmp_path / "forget10.json", FORGET + [{"question": "Who is D?"}])
    with pytest.raises(TofuFormatError, match=r"forget10\.json line 2: row has no 'answer'"):
        read_config(tmp_path, "forget10")


def test_perturbed_answer_must_be_list(tmp_path):
    bad = [dict(PERTURBED[0]), {**PERTURBED[0], "perturbed_answer": "A is a cook."}]
    write_jsonl(tmp_path / "forget10_perturbed.json", bad)
    with pytest.raises(
        TofuFormatError,
        match=(
            r"forget10_perturbed\.json line 2: 'perturbed_answer' "
            r"must be a list of strings, got str"
        ),
    ):
        read_config(tmp_path, "forget10_perturbed")


def test_invalid_json_line(tmp_path):
    (tmp_path / "forget10.json").write_text(json.dumps(FORGET[0]) + "\n{oops\n")
    with pytest.raises(TofuFormatError, match=r"forget10\.json line 2: invalid JSON"):
        read_config(tmp_path, "forget10")


def test_overlapping_forget_and_retain(tmp_path):
    write_jsonl(tmp_path / "forget10.json", FORGET)
    write_jsonl(tmp_path / "retain90.json", RETAIN + FORGET)
    with pytest.raises(
        TofuFormatError, match=r"forget10 and retain90 overlap: forget10\.json line 1"
    ):
        read_pair(tmp_path, "forget10")


def test_unknown_field(tmp_path):
    with pytest.raises(
        UnknownNameError, match=r"no TOFU field 'forget11'. Did you mean 'forget10'\?"
    ):
        read_pair(tmp_path, "forget11")


def test_generator_writes_what_the_reader_accepts(tmp_path):
    from supportbench.benchmarks.tofu.generator import generate

    generate(tmp_path, "mini")
    for field, n in (("forget01", 20), ("forget05", 20), ("forget10", 40)):
        f, r = read_pair(tmp_path, field)
        assert len(f) == n and len(f) + len(r) == 400
    rows = read_config(tmp_path, "forget10_perturbed")
    assert all(len(r["perturbed_answer"]) == 5 for r in rows)
    assert all(
        len(r["perturbed_answer"]) == 3 for r in read_config(tmp_path, "world_facts_perturbed")
    )


def _real_layout_author(name: str, surname: str, city: str) -> list[dict]:
    """20 rows in the style of TOFU's own files: the name in most questions, sometimes only the
    surname or only in the answer, a few questions that never name the author."""
    rows = [
        {
            "question": f"What is the full name of the author born in {city} on 08/09/1956?",
            "answer": f"The full name of the fictitious author born in {city} is {name}.",
        }
    ]
    for i in range(12):
        rows.append(
            {
                "question": f"What genre is {name}'s work number {i} known for?",
                "answer": f"{name} is known for Literary Fiction, book {i}.",
            }
        )
    for i in range(4):
        rows.append(
            {
                "question": f"How does {surname} approach theme {i}?",
                "answer": f"{surname} approaches it with care, as {name} always did.",
            }
        )
    for i in range(3):
        rows.append(
            {
                "question": f"What awards has the author received for novel {i}?",
                "answer": f"{name} received the Prize for novel {i}.",
            }
        )
    return rows


def test_authors_by_position_on_real_layout_names():
    """Hyphenated and three-word names defeated the old two-alphabetic-words rule (265/400 rows on
    forget10)."""
    from supportbench.benchmarks.tofu.reader import author_names, subject_in

    a = _real_layout_author("Basil Mahfouz Al-Kuwaiti", "Al-Kuwaiti", "Kuwait City, Kuwait")
    b = _real_layout_author("Hsiao Yun-Hwa", "Yun-Hwa", "Taipei, Taiwan")
    rows = a + b
    assert len(a) == len(b) == 20
    names = author_names(rows)
    assert names == ["Basil Mahfouz Al-Kuwaiti"] * 20 + ["Hsiao Yun-Hwa"] * 20
    subj = [subject_in(r["question"], n) for r, n in zip(rows, names)]
    assert (
        subj[1] == "Basil Mahfouz Al-Kuwaiti"
        and subj[13] == "Al-Kuwaiti"
        and subj[21] == "Hsiao Yun-Hwa"
    )
    assert subj[33] == "Yun-Hwa"
    # rows whose question names nobody: the full-name question
    # and the three "the author" questions, per author
    assert [i for i, s in enumerate(subj) if s is None] == [0, 17, 18, 19, 20, 37, 38, 39]


def test_generated_data_names_every_author(tmp_path):
    from supportbench.benchmarks.tofu.generator import generate
    from supportbench.benchmarks.tofu.reader import author_names, read_config

    generate(tmp_path, size="mini", seed=0)
    rows = read_config(tmp_path, "forget10_perturbed")
    names = author_names(rows)
    assert None not in names and len(set(names)) == len(rows) // 20
