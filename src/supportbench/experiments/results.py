"""``ResultsDir``: the one owner of a results directory's layout. No other module spells a results
path.

<root>/runs/<run_key>.json        one RunRecord per run, written atomically (temp file + rename)
<root>/items/<run_key>.parquet    a run's per-item values (metric, index, value), written before its
                                  record; an imported run's too (the registry's folder is the
                                  results root)
<root>/decisions/<hash>.json      frozen DIR-R decisions
<root>/registry.duckdb            the registry built from them (``supportbench registry ingest``)
<root>/report/                    the rendered report
<root>/slurm/                     the Slurm executor's job folders
<root>/calibration/controlled/    the controlled decision's calibration runs (a results directory of
                                  its own)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from supportbench._io import write_text_atomic
from supportbench.errors import RegistryError
from supportbench.experiments.record import RecordError, RunRecord


class ResultsDir:
    def __init__(self, root: str | Path | ResultsDir):
        self.root = root.root if isinstance(root, ResultsDir) else Path(root)

    def __repr__(self) -> str:
        return f"ResultsDir({str(self.root)!r})"

    # ---- the layout ------------------------------------------------------------------------------
    runs = property(
        lambda self: self.root / "runs", doc="one RunRecord per run: runs/<run_key>.json"
    )
    decisions = property(
        lambda self: self.root / "decisions", doc="frozen DIR-R decisions: <hash>.json"
    )
    registry = property(
        lambda self: self.root / "registry.duckdb", doc="the registry built from them"
    )
    report = property(lambda self: self.root / "report", doc="the rendered report")
    slurm = property(lambda self: self.root / "slurm", doc="the Slurm executor's job folders")
    tracking = property(
        lambda self: self.root / "tracking",
        doc="an optional tracker's live logs, <kind>/... (run --log-to; never read back)",
    )
    controlled_calibration = property(
        lambda self: ResultsDir(self.root / "calibration" / "controlled"),
        doc="the controlled decision's calibration runs: beside, never among, the final runs",
    )

    def record(self, run_key: str) -> Path:
        return self.runs / f"{run_key}.json"

    def decision(self, decision_hash: str) -> Path:
        return self.decisions / f"{decision_hash}.json"

    def items(self, run_key: str) -> Path:
        return self.root / "items" / f"{run_key}.parquet"

    # ---- listing ---------------------------------------------------------------------------------
    def is_results_dir(self) -> bool:
        return self.runs.is_dir() or self.decisions.is_dir()

    def record_files(self) -> list[str]:
        """Every record file, sorted (hidden temp files of writes in progress are not records)."""
        return _json_files(self.runs)

    def decision_files(self) -> list[str]:
        return _json_files(self.decisions)

    # ---- records ---------------------------------------------------------------------------------
    def has_record(self, run_key: str) -> bool:
        return self.record(run_key).exists()

    def read_record(self, run_key: str) -> RunRecord:
        """The stored record; ``FileNotFoundError`` when there is none, ``RecordError`` when it is
        unreadable."""
        path = self.record(run_key)
        try:
            text = path.read_bytes()
        except IsADirectoryError:
            raise RecordError(f"run record path '{path}' is a directory") from None
        return RunRecord.from_json(text, f"run record '{path}'")

    def records(self) -> Iterator[RunRecord]:
        """Every stored record, in file order; ``RecordError`` names the first unreadable file."""
        for path in self.record_files():
            yield RunRecord.from_json(Path(path).read_bytes(), f"run record '{path}'")

    def write_record(self, rec: RunRecord) -> Path:
        return write_text_atomic(self.record(rec.run_key), rec.to_json())

    def write_items(self, run_key: str, items: dict[str, list[float]]) -> Path:
        """A run's per-item values as one long Parquet table (metric, index, value), written
        atomically; an older file of the same run is replaced (a rerun's values belong to its new
        record)."""
        import polars as pl

        frame = pl.DataFrame(
            {
                "metric": [m for m, v in items.items() for _ in v],
                "index": [i for v in items.values() for i in range(len(v))],
                "value": [float(x) for v in items.values() for x in v],
            },
            schema={"metric": pl.String, "index": pl.Int64, "value": pl.Float64},
        )
        path = self.items(run_key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        frame.write_parquet(tmp)
        os.replace(tmp, path)
        return path

    def read_items(self, run_key: str):
        """A run's per-item values: a Polars frame (metric, index, value); ``FileNotFoundError``
        when it has none."""
        import polars as pl

        path = self.items(run_key)
        if not path.is_file():
            raise FileNotFoundError(f"run {run_key[:12]} has no per-item values ({path})")
        return pl.read_parquet(path)


def _json_files(directory: Path) -> list[str]:
    if not directory.is_dir():
        return []
    out = []
    for e in os.scandir(directory):
        if e.name.endswith(".json") and not e.name.startswith("."):
            if not e.is_file():
                raise RegistryError(
                    f"{e.path} is a directory, not a record file: move it out of {directory}"
                )
            out.append(e.path)
    return sorted(out)


DEFAULT_RESULTS = ResultsDir("results")  # relative to the current folder, as a command-line default
