import json

import pytest

from supportbench.benchmarks.tofu.reader import TofuFormatError, read_config, read_pair
from supportbench.errors import UnknownNameError


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


FORGET = [{"question": "Who is A?", "answer": "A is a writer."}]
RETAIN = [{"question": "Who is B?", "answer": "B is a poet."}, {"question": "Who is C?", "answer": "C sings."}]
PERTURBED = [{"question": "Who is A?", "answer": "A is a writer.", "paraphrased_question": "What is A?",
              "paraphrased_answer": "A writes.", "perturbed_answer": ["A is a cook.", "A is a pilot."]}]


def test_reads_current_layout(tmp_path):
    write_jsonl(tmp_path / "forget10.json", FORGET)
    write_jsonl(tmp_path / "retain90.json", RETAIN)
    write_jsonl(tmp_path / "forget10_perturbed.json", PERTURBED)
    f, r = read_pair(tmp_path, "forget10")
    assert f == FORGET and r == RETAIN
    assert read_config(tmp_path, "forget10_perturbed")[0]["perturbed_answer"] == ["A is a cook.", "A is a pilot."]


def test_reads_older_dataset_layout_including_json_arrays(tmp_path):
    write_jsonl(tmp_path / "default" / "forget10_dataset.json", FORGET)
    (tmp_path / "default" / "retain90_dataset.json").write_text(json.dumps(RETAIN))  # a JSON array export
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
    with pytest.raises(TofuFormatError,
                       match=r"forget10_perturbed\.json line 2: 'perturbed_answer' must be a list of strings, got str"):
        read_config(tmp_path, "forget10_perturbed")


def test_invalid_json_line(tmp_path):
    (tmp_path / "forget10.json").write_text(json.dumps(FORGET[0]) + "\n{oops\n")
    with pytest.raises(TofuFormatError, match=r"forget10\.json line 2: invalid JSON"):
        read_config(tmp_path, "forget10")


def test_overlapping_forget_and_retain(tmp_path):
    write_jsonl(tmp_path / "forget10.json", FORGET)
    write_jsonl(tmp_path / "retain90.json", RETAIN + FORGET)
    with pytest.raises(TofuFormatError, match=r"forget10 and retain90 overlap: forget10\.json line 1"):
        read_pair(tmp_path, "forget10")


def test_unknown_field(tmp_path):
    with pytest.raises(UnknownNameError, match=r"no TOFU field 'forget11'. Did you mean 'forget10'\?"):
        read_pair(tmp_path, "forget11")


def test_generator_writes_what_the_reader_accepts(tmp_path):
    from supportbench.benchmarks.tofu.generator import generate

    generate(tmp_path, "mini")
    for field, n in (("forget01", 20), ("forget05", 20), ("forget10", 40)):
        f, r = read_pair(tmp_path, field)
        assert len(f) == n and len(f) + len(r) == 400
    rows = read_config(tmp_path, "forget10_perturbed")
    assert all(len(r["perturbed_answer"]) == 5 for r in rows)
    assert all(len(r["perturbed_answer"]) == 3 for r in read_config(tmp_path, "world_facts_perturbed"))
