"""``supportbench report``: every table (LaTeX), the figures, ``report.md`` and a ``paper.tex`` that
\\inputs every table so ``pdflatex paper.tex`` builds one document."""

from __future__ import annotations

from pathlib import Path

from supportbench._io import write_text_atomic
from supportbench.registry.store import connect
from supportbench.reports.figures import render_figures
from supportbench.reports.paper import TABLES, Context, file_name, render_all

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


def report(registry: str | Path, out: str | Path, experiment: str | None = None) -> dict:
    out = Path(out)
    con = connect(registry, read_only=True)
    ctx = Context.from_registry(con, experiment)
    tables = render_all(ctx, out / "tables")
    figures = render_figures(ctx, out / "figures", con)
    inputs = "\n".join(f"\\input{{tables/{file_name(label)}}}\n\\clearpage" if i % 3 == 2 else
                       f"\\input{{tables/{file_name(label)}}}" for i, label in enumerate(TABLES))
    write_text_atomic(out / "paper.tex", PAPER_TEX % (str(registry).replace("_", r"\_"), inputs))
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
    write_text_atomic(out / "report.md", "\n".join(md))
    return {"tables": tables, "figures": figures}
