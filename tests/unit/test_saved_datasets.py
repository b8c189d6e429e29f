"""Data sets as ``datasets``' ``save_to_disk`` writes them (issue 37), read without ``datasets``
(benchmarks/saved.py) by the TOFU and LACUNA readers. The folders in
tests/golden/datasets-saved/ were written by the real ``datasets`` 5.2.0 (make.py there); the rows
in rows.json there are the ones it saved."""

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from supportbench.benchmarks import saved
from supportbench.benchmarks.lacuna import reader as lr
from supportbench.benchmarks.tofu import reader as tr
from supportbench.errors import DataFormatError

HERE = Path(__file__).resolve().parents[1] / "golden" / "datasets-saved"
ROWS = json.loads((HERE / "rows.json").read_text())
TOFU, LACUNA = ROWS["tofu"], ROWS["lacuna"]


def save_like_datasets(rows: list[dict], folder):
    """A Dataset folder as save_to_disk lays it out: one Arrow stream and state.json naming it."""
    folder.mkdir(parents=True)
    table = pa.Table.from_pylist(rows)
    arrow = str(folder / "data-00000-of-00001.arrow")
    with pa.OSFile(arrow, "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table)
    state = {"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": None}
    (folder / "state.json").write_text(json.dumps(state))
    (folder / "dataset_info.json").write_text("{}")


@pytest.mark.parametrize("name", ["forget01", "retain99", "two_shards"])
def test_the_real_datasets_folders_read_back_their_rows(name):
    assert saved.is_saved(HERE / name)
    assert saved.read_saved(HERE / name) == TOFU
    if name == "two_shards":  # state.json's order, not the directory's
        assert [f.name for f in saved.saved_files(HERE / name)] == [
            "data-00000-of-00002.arrow",
            "data-00001-of-00002.arrow",
        ]


def test_tofu_reads_a_saved_config_folder_as_its_json(tmp_path):
    shutil.copytree(HERE / "forget01", tmp_path / "forget01")
    (tmp_path / "retain99.json").write_text("".join(json.dumps(r) + "\n" for r in TOFU))
    assert tr.read_config(tmp_path, "forget01") == TOFU == tr.read_config(tmp_path, "retain99")
    # the folder's content, not its path, is hashed: a copy elsewhere hashes the same
    shutil.copytree(HERE / "forget01", tmp_path / "b" / "forget01")
    assert tr._hash_files(tmp_path, ["forget01"]) == tr._hash_files(tmp_path / "b", ["forget01"])


def test_tofu_names_the_row_of_a_bad_saved_config(tmp_path):
    save_like_datasets([*TOFU[:2], {"question": "Q?", "answer": None}], tmp_path / "forget01")
    with pytest.raises(tr.TofuFormatError, match=r"forget01/ row 3: 'answer' must be a string"):
        tr.read_config(tmp_path, "forget01")


def test_a_saved_folder_missing_its_arrow_file_or_with_two_splits_is_refused(tmp_path):
    shutil.copytree(HERE / "retain99", tmp_path / "forget01")
    (tmp_path / "forget01" / "data-00000-of-00001.arrow").unlink()
    with pytest.raises(tr.TofuFormatError, match=r"missing Arrow file\(s\) \['data-00000-of-00001"):
        tr.read_config(tmp_path, "forget01")
    two = tmp_path / "two"
    for split in ("validation", "test"):
        shutil.copytree(HERE / "retain99", two / split)
    (two / "dataset_dict.json").write_text(json.dumps({"splits": ["validation", "test"]}))
    with pytest.raises(DataFormatError, match="holds the splits validation, test"):
        saved.read_saved(two)


def test_lacuna_reads_a_saved_split_folder_with_its_column_checks(tmp_path):
    shutil.copytree(HERE / "Email_Address_forget", tmp_path / "Email_Address_forget")
    assert lr._is_data_dir(tmp_path)
    assert lr.split_path(tmp_path, "Email_Address", "forget") == tmp_path / "Email_Address_forget"
    assert lr.read_split(tmp_path, "Email_Address", "forget") == LACUNA
    bad = [{**r, "group_id": str(r["group_id"])} for r in LACUNA]
    save_like_datasets(bad, tmp_path / "Email_Address_retain")
    with pytest.raises(lr.LacunaFormatError, match="'group_id' must be an integer column"):
        lr.read_split(tmp_path, "Email_Address", "retain")


def test_a_state_json_naming_no_file_by_string_is_refused_by_name(tmp_path):
    """Review D5: a non-string file name was a TypeError (an internal error in the CLI)."""
    shutil.copytree(HERE / "retain99", tmp_path / "forget01")
    state = {"_data_files": [{"filename": 5}]}
    (tmp_path / "forget01" / "state.json").write_text(json.dumps(state))
    with pytest.raises(tr.TofuFormatError, match=r"forget01/state.json: .*must be strings"):
        tr.read_config(tmp_path, "forget01")
