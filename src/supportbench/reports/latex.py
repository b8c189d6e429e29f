"""LaTeX formatting of the paper's tables: TeX escaping, the number filters, display names, and the
Jinja environment (``<< >>`` / ``<% %>`` delimiters) with the templates under ``reports/templates``.

Numbers are formatted as in the paper (signed six decimals for gaps, W/T/L as a/b/c, LOO as [min,max],
percentages), always in math mode (a minus sign, not a hyphen); an absent value is "N/A". Names that come from
users are LaTeX-escaped.
"""

from __future__ import annotations

from importlib import resources

import numpy as np
from jinja2 import Environment, StrictUndefined

METHOD_NAMES = {"random": "Random", "activation": "Activation", "wagle": "WAGLE", "storage": "Storage",
                "memflex": "MemFlex", "fila": "FILA-relative Fisher", "ap_mlp": "AP-MLP", "grail": "GRAIL",
                "activation_down": "Activation-Down", "projected_causal": "Projected Causal",
                "intervention_score": "Static-IV"}
FIELD_NAMES = {"Email_Address": "Email Address", "Phone_Number": "Phone Number", "Birth_City": "Birth City",
               "Drivers_License": "Driver's License"}
OBJECTIVE_NAMES = {"npo": "NPO", "simnpo": "SimNPO", "graddiff": "GradDiff", "ga": "GA"}


# ---- formatting (Jinja filters) ---------------------------------------------------------------------
_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def tex(s) -> str:
    return "".join(_TEX.get(c, c) for c in str(s))


def _absent(x) -> bool:
    return x is None or (isinstance(x, float) and np.isnan(x))


# Every number is printed in math mode, so a negative one always carries a true minus sign ($-0.12$), never a
# text hyphen, wherever a template places it; an absent value is the text "N/A" (never "undefined").
def signed(x, digits=6) -> str:
    return "N/A" if _absent(x) else f"${x:+.{digits}f}$"


def fixed(x, digits=6) -> str:
    return "N/A" if _absent(x) else f"${x:.{digits}f}$"


def pct(x, digits=1) -> str:
    return "N/A" if _absent(x) else f"${100 * x:.{digits}f}\\%$"


def loo(r) -> str:
    return "N/A" if r is None else f"$[{r[0]:+.4f},{r[1]:+.4f}]$"


def ci(r, digits=4) -> str:
    return "N/A" if r is None else f"$[{r[0]:+.{digits}f},{r[1]:+.{digits}f}]$"


def method_name(m: str) -> str:
    return tex(METHOD_NAMES.get(m, m))


def field_name(f: str) -> str:
    return tex(FIELD_NAMES.get(f, f))


def objective_name(o: str) -> str:
    return tex(OBJECTIVE_NAMES.get(o, o))


def environment() -> Environment:
    env = Environment(block_start_string="<%", block_end_string="%>", variable_start_string="<<",
                      variable_end_string=">>", comment_start_string="<#", comment_end_string="#>",
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, undefined=StrictUndefined,
                      autoescape=False)
    env.filters.update(tex=tex, signed=signed, fixed=fixed, pct=pct, loo=loo, ci=ci, method=method_name,
                       field=field_name, objective=objective_name)
    env.loader = None
    return env


def template_text(name: str) -> str:
    return resources.files("supportbench.reports").joinpath("templates", name).read_text()
