"""docs/findings.md cannot go stale: its stamp must name the code of this tree — the reports code
that wrote it and, for every run of the demo experiment, the code fingerprint the run has under this
tree. Regenerate it after a change that moves either: `make demo`, then
`supportbench report --registry results/demo/registry.duckdb --out results/demo/report --findings docs/findings.md`.
"""  # noqa: E501

from pathlib import Path

from supportbench.experiments.identity import source_hash
from supportbench.experiments.plan import ExperimentSpec
from supportbench.reports.findings import body_hash, read_stamp

DOC = Path(__file__).resolve().parents[2] / "docs" / "findings.md"
REGENERATE = (
    "regenerate it from a fresh `make demo` of this tree: supportbench report --registry "
    "results/demo/registry.duckdb --out results/demo/report --findings docs/findings.md"
)


def test_docs_findings_was_generated_by_this_trees_code():
    from supportbench.harness.fingerprint import fingerprint
    from supportbench.harness.resolve import resolve

    stamp = read_stamp(DOC.read_text(encoding="utf-8"))
    assert stamp is not None, f"docs/findings.md has no provenance stamp; {REGENERATE}"
    assert stamp["reports_code"] == source_hash("reports"), (
        f"the reports code changed since; {REGENERATE}"
    )
    spec = ExperimentSpec.from_toml("mini-paper")
    want = sorted({fingerprint(resolve(s)).hash for s in spec.all_runs()})
    assert stamp["fingerprints"] == want, (
        f"the code behind the demo's runs changed since; {REGENERATE}"
    )
    assert stamp["records"] == len(spec.all_runs())


def test_docs_findings_was_not_edited_by_hand():
    """The stamp hashes the text the report wrote: a verdict changed by hand (review: "not tested"
    edited to "holds" passed the test above) no longer matches it."""
    text = DOC.read_text(encoding="utf-8")
    stamp = read_stamp(text)
    assert stamp is not None and "body" in stamp, f"docs/findings.md has no body hash; {REGENERATE}"
    assert stamp["body"] == body_hash(text), f"docs/findings.md was edited by hand; {REGENERATE}"
    edited = text.replace("not tested", "holds", 1)
    assert edited != text and body_hash(edited) != stamp["body"]  # the check can fail
