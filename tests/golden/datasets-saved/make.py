"""Writes the folders beside this file with the real ``datasets`` (5.2.0, 2026-11-27), as a user's
``save_to_disk`` would; ``tests/unit/test_saved_datasets.py`` reads them without ``datasets`` and
holds the rows equal to rows.json's. Run: ``PYTHONPATH=<folder with datasets> python
make.py``. (``Dataset(table, fingerprint=...)`` skips datasets' dill fingerprint, which fails on
pyarrow 26.)"""

import json
import shutil
from pathlib import Path

import pyarrow as pa
from datasets import DatasetDict
from datasets.arrow_dataset import Dataset

HERE = Path(__file__).parent
ROWS = json.loads((HERE / "rows.json").read_text())
TOFU, LACUNA = ROWS["tofu"], ROWS["lacuna"]


def ds(rows):
    return Dataset(pa.Table.from_pylist(rows), fingerprint="0" * 16)


if __name__ == "__main__":
    for name in ("forget01", "retain99", "Email_Address_forget", "two_shards"):
        shutil.rmtree(HERE / name, ignore_errors=True)
    DatasetDict({"train": ds(TOFU)}).save_to_disk(HERE / "forget01")  # load_dataset(...) saved
    ds(TOFU).save_to_disk(HERE / "retain99")  # load_dataset(..., split="train") saved
    DatasetDict({"train": ds(LACUNA)}).save_to_disk(HERE / "Email_Address_forget")
    ds(TOFU).save_to_disk(HERE / "two_shards", num_shards=2)
