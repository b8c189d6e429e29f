"""Each method's ranking on inputs whose answer is known by construction or computed by hand."""

import math

import pytest
import torch

from supportbench.errors import MethodOutputError, UnknownMethodError
from supportbench.methods.base import (
    METHODS,
    compute_scores,
    get_method,
    list_methods,
    register_method,
)
from supportbench.unlearning.support import Geometry, GeometryTensor

ALL = [
    "activation",
    "activation_down",
    "ap_mlp",
    "fila",
    "grail",
    "intervention_score",
    "memflex",
    "projected_causal",
    "random",
    "storage",
    "wagle",
]


def fake_geometry(weight: torch.Tensor) -> Geometry:
    p = torch.nn.Parameter(weight.clone())
    return Geometry([GeometryTensor("w", "m", p, axis=1, offset=0, n=weight.shape[1])])


class FakeDiag:
    """Hand-made diagnostics on a [rows x cols] geometry: each accessor returns a given tensor."""

    def __init__(self, geometry, seed=0, **tensors):
        self.geometry, self.seed, self.t = geometry, seed, tensors

    def prepare(self, requires):
        pass

    def role_grad(self, q, reduce="mean"):
        return {"w": self.t[f"g{q}_sum" if reduce == "sum" and f"g{q}_sum" in self.t else f"g{q}"]}

    def objective_direction(self):
        return {"w": self.t["u0"]}

    def fisher(self, q, batch_size=4):
        return {"w": self.t[f"fisher{q}"]}

    def random_label_grad(self, q):
        return {"w": self.t[f"rl{q}"]}

    def activations(self):
        return {"mean_abs": self.t["act_abs"], "mean": self.t["act_mean"]}

    def attribution(self, kind):
        return self.t[f"attr_{kind}"]


def cols(*columns):
    """Build a [rows, n] matrix from per-column lists."""
    return torch.tensor(columns, dtype=torch.float64).T.contiguous()


def order(scores):
    return torch.argsort(-scores, stable=True).tolist()


def test_all_eleven_registered():
    from supportbench.catalog import PAPER_METHODS

    assert sorted(PAPER_METHODS) == ALL and set(ALL) <= set(list_methods())


def test_a_new_method_file_is_listed_and_runs(tmp_path):
    """The documented way: one new file in methods/, nothing else edited (a copy of the package, so
    the tree under test is not touched)."""
    import os
    import shutil
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    import supportbench

    src = Path(supportbench.__file__).resolve().parent
    shutil.copytree(src, tmp_path / "supportbench", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "supportbench" / "methods" / "snip.py").write_text(
        textwrap.dedent("""
        \"\"\"SNIP-like saliency (a test's method).\"\"\"
        from dataclasses import dataclass

        import torch

        from supportbench.methods.base import MethodBase, register_method


        @register_method("snip")
        @dataclass
        class Snip(MethodBase):
            provenance = "a test"
            requires = ()
            scale: float = 2.0

            def score(self, diag, geometry):
                return self.scale * torch.arange(geometry.n_groups, dtype=torch.float64)
    """)
    )
    code = textwrap.dedent("""
        import torch
        from supportbench.methods.base import get_method, list_methods
        from supportbench.unlearning.support import Geometry, GeometryTensor
        assert "snip" in list_methods(), list_methods()
        p = torch.nn.Parameter(torch.zeros(2, 3))
        geo = Geometry([GeometryTensor("w", "m", p, axis=1, offset=0, n=3)])
        print(get_method("snip").score(None, geo).tolist())
    """)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0.0, 2.0, 4.0]"


def test_intervention_score_hand_computed():
    geo = fake_geometry(torch.zeros(2, 3))
    u0 = cols([1, 0], [1, 1], [0, 2])
    d = FakeDiag(
        geo,
        u0=u0,
        gF=cols([-2, 0], [-1, -1], [0, -1]),
        gR=cols([0, 0], [-1, 0], [0, 1]),
        gP=cols([0, 0], [0, -2], [0, 0]),
        gN=cols([1, 0], [0, 0], [0, 4]),
    )
    # e_F = -<gF,u0> = [2, 2, 2]; e_R = [0, 1, -2]; e_P = [0, 2, 0]; e_N = [-1, 0, -8]
    eps = 1e-8
    want = torch.tensor(
        [(2 - 0) / (1 + eps), (2 - 2) / (0 + eps), (2 - 0) / (8 + eps)], dtype=torch.float64
    )
    got = get_method("intervention_score", eps=eps).score(d, geo)
    torch.testing.assert_close(got, want)


