"""LaTeX formatting of the paper's tables: TeX escaping, the number filters, display names, and the
Jinja environment (``<< >>`` / ``<% %>`` delimiters) with the templates under ``reports/templates``.

Numbers are formatted as in the paper (signed six decimals for gaps, W/T/L as a/b/c, LOO as
[min,max], percentages), always in math mode (a minus sign, not a hyphen); an absent value is "N/A".
Names that come from users are LaTeX-escaped, and written in ASCII only, so that paper.tex always
compiles with pdflatex whatever a user named a method: a Greek letter becomes its math symbol
($\\lambda$), an accented Latin letter its accent command (\\'{e}), a few letters their text command
(\\ss{}, \\o{}); any other character its code point as text (\\textbackslash{}u2603), never the raw
character pdflatex may not be able to set.
"""

from __future__ import annotations

import unicodedata
from importlib import resources

import numpy as np
from jinja2 import Environment, StrictUndefined

from supportbench.catalog import PAPER_METHODS

FIELD_NAMES = {
    "Email_Address": "Email Address",
    "Phone_Number": "Phone Number",
    "Birth_City": "Birth City",
    "Drivers_License": "Driver's License",
}
OBJECTIVE_NAMES = {"npo": "NPO", "simnpo": "SimNPO", "graddiff": "GradDiff", "ga": "GA"}


# ---- formatting (Jinja filters) ------------------------------------------------------------------
_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


_GREEK = dict(
    zip(
        "αβγδεζηθικλμνξπρστυφχψωΓΔΘΛΞΠΣΥΦΨΩ",
        [
            "alpha",
            "beta",
            "gamma",
            "delta",
            "epsilon",
            "zeta",
            "eta",
            "theta",
            "iota",
            "kappa",
            "lambda",
            "mu",
            "nu",
            "xi",
            "pi",
            "rho",
            "sigma",
            "tau",
            "upsilon",
            "phi",
            "chi",
            "psi",
            "omega",
            "Gamma",
            "Delta",
            "Theta",
            "Lambda",
            "Xi",
            "Pi",
            "Sigma",
            "Upsilon",
            "Phi",
            "Psi",
            "Omega",
        ],
        strict=True,
    )
)
_LETTERS = {
    "ß": r"\ss{}",
    "æ": r"\ae{}",
    "Æ": r"\AE{}",
    "ø": r"\o{}",
    "Ø": r"\O{}",
    "œ": r"\oe{}",
    "Œ": r"\OE{}",
    "ł": r"\l{}",
    "Ł": r"\L{}",
    "ı": r"\i{}",
    "\u00a0": "~",
    "–": "--",
    "—": "---",
    "−": "$-$",
    "×": r"$\times$",
    "’": "'",
    "‘": "`",
    "“": "``",
    "”": "''",
}
_ACCENTS = {
    "\u0300": "`",
    "\u0301": "'",
    "\u0302": "^",
    "\u0303": "~",
    "\u0308": '"',
    "\u0327": "c",
    "\u030a": "r",
    "\u030c": "v",
    "\u0304": "=",
    "\u0306": "u",
    "\u030b": "H",
    "\u0328": "k",
}


def _non_ascii(c: str) -> str:
    """An ASCII LaTeX form of one non-ASCII character (module docstring)."""
    if c in _GREEK:
        return f"$\\{_GREEK[c]}$"
    if c in _LETTERS:
        return _LETTERS[c]
    base, *marks = unicodedata.normalize("NFD", c)
    if base.isascii() and base.isalpha() and len(marks) == 1 and marks[0] in _ACCENTS:
        acc = _ACCENTS[marks[0]]
        return f"\\{acc}{{{base}}}" if acc.isalpha() else f"{{\\{acc}{{{base}}}}}"
    return f"\\textbackslash{{}}u{ord(c):04x}"


def tex(s) -> str:
    return "".join(_TEX.get(c) or (c if c.isascii() else _non_ascii(c)) for c in str(s))


def _absent(x) -> bool:
    return x is None or (isinstance(x, float) and np.isnan(x))


# Every number is printed in math mode, so a negative one always carries a true minus sign
# ($-0.12$), never a text hyphen, wherever a template places it; an absent value is the text "N/A"
# (never "undefined").
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


def _mean_cell(m, digits: int, fmt: str) -> str:
    """A table cell that shows a mean: the value, then its 95% interval (``stats.MeanCI``) in small
    type, or the number of units where there are too few for one."""
    if m is None or _absent(m.value):
        return "N/A"
    v = f"${m.value:{fmt}.{digits}f}$"
    if m.ci is None:
        return f"{v} {{\\scriptsize $n{{=}}{m.n}$}}"
    return f"{v} {{\\scriptsize $[{m.ci[0]:{fmt}.{digits}f},{m.ci[1]:{fmt}.{digits}f}]$}}"


def mean(m, digits=6) -> str:
    """A mean J with its interval (``_mean_cell``)."""
    return _mean_cell(m, digits, "")


def gap(m, digits=6) -> str:
    """A mean gap, signed, with its interval (``_mean_cell``)."""
    return _mean_cell(m, digits, "+")


def method_name(m: str) -> str:
    return tex(PAPER_METHODS.get(m, m))


def field_name(f: str) -> str:
    return tex(FIELD_NAMES.get(f, f))


def objective_name(o: str) -> str:
    return tex(OBJECTIVE_NAMES.get(o, o))


def environment() -> Environment:
    env = Environment(
        block_start_string="<%",
        block_end_string="%>",
        variable_start_string="<<",
        variable_end_string=">>",
        comment_start_string="<#",
        comment_end_string="#>",
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=StrictUndefined,
        autoescape=False,
    )
    env.filters.update(
        tex=tex,
        signed=signed,
        fixed=fixed,
        pct=pct,
        loo=loo,
        ci=ci,
        mean=mean,
        gap=gap,
        method=method_name,
        field=field_name,
        objective=objective_name,
    )
    env.loader = None
    return env


def template_text(name: str) -> str:
    return resources.files("supportbench.reports").joinpath("templates", name).read_text()
