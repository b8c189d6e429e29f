"""LACUNA: the reader on hand-written real-format files, mask bits, precision against numpy, bad
input."""

import numpy as np
import polars as pl
import pytest
import torch
from scipy.stats import rankdata

from supportbench.benchmarks.lacuna import precision as precision
from supportbench.benchmarks.lacuna.generator import build_mask, generate
from supportbench.benchmarks.lacuna.reader import (
    FIELDS,
    LacunaFormatError,
    bits_set,
    check_groups_have_bits,
    group_bits,
    load_mask,
    read_split,
    resolve_layout,
)
from supportbench.errors import UnknownNameError

ROWS = [
    {
        "ID": "p1",
        "question": "Ann Lee, born in Graz. What is her email address?",
        "answer": "ann.lee@x.org",
        "field": "Email Address",
        "group_id": 0,
    },
    {
        "ID": "p2",
        "question": "Bo Dahl, reachable at 555-0101. What is his email address?",
        "answer": "bo@y.org",
        "field": "Email Address",
        "group_id": 2,
    },
]


def write(path, rows, schema=None):
    pl.DataFrame(
        rows,
        schema=schema
        or {
            "ID": pl.String,
            "question": pl.String,
            "answer": pl.String,
            "field": pl.String,
            "group_id": pl.Int32,
        },
    ).write_parquet(path)


def test_reader_on_hand_written_upstream_files(tmp_path):
    data = tmp_path / "root" / "OLMo-2-0425-1B" / "data-masked" / "data"
    data.mkdir(parents=True)
    write(data / "Email_Address_forget.parquet", ROWS)
    (tmp_path / "root" / "OLMo-2-0425-1B" / "masked" / "intruction_tuned").mkdir(parents=True)
    (
        tmp_path / "root" / "OLMo-2-0425-1B" / "masked" / "intruction_tuned" / "config.json"
    ).write_text("{}")
    for where in (data, tmp_path / "root"):  # the data folder or the artifact root
        lay = resolve_layout(where)
        assert lay.data_dir == data
        assert lay.model_dir == tmp_path / "root" / "OLMo-2-0425-1B" / "masked"
        assert lay.instruct_dir.name == "intruction_tuned"  # upstream's spelling is accepted
    assert read_split(data, "Email_Address", "forget") == ROWS
    before = sorted(p.name for p in (tmp_path / "root").rglob("*"))
    resolve_layout(tmp_path / "root")
    assert sorted(p.name for p in (tmp_path / "root").rglob("*")) == before  # read-only


@pytest.mark.parametrize(
    "rows, schema, says",
    [
        (
            [{k: v for k, v in ROWS[0].items() if k != "group_id"}],
            {"ID": pl.String, "question": pl.String, "answer": pl.String, "field": pl.String},
            r"missing column\(s\) \['group_id'\]",
        ),
        (
            [{**ROWS[0], "group_id": "0"}],
            {
                "ID": pl.String,
                "question": pl.String,
                "answer": pl.String,
                "field": pl.String,
                "group_id": pl.String,
            },
            "column 'group_id' must be an integer",
        ),
        (
            [{**ROWS[0], "ID": 7}],
            {
                "ID": pl.Int64,
                "question": pl.String,
                "answer": pl.String,
                "field": pl.String,
                "group_id": pl.Int32,
            },
            "column 'ID' must be a string column",
        ),
    ],
)
def test_bad_parquet_names_file_and_column(tmp_path, rows, schema, says):
    write(tmp_path / "Email_Address_forget.parquet", rows, schema)
    with pytest.raises(LacunaFormatError, match=f"Email_Address_forget.parquet: {says}"):
        read_split(tmp_path, "Email_Address", "forget")


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        ([], "Email_Address_forget.parquet: no rows"),
        (
            [ROWS[0], {**ROWS[1], "field": "Phone Number"}],
            "Email_Address_forget.parquet: a row's field column "
            "says 'Phone Number', which is not 'Email_Address'",
        ),
    ],
)
def test_a_split_that_is_empty_or_names_another_field_is_refused(tmp_path, rows, says):
    write(tmp_path / "Email_Address_forget.parquet", rows)
    with pytest.raises(LacunaFormatError, match=says):
        read_split(tmp_path, "Email_Address", "forget")


def test_a_model_size_folder_is_accepted(tmp_path):
    size = tmp_path / "root" / "OLMo-2-0425-1B"
    (size / "data-masked" / "data").mkdir(parents=True)
    write(size / "data-masked" / "data" / "Email_Address_forget.parquet", ROWS)
    (size / "masked").mkdir()
    lay = resolve_layout(size)
    assert lay.data_dir == size / "data-masked" / "data" and lay.model_dir == size / "masked"


def test_unknown_field_lists_the_four(tmp_path):
    with pytest.raises(UnknownNameError, match="Email_Address.*Phone_Number|Birth_City"):
        read_split(tmp_path, "Email", "forget")


