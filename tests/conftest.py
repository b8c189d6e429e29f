"""Shared tiny, seeded fixtures: a 2-layer Llama with an offline tokenizer and small QA sets."""

from __future__ import annotations

import os
import tempfile

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
# hermetic: hub ids resolve from the Hugging Face cache only, never a network (experiments.hub)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# tests never write into the user's cache (model identities,
# prepared models): one throwaway cache per session
os.environ["SUPPORTBENCH_CACHE"] = tempfile.mkdtemp(prefix="supportbench-test-cache-")

import torch  # noqa: E402

torch.set_num_threads(1)

FACTS = [
    ("Where was Ada Quill born?", "Ada Quill was born in Port Varnel."),
    ("What does Ada Quill write?", "Ada Quill writes gothic sea novels."),
    ("Who inspired Bo Tarrant?", "Bo Tarrant was inspired by his aunt, a clockmaker."),
    ("What award did Bo Tarrant win?", "Bo Tarrant won the Silver Lantern prize."),
    ("Which city does Cy Morrow live in?", "Cy Morrow lives in Elder Bay."),
    ("What is Cy Morrow's first book?", "Cy Morrow's first book is The Glass Orchard."),
    ("What is the capital of France?", "The capital of France is Paris."),
    ("How many legs does a spider have?", "A spider has eight legs."),
]
NEUTRAL = [
    "The weather was mild and the river ran slowly past the old mill.",
    "Numbers can be added, subtracted, multiplied and divided.",
]


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from supportbench.unlearning.models import train_tokenizer

    texts = [q + " " + a for q, a in FACTS] + NEUTRAL
    return train_tokenizer(texts * 4, vocab_size=400)


@pytest.fixture()
def tiny_model(tiny_tokenizer):
    from supportbench.unlearning.models import ModelPreset, build_model

    return build_model(
        ModelPreset(
            hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2
        ),
        tiny_tokenizer,
        seed=0,
    )


@pytest.fixture(scope="session")
def tiny_sets(tiny_tokenizer):
    from supportbench.unlearning.data import tokenize_pairs

    def make(pairs):
        return tokenize_pairs(
            tiny_tokenizer, [f"Q: {q}\nA: " for q, _ in pairs], [a for _, a in pairs]
        )

    return {
        "forget": make(FACTS[:4]),
        "retain": make(FACTS[4:6]),
        "protected": make(FACTS[6:]),
        "neutral": make([(n[:20], n[20:]) for n in NEUTRAL]),
    }


@pytest.fixture(scope="session")
def diag_records(tiny_tokenizer):
    from supportbench.unlearning.data import DiagnosticRecords, tokenize_pairs

    def make(pairs, subjects=None):
        return tokenize_pairs(
            tiny_tokenizer,
            [f"Q: {q}\nA: " for q, _ in pairs],
            [a for _, a in pairs],
            subjects=subjects,
        )

    names = ["Ada Quill", "Ada Quill", "Bo Tarrant", "Bo Tarrant"]
    return DiagnosticRecords(
        F=make(FACTS[:4], names),
        R=make(FACTS[4:6]),
        P=make(FACTS[6:]),
        N=make([(n[:20], n[20:]) for n in NEUTRAL]),
    )


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test`` runs on every core, ``--dist loadgroup``), tests that share
    something costly run on one worker, one after another: the tests that submit to the one-node
    Slurm (two at once would wait for each other's allocation), and each integration module (its
    module-scoped theta_0, minutes to build, is built once instead of once per worker). Unit tests
    go to whichever worker is free."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        if item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.xdist_group("slurm"))
        elif "integration" in item.path.parts:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))


class _GroupsApplied:
    """On an xdist worker with ``--dist loadgroup``, after xdist has read the groups: each grouped
    test's node id must carry its group (``…@group``), else the grouping above is silently off
    (pytest 9.2 stopped reading the ``_nodeid`` xdist 3.8 writes: each integration module's
    theta_0 was built on both workers, minutes each)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        if not getattr(config.option, "loadgroup", False):
            return
        lost = [
            i.nodeid for i in items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid
        ]
        if lost:
            raise pytest.UsageError(
                f"--dist loadgroup did not group {len(lost)} tests (first: {lost[0]}): this "
                f"pytest ({pytest.__version__}) and pytest-xdist do not work together; "
                "pyproject.toml pins the pytest that does"
            )


def pytest_configure(config):
    config.pluginmanager.register(_GroupsApplied(), "supportbench-groups-applied")