def test_storage_and_wagle_and_fila_hand_computed():
    w = cols([1.0, 2.0], [3.0, -1.0], [0.5, 0.5])
    geo = fake_geometry(w)
    gF = cols([1.0, 1.0], [0.1, 0.0], [4.0, 4.0])
    gR = cols([0.0, 1e-6], [0.0, 0.0], [2e-6, 0.0])
    d = FakeDiag(
        geo,
        gF=gF,
        gR=gR,
        gF_sum=gF,
        gR_sum=gR,
        fisherF=cols([1.0, 1.0], [4.0, 0.0], [1.0, 1.0]),
        fisherR=cols([0.0, 0.0], [0.0, 0.0], [1.0, 1.0]),
    )
    # storage |sum_i W_ij gF_ij| = [3, 0.3, 4]
    torch.testing.assert_close(
        get_method("storage").score(d, geo), torch.tensor([3.0, 0.3, 4.0], dtype=torch.float64)
    )
    # wagle sum_i |(W - gR/1e-6) * gF| = [|1*1|+|(2-1)*1|,
    # |3*.1|, |(0.5-2)*4|+|0.5*4|] = [2, 0.3, 8]
    torch.testing.assert_close(
        get_method("wagle").score(d, geo), torch.tensor([2.0, 0.3, 8.0], dtype=torch.float64)
    )
    # fila sum_i fF/(1e-5+fR) = [2e5, 4e5, 2/(1+1e-5)]
    want = torch.tensor([2 / 1e-5, 4 / 1e-5, 2 / (1 + 1e-5)], dtype=torch.float64)
    torch.testing.assert_close(get_method("fila").score(d, geo), want)


def test_memflex_eligibility_by_construction():
    geo = fake_geometry(torch.zeros(2, 4))
    rlF = cols([3, 0], [5, 0], [0.1, 0.1], [2, 0.0])
    rlR = cols([0, 1], [1, 0], [0, 1], [1, 1])
    d = FakeDiag(geo, rlF=rlF, rlR=rlR)
    # mean|g_u| = [1.5, 2.5, 0.1, 1.0]; median 1.25 -> large: cols 0, 1.
    # cos: col0 0 (<.92), col1 1 (aligned). eligible = {0} only; it ranks
    # first, the rest follow by magnitude: 1 (2.5), 3 (1.0), 2 (0.1)
    assert order(get_method("memflex").score(d, geo)) == [0, 1, 3, 2]


def test_grail_demotes_forget_and_retain_overlap():
    geo = fake_geometry(torch.zeros(1, 10))
    rlF = torch.arange(10, dtype=torch.float64).view(1, 10)
    rlF[0, 9] = 12.0  # col 9 has the largest |z|
    rlR = torch.zeros(1, 10)
    rlR[0, 9] = 100.0  # col 9 is also top for retain
    d = FakeDiag(geo, rlF=rlF, rlR=rlR)
    got = order(get_method("grail", unlearn_ratio=0.1).score(d, geo))
    zf = ((rlF - rlF.mean()) / rlF.std()).abs().view(-1)
    want = order(zf)
    want.remove(9)
    assert got == want + [9]


def test_grail_takes_percentiles_per_tensor_like_upstream():
    """OP-UR = top-UR(unlearn) ∩ top-UR(retain), both at UR, percentiles within each tensor, written
    out from upstream's get_top_indices_zscore (numpy, unbiased std, ``>=`` np.percentile) on column
    means."""
    import numpy as np

    gen = torch.Generator().manual_seed(3)
    shapes = {"a": (3, 10), "b": (3, 30)}
    ts, off = [], 0
    for k, (r, n) in shapes.items():
        ts.append(
            GeometryTensor(k, k, torch.nn.Parameter(torch.zeros(r, n)), axis=1, offset=off, n=n)
        )
        off += n
    geo = Geometry(ts)
    rl = {
        q: {
            k: torch.randn(*s, generator=gen, dtype=torch.float64) * (100.0 if k == "b" else 1.0)
            for k, s in shapes.items()
        }
        for q in "FR"
    }
    for q in "FR":  # make every tensor hold a column that is top for both sides
        rl[q]["a"][:, 2] += 9.0
        rl[q]["b"][:, 7] += 900.0

    class D:
        def random_label_grad(self, q):
            return rl[q]

    def col_z(g):
        g = g.numpy()
        return np.abs((g - g.mean()) / g.std(ddof=1)).mean(axis=0)

    score, frozen = [], []
    for k in shapes:
        zf, zr = col_z(rl["F"][k]), col_z(rl["R"][k])
        top_f, top_r = zf >= np.percentile(zf, 90), zr >= np.percentile(zr, 90)
        score += list(zf)
        frozen += list(top_f & top_r)
    want = sorted(range(len(score)), key=lambda j: (frozen[j], -score[j], j))
    got = order(get_method("grail").score(D(), geo))
    assert got == want
    assert frozen[2] and frozen[10 + 7] and sum(frozen) >= 2  # one frozen column in each tensor