def test_neither_layout_is_an_error(tmp_path):
    (tmp_path / "something").mkdir()
    with pytest.raises(LacunaFormatError, match="neither a LACUNA data folder"):
        resolve_layout(tmp_path)


def test_mask_bits_decode_per_tensor_and_checks():
    t = torch.tensor([0, 1, 4, 5, 21, 63, -(2**31)], dtype=torch.int32)  # -2^31 = bit 31 alone
    assert bits_set(t, group_bits([0])).tolist() == [False, True, False, True, True, True, False]
    assert bits_set(t, group_bits([2])).tolist() == [False, False, True, True, True, True, False]
    assert bits_set(t, group_bits([0, 2, 4])).tolist() == [
        False,
        True,
        True,
        True,
        True,
        True,
        False,
    ]
    assert bits_set(t, group_bits([31])).tolist() == [False] * 6 + [True]
    assert group_bits([0, 2, 4]) == 21 and group_bits(range(6)) == 63
    check_groups_have_bits({"w": t}, [0, 2, 4, 31])
    with pytest.raises(LacunaFormatError, match=r"forget group\(s\) \[3\] have no mask bits"):
        check_groups_have_bits({"w": torch.tensor([1, 4], dtype=torch.int32)}, [0, 2, 3])


def test_mask_file_checked_against_the_model(tmp_path):
    params = {"a.weight": torch.zeros(2, 3), "b.weight": torch.zeros(4)}
    full = {
        "a.weight": torch.zeros(6, dtype=torch.int32),
        "b.weight": torch.ones(4, dtype=torch.int32),
    }
    torch.save(full, tmp_path / "ok.pt")
    assert set(load_mask(tmp_path / "ok.pt", params)) == {"a.weight", "b.weight"}
    torch.save(
        full, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False
    )  # torch < 1.6's format
    assert load_mask(tmp_path / "legacy.pt", params)["b.weight"].tolist() == [1, 1, 1, 1]
    torch.save({"a.weight": full["a.weight"]}, tmp_path / "partial.pt")  # upstream writes every one
    with pytest.raises(
        LacunaFormatError, match=r"partial.pt: no entry for parameter\(s\) b.weight"
    ):
        load_mask(tmp_path / "partial.pt", params)
    with pytest.raises(LacunaFormatError, match=r"mask file '.*nowhere.pt' does not exist"):
        load_mask(tmp_path / "nowhere.pt", params)
    torch.save({**full, "a.weight": torch.zeros(5, dtype=torch.int32)}, tmp_path / "short.pt")
    with pytest.raises(
        LacunaFormatError, match="'a.weight' has 5 entries but the parameter has 6 scalars"
    ):
        load_mask(tmp_path / "short.pt", params)
    torch.save({**full, "c.weight": torch.zeros(6, dtype=torch.int32)}, tmp_path / "other.pt")
    with pytest.raises(
        LacunaFormatError, match="names parameter 'c.weight', which the model lacks"
    ):
        load_mask(tmp_path / "other.pt", params)


def test_generator_writes_every_upstream_file(tmp_path):
    d = generate(tmp_path, people=12)
    for f in FIELDS:
        for s in ("forget", "retain", "forget_paraphrased", "retain_paraphrased", "full"):
            rows = read_split(d, f, s)
            assert rows and all(r["answer"] and r["question"].endswith("?") for r in rows)
        fg = {r["group_id"] for r in read_split(d, f, "forget")}
        assert fg == {0, 2, 4} and {r["group_id"] for r in read_split(d, f, "retain")} == {1, 3, 5}
        first = {r["ID"]: r["question"] for r in read_split(d, f, "forget")}
        assert all(first[r["ID"]] != r["question"] for r in read_split(d, f, "forget_paraphrased"))


@pytest.mark.parametrize("mode", ["element", "component"])
def test_masks_built_the_lacuna_way(mode):
    from transformers import Olmo3Config, Olmo3ForCausalLM

    cfg = Olmo3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        layer_types=["full_attention"] * 4,
    )
    model = Olmo3ForCausalLM(cfg)
    mask = build_mask(model, mode, ratio=0.1)
    params = dict(model.named_parameters())
    assert set(mask) == set(params) and all(mask[n].numel() == p.numel() for n, p in params.items())
    for n, t in mask.items():
        if "layers.2." in n or "layers.3." in n or "norm" in n or "embed_tokens" in n:
            assert not t.any(), n  # outside LACUNA's mask domain
    if mode == "element":
        act = [t for n, t in mask.items() if t.any()]
        share = [
            sum(int(bits_set(t, 1 << g).sum()) for t in act) / sum(t.numel() for t in act)
            for g in range(6)
        ]
        assert all(abs(s - 0.1) < 0.02 for s in share)
        assert all(
            int((t & (t - 1)).count_nonzero()) == 0 for t in act
        )  # one bit at most: disjoint groups
    else:
        down = mask["model.layers.0.mlp.down_proj.weight"].view(32, 48)
        up = mask["model.layers.0.mlp.up_proj.weight"].view(48, 32)
        assert torch.equal(down[0], up[:, 0]) and torch.equal(
            down.min(0).values, down.max(0).values
        )  # whole neurons


