"""``supportbench report``: every table (LaTeX), the figures, ``report.md`` and a ``paper.tex`` that
\\inputs every table so ``pdflatex paper.tex`` builds one document."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from supportbench._io import write_text_atomic
from supportbench.errors import RegistryError, ReportError
from supportbench.registry.store import connect
from supportbench.reports.figures import render_figures
from supportbench.reports.findings import findings
from supportbench.reports.latex import tex
from supportbench.reports.tables import TABLES, Context, file_name, render_all

PAPER_TEX = r"""\documentclass{article}
\usepackage[T1]{fontenc}
\usepackage[utf8]{inputenc}
\usepackage{booktabs,adjustbox,amsmath,amssymb,graphicx,float}
\usepackage[margin=2cm]{geometry}
\begin{document}
\section*{supportbench report}
Generated from \texttt{%s}.
%s
\end{document}
"""


def report(registry: str | Path, out: str | Path, experiment: str | None = None,
           findings_path: str | Path | None = None) -> dict:
    """Write one experiment's report. ``experiment`` may be left out only when the registry holds one:
    statistics never mix experiments. The report is written whole or not at all: into a temporary
    folder beside ``out``, which replaces ``out`` only once every file is written."""
    out = check_output_folder(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        con = connect(registry, read_only=True)
        try:
            status, text = _write(con, registry, tmp, experiment)
        finally:
            con.close()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    if findings_path:
        write_text_atomic(Path(findings_path), text)
    return status


MARKER = ".supportbench-report"  # a folder the report command made, and so may replace


def check_output_folder(out: str | Path) -> Path:
    """The report's folder, if the command may write it: absent, an empty folder, or a report folder it made
    before (it holds ``MARKER``). Anything else — a file, a link, a folder with other content (a results
    directory, ``.``, a home folder) — is refused before any work: a command only ever replaces what it
    owns."""
    given = Path(out)
    if given.is_symlink():
        raise ReportError(f"--out '{given}' is a symbolic link; give the folder itself (the report replaces its "
                          "output folder whole, and will not replace a link or what it points to)")
    path = given.resolve()
    if path.exists() and not path.is_dir():
        raise ReportError(f"--out '{given}' is a file, not a folder; the report writes a folder: choose a new path")
    if path.is_dir() and any(path.iterdir()) and not (path / MARKER).is_file():
        raise ReportError(f"--out '{given}' is a folder with other content (not a report this command wrote): "
                          "nothing was written; choose an empty or new folder, e.g. RESULTS/report")
    if path.parent == path:
        raise ReportError(f"--out '{given}' is the file-system root; choose a new folder")
    return path


def _write(con, registry, out: Path, experiment: str | None) -> tuple[dict, str]:
    exps = [r[0] for r in con.execute("SELECT DISTINCT experiment FROM runs ORDER BY 1").fetchall()]
    if experiment is None and len(exps) > 1:
        raise RegistryError(f"registry '{registry}' holds {len(exps)} experiments ({', '.join(exps)}); "
                            "a report covers one: pass --experiment NAME")
    if experiment is not None and exps and experiment not in exps:
        raise RegistryError(f"no experiment '{experiment}' in registry '{registry}'; it holds: {', '.join(exps)}")
    experiment = experiment or (exps[0] if exps else None)
    ctx = Context.from_registry(con, experiment)
    tables = render_all(ctx, out / "tables")
    figures = render_figures(ctx, out / "figures", con)
    inputs = "\n".join(f"\\input{{tables/{file_name(label)}}}\n\\clearpage" if i % 3 == 2 else
                       f"\\input{{tables/{file_name(label)}}}" for i, label in enumerate(TABLES))
    write_text_atomic(out / "paper.tex", PAPER_TEX % (tex(str(registry)), inputs))
    md = [f"# supportbench report\n\nRegistry: `{registry}`" + (f", experiment `{experiment}`" if experiment else ""),
          f"\nRuns in the registry view: {ctx.results.height} "
          f"({ctx.results.filter(ctx.results['status'] != 'ok').height} not ok; missing runs are never imputed — "
          "see `supportbench audit`).", "\n## Tables\n",
          "| label | file | status |", "|---|---|---|"]
    for label, why in tables.items():
        md.append(f"| `{label}` | [tables/{file_name(label)}](tables/{file_name(label)}) | "
                  f"{'rendered' if why is None else 'missing: ' + why} |")
    md += ["\n## Figures\n", "| figure | files | status |", "|---|---|---|"]
    for name, why in figures.items():
        files = f"[png](figures/{name}.png), [pdf](figures/{name}.pdf)" if why is None else "-"
        md.append(f"| {name} | {files} | {'rendered' if why is None else 'missing: ' + why} |")
    md.append("\n`paper.tex` inputs every table: `pdflatex paper.tex` in this folder builds one document.\n")
    text = findings(ctx, con, experiment, str(registry))
    write_text_atomic(out / "findings.md", text)
    md.append("`findings.md`: which of the paper's claims this registry supports, with the numbers.\n")
    write_text_atomic(out / "report.md", "\n".join(md))
    write_text_atomic(out / MARKER, "written by `supportbench report`; the next report replaces this folder\n")
    return {"tables": tables, "figures": figures}, text
