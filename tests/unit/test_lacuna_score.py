"""`supportbench lacuna precision` on a directory in upstream's layout: an oracle edit of exactly
the forget groups' scalars scores AUROC 1 and precision@k 1, a random edit of as many scalars scores
about 0.5, every method folder is listed, a bf16 unlearned model is compared with theta_0 cast to
bf16, and nothing is written."""

import json

import pytest
import torch

from supportbench.benchmarks.lacuna.generator import FORGET_GROUPS, build_mask
from supportbench.benchmarks.lacuna.reader import LacunaFormatError, bits_set, group_bits
from supportbench.benchmarks.lacuna.score import score
from supportbench.cli import main
from supportbench.unlearning.models import save_model


def _edit(model, mask, forget: bool, dtype=torch.float32, seed=0):
    m = type(model)(model.config)
    m.load_state_dict(model.state_dict())
    m = m.to(dtype)
    gen = torch.Generator().manual_seed(seed)
    bits = group_bits(FORGET_GROUPS)
    with torch.no_grad():
        for name, p in m.named_parameters():
            sel = bits_set(mask[name], bits).view_as(p)
            if not forget:  # as many scalars, anywhere in the tensor
                sel = torch.rand(p.shape, generator=gen) < sel.float().mean()
            p.view(torch.int16 if dtype == torch.bfloat16 else torch.int32)[sel] += (
                1  # one unit in the last place
            )
    return m


@pytest.fixture()
def artifacts(tiny_model, tiny_tokenizer, tmp_path):
    base = tmp_path / "root" / "OLMo2-1B" / "masked"
    save_model(tiny_model, tiny_tokenizer, base / "intruction_tuned")
    mask = build_mask(tiny_model, "element", 0.1, skip_last=0)
    torch.save(mask, base / "mask.pt")
    for method, m in (
        ("Oracle", _edit(tiny_model, mask, True)),
        ("Random", _edit(tiny_model, mask, False)),
        ("OracleBf16", _edit(tiny_model, mask, True, torch.bfloat16)),
    ):
        save_model(m, tiny_tokenizer, base / "unlearned_models" / "Email_Address" / method)
    (base / "unlearned_models" / "Email_Address" / "empty").mkdir()  # no weights: not a model
    return tmp_path / "root"


def test_oracle_random_and_dtype(artifacts):
    rows = {r.method: r.metrics for r in score(artifacts)}
    assert sorted(rows) == ["Oracle", "OracleBf16", "Random"]
    for m in ("Oracle", "OracleBf16"):
        assert rows[m]["precision_forget_auroc"] == 1.0
        assert all(
            rows[m][f"precision_forget_precision_at_{k}"] in (1.0, None)
            for k in ("0.1", "1", "5", "10")
        )
    assert abs(rows["Random"]["precision_forget_auroc"] - 0.5) < 0.1


def test_the_command_prints_every_folder_and_writes_nothing(artifacts, capsys):
    before = sorted((p.relative_to(artifacts), p.stat().st_mtime_ns) for p in artifacts.rglob("*"))
    assert main(["lacuna", "precision", str(artifacts), "--field", "Email_Address"]) == 0
    out = capsys.readouterr().out
    assert "AUROC" in out and "p@0.1%" in out and "p@10%" in out
    oracle = next(ln for ln in out.splitlines() if ln.split()[1:2] == ["Oracle"])
    assert oracle.split()[2] == "1.0000"
    assert main(["lacuna", "precision", str(artifacts), "--method", "Random", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["method"] == "Random" and 0 <= row["precision_all_auroc"] <= 1
    assert (
        sorted((p.relative_to(artifacts), p.stat().st_mtime_ns) for p in artifacts.rglob("*"))
        == before
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--field", "Email"], "Email"),
        (["--method", "Nope"], "no unlearned model .* for fields|and methods \\['Nope'\\]"),
        (["--size", "7B"], "no 'unlearned_models/'"),
    ],
)
def test_bad_input_is_named(artifacts, capsys, args, message):
    assert main(["lacuna", "precision", str(artifacts), *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    import re

    assert re.search(message, err), err


def test_a_mask_naming_a_tensor_theta0_lacks_is_refused(artifacts):
    base = artifacts / "OLMo2-1B" / "masked"
    mask = torch.load(base / "mask.pt", weights_only=True)
    mask["model.layers.9.mlp.down_proj.weight"] = torch.zeros(4, dtype=torch.int32)
    torch.save(mask, base / "mask.pt")
    with pytest.raises(
        LacunaFormatError, match="names 'model.layers.9.mlp.down_proj.weight', which theta_0"
    ):
        score(artifacts)