# ---- localization precision ----------------------------------------------------------------------
def numpy_reference(scores: np.ndarray, labels: np.ndarray, ks=(0.1, 1, 5, 10)):
    r = rankdata(scores)  # average ranks: ties as halves
    P_, N_ = labels.sum(), len(labels) - labels.sum()
    auroc = (r[labels].sum() - P_ * (P_ + 1) / 2) / (P_ * N_)
    prec = {}
    order = np.argsort(-scores, kind="stable")
    s_sorted = scores[order]
    for k in ks:
        K = int(len(scores) * k / 100)
        if K == 0:
            prec[f"{k:g}"] = None
            continue
        thr = s_sorted[K - 1]
        above = scores > thr
        tied = scores == thr
        take = K - above.sum()
        prec[f"{k:g}"] = (labels[above].sum() + take * labels[tied].mean()) / K
    return auroc, prec


def make(seed, n=5000, tie_step=0.05):
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.2
    s = np.round(rng.gamma(2.0, size=n) + 0.6 * y, 2) // tie_step * tie_step
    s[rng.random(n) < 0.4] = 0.0  # untouched scalars
    return s.astype(np.float32), y


def sources_of(s, y, parts=3):
    cut = np.array_split(np.arange(len(s)), parts)
    m = np.where(y, 1 << 2, 1 << 1).astype(np.int32)
    return lambda: [
        (
            f"w{i}",
            len(c),
            (lambda a, b, c=c: (torch.from_numpy(s[c][a:b]), torch.from_numpy(m[c][a:b]))),
        )
        for i, c in enumerate(cut)
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_precision_equals_numpy_ranks_with_ties(seed):
    s, y = make(seed)
    want_auc, want_p = numpy_reference(s.astype(np.float64), y)
    got = precision.localization_precision(sources_of(s, y), {"f": 1 << 2}, chunk=700)["f"]
    assert got.mode == "exact" and got.auroc == pytest.approx(want_auc, abs=1e-12)
    for k, v in want_p.items():
        assert got.precision_at[k] == pytest.approx(v, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_histogram_mode_stays_within_its_stated_bound(seed):
    rng = np.random.default_rng(seed)
    y = rng.random(20000) < 0.3
    s = (rng.lognormal(size=20000) * (1 + y)).astype(np.float32)
    s[rng.random(20000) < 0.3] = 0.0
    exact = precision.localization_precision(sources_of(s, y), {"f": 4}, chunk=3000)["f"]
    for bins in (64, 4096):
        h = precision.localization_precision(
            sources_of(s, y), {"f": 4}, max_exact=100, bins=bins, chunk=3000
        )["f"]
        assert h.mode == "histogram"
        assert abs(h.auroc - exact.auroc) <= h.auroc_bound + 1e-12
        for k in exact.precision_at:
            assert abs(h.precision_at[k] - exact.precision_at[k]) <= h.precision_bound + 1e-12
    fine = precision.localization_precision(
        sources_of(s, y), {"f": 4}, max_exact=100, bins=1 << 16, chunk=3000
    )["f"]
    assert fine.auroc_bound < 1e-3


def test_tensor_without_both_classes_is_left_out():
    s = np.ones(10, dtype=np.float32)
    ones = np.ones(10, dtype=np.int32) * 4
    src = (  # noqa: E731
        lambda: [
            ("all_pos", 10, lambda a, b: (torch.from_numpy(s[a:b]), torch.from_numpy(ones[a:b])))
        ]
    )
    r = precision.localization_precision(src, {"f": 4})["f"]
    assert r.n == 0 and r.auroc is None and r.skipped == ["all_pos"]


def test_a_mask_outside_the_named_data_folder_must_be_named(tmp_path):
    """The run key knows the paths a run names by their content: a mask.pt found next to, not
    inside, the data folder would change the numbers without changing the key, so it must be named
    (or the root given)."""
    from supportbench.benchmarks.lacuna.adapter import Lacuna
    from supportbench.errors import SpecError

    size = tmp_path / "root" / "OLMo-2-0425-1B"
    data = size / "data-masked" / "data"
    data.mkdir(parents=True)
    write(data / "Email_Address_forget.parquet", ROWS)
    (size / "masked").mkdir()
    torch.save({"w": torch.zeros(1, dtype=torch.int32)}, size / "masked" / "mask.pt")
    with pytest.raises(
        SpecError, match=r"outside benchmark.data_dir .*name it with benchmark.mask="
    ):
        Lacuna(data_dir=str(data), cache_dir=tmp_path / "c", progress=False)
    assert (
        Lacuna(
            data_dir=str(data),
            mask=str(size / "masked" / "mask.pt"),
            cache_dir=tmp_path / "c",
            progress=False,
        ).mask_file
        == size / "masked" / "mask.pt"
    )
    assert (
        Lacuna(data_dir=str(tmp_path / "root"), cache_dir=tmp_path / "c", progress=False).mask_file
        == size / "masked" / "mask.pt"
    )
