"""A registry whose ``metrics`` view predates curves (no ``step`` column; opened read-only, so the
view is not rebuilt) still reads: its rows are terminal, the curve figure is missing by name, not a
binder error."""

import duckdb
import pytest

from supportbench.registry.store import has_steps, terminal_metrics
from supportbench.reports.figures import Missing, curves


def _con(with_step: bool):
    con = duckdb.connect()
    step = ", 3 AS step" if with_step else ""
    con.execute(f"CREATE VIEW metrics AS SELECT 'k' AS run_key, 'J' AS name, 1.0 AS value{step}")
    return con


def test_the_view_without_step_reads_as_terminal_rows():
    old, new = _con(False), _con(True)
    assert not has_steps(old) and has_steps(new)
    assert terminal_metrics(old) == "TRUE" and terminal_metrics(new, "x") == "x.step IS NULL"
    assert (
        old.execute(f"SELECT count(*) FROM metrics m WHERE {terminal_metrics(old)}").fetchone()[0]
        == 1
    )
    with pytest.raises(Missing, match="eval_every"):
        curves(None, old)
