"""One metric vocabulary (issue 36): a component a benchmark records under its own name is shown,
exported and imported under open-unlearning's name where open-unlearning has one
(configs/eval/tofu_metrics/*.yaml), else under its own. The registry's ``metric_names`` view is
built from ``OPEN_UNLEARNING`` (``registry/store.py``), ``supportbench run`` prints with it, and the
metric tables and ``api.Registry.metrics`` read that view: the same name everywhere. ``MEANINGS``
says what a metric measures and which way is better, where ``run`` prints it."""

from __future__ import annotations

# component (as a record stores it) -> open-unlearning's metric name
OPEN_UNLEARNING: dict[str, str] = {
    "forget_prob": "forget_Q_A_Prob",
    "forget_rouge": "forget_Q_A_ROUGE",
    "retain_prob": "retain_Q_A_Prob",
    "retain_rouge": "retain_Q_A_ROUGE",
    "retain_truth_ratio": "retain_Truth_Ratio",
    "real_authors_prob": "ra_Q_A_Prob_normalised",
    "real_authors_rouge": "ra_Q_A_ROUGE",
    "real_authors_truth_ratio": "ra_Truth_Ratio",
    "world_facts_prob": "wf_Q_A_Prob_normalised",
    "world_facts_rouge": "wf_Q_A_ROUGE",
    "world_facts_truth_ratio": "wf_Truth_Ratio",
}

# LACUNA's relearning-attack summary under upstream's names (extraction_leakage.py): what a run's
# attack records (unlearning/relearn.py) and what an imported extraction_leakage.json carries
# (registry/lacuna_summary.py)
LACUNA_LEAKAGE: tuple[str, ...] = (
    "attempts",
    "total_forget_people",
    "still_leaking_after_unlearn",
    "forgotten_by_unlearn",
    "resurfaced_after_relearn",
    "pct_resurfaced_of_forgotten",
)

MEANINGS: dict[str, str] = {
    "forget_quality": "KS-test p-value of the forget truth ratios against the retain model's; "
    "higher = closer to a model never trained on the forget set",
    "model_utility": "harmonic mean of the nine retain / real-authors / world-facts "
    "probabilities, ROUGE-L and truth ratios; higher = more kept",
}


def display_name(component: str) -> str:
    """The name a component is shown under: open-unlearning's where it has one."""
    return OPEN_UNLEARNING.get(component, component)


def sql_values() -> str:
    """``OPEN_UNLEARNING`` as the rows of a SQL ``VALUES`` list (the registry's view)."""
    return ",\n    ".join(f"('{c}', '{n}')" for c, n in OPEN_UNLEARNING.items())