def test_activation_methods_hand_computed():
    w = cols([3.0, 4.0], [1.0, 0.0], [0.0, 0.1])
    geo = fake_geometry(w)
    d = FakeDiag(
        geo,
        act_abs=torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64),
        act_mean=torch.tensor([-1.0, 2.0, 0.5], dtype=torch.float64),
    )
    assert order(get_method("activation").score(d, geo)) == [2, 1, 0]
    # |mean| * ||W_j|| = [1*5, 2*1, 0.5*0.1]
    torch.testing.assert_close(
        get_method("activation_down").score(d, geo),
        torch.tensor([5.0, 2.0, 0.05], dtype=torch.float64),
    )


def test_attribution_methods_read_their_own_runs():
    geo = fake_geometry(torch.zeros(1, 3))
    d = FakeDiag(
        geo,
        attr_corrupted={
            "signed": torch.tensor([-3.0, 1.0, 2.0]),
            "abs": torch.tensor([3.0, 5.0, 2.0]),
        },
        attr_counterfactual={
            "signed": torch.tensor([0.0, 0.0, 1.0]),
            "abs": torch.tensor([1.0, 9.0, 2.0]),
        },
    )
    assert order(get_method("ap_mlp").score(d, geo)) == [0, 2, 1]
    assert order(get_method("projected_causal").score(d, geo)) == [1, 2, 0]


def test_random_reproducible_per_seed_and_differs():
    geo = fake_geometry(torch.zeros(1, 50))
    r = get_method("random")
    a, b, c = (r.score(FakeDiag(geo, seed=s), geo) for s in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_unknown_method_did_you_mean():
    with pytest.raises(
        UnknownMethodError, match=r"no selection method 'wagel'. Did you mean 'wagle'\?"
    ):
        get_method("wagel")


def test_bad_method_output_is_named():
    geo = fake_geometry(torch.zeros(1, 3))

    @register_method("broken_shape")
    class Broken:
        provenance, requires, hyperparameters = "test", (), {}

        def score(self, diag, geometry):
            return torch.zeros(2)

    @register_method("broken_nan")
    class BrokenNan(Broken):
        def score(self, diag, geometry):
            return torch.tensor([0.0, math.nan, 1.0])

    try:
        with pytest.raises(
            MethodOutputError, match=r"method 'broken_shape' returned scores of shape \(2,\)"
        ):
            compute_scores(get_method("broken_shape"), FakeDiag(geo))
        with pytest.raises(
            MethodOutputError, match=r"method 'broken_nan' returned 1 non-finite scores"
        ):
            compute_scores(get_method("broken_nan"), FakeDiag(geo))
    finally:
        METHODS.unregister("broken_shape")
        METHODS.unregister("broken_nan")


def test_duplicate_registration_rejected():
    from supportbench.errors import DuplicateNameError
    from supportbench.methods.base import METHODS

    METHODS.get("wagle")  # the built-ins load lazily: the name is taken once they are known
    with pytest.raises(DuplicateNameError, match="already registered"):
        register_method("wagle")(type("Other", (), {"score": lambda self, d, g: None}))


def test_registration_refuses_a_class_that_cannot_be_a_method():
    """No score, or provenance/requires annotated into dataclass fields (they would silently become
    hyperparameters, part of every run key): refused at registration, naming the member."""
    import dataclasses

    from supportbench.methods.base import METHODS

    with pytest.raises(
        TypeError, match=r"'no_score' \(NoScore\) has no score\(diagnostics, geometry\)"
    ):
        register_method("no_score")(type("NoScore", (), {"provenance": "x", "requires": ()}))

    @dataclasses.dataclass
    class Annotated:
        eps: float = 1e-8
        provenance: str = "somewhere"
        requires: tuple = ()

        def score(self, diag, geometry):
            return None

    with pytest.raises(TypeError, match=r"declares provenance, requires as a dataclass field"):
        register_method("annotated")(Annotated)
    assert "no_score" not in METHODS and "annotated" not in METHODS

    # @dataclass above @register_method adds the fields
    # after registration: refused when the method is made
    from supportbench.errors import MethodOutputError
    from supportbench.methods.base import get_method

    class Late:
        def score(self, diag, geometry):
            return None

    Late.__annotations__ = {"provenance": str}
    Late.provenance = "somewhere"
    late = dataclasses.dataclass(register_method("late_fields")(Late))
    try:
        with pytest.raises(
            MethodOutputError, match=r"'late_fields' \(.*Late\) declares provenance as a dataclass"
        ):
            get_method("late_fields")
    finally:
        METHODS.unregister("late_fields")
    assert dataclasses.is_dataclass(late)
