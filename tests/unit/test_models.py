import pytest
import torch

from supportbench.errors import SupportbenchError, UnknownNameError
from supportbench.unlearning.models import (
    BUILD_THREADS,
    get_preset,
    load_model,
    model_hash,
    reproducible_build,
    resolve_device,
    save_model,
)


def test_save_load_roundtrip_is_exact(tiny_model, tiny_tokenizer, tmp_path):
    save_model(tiny_model, tiny_tokenizer, tmp_path / "m")
    assert (tmp_path / "m" / "model.safetensors").exists()
    assert not list((tmp_path / "m").glob("*.bin")), "weights are saved with safetensors only"
    model, tok = load_model(tmp_path / "m")
    assert model_hash(model) == model_hash(tiny_model)
    ids = torch.tensor([tok("Q: Who is Ada Quill?\nA: ")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, tiny_model(ids).logits)


def test_tokenizer_decodes_losslessly(tiny_tokenizer):
    text = "Ada Quill was born in Port Varnel."
    assert (
        tiny_tokenizer.decode(tiny_tokenizer(text, add_special_tokens=False)["input_ids"]) == text
    )


def test_bad_model_path_and_preset(tmp_path):
    with pytest.raises(SupportbenchError, match="no model at"):
        load_model(tmp_path / "nothing")
    with pytest.raises(UnknownNameError, match="Did you mean 'tiny-llama'"):
        get_preset("tiny-lama")


def test_resolve_device():
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(SupportbenchError, match="unknown device 'gpu0'.*auto, cpu, cuda or cuda:N"):
        resolve_device("gpu0")


def test_reproducible_build_pins_threads_seeds_and_restores():
    """theta_0 builds on BUILD_THREADS threads from a seeded global RNG; the caller's count and RNG
    come back."""
    prev_threads, prev_state = torch.get_num_threads(), torch.get_rng_state()
    torch.set_num_threads(2)
    try:
        draws = []
        for _ in range(2):
            with reproducible_build(seed=3):
                assert torch.get_num_threads() == BUILD_THREADS
                draws.append(torch.rand(4))
            assert torch.get_num_threads() == 2
        assert torch.equal(*draws)
        assert torch.equal(torch.get_rng_state(), prev_state)
    finally:
        torch.set_num_threads(prev_threads)


def test_a_checkpoint_missing_a_tensor_is_refused(tiny_model, tiny_tokenizer, tmp_path):
    """transformers would initialise a missing tensor (a norm) afresh and the run would look ok."""
    from safetensors.torch import load_file, save_file

    save_model(tiny_model, tiny_tokenizer, tmp_path / "m")
    (weights,) = (tmp_path / "m").glob("*.safetensors")
    tensors = load_file(weights)
    norm = next(k for k in sorted(tensors) if "norm" in k)
    del tensors[norm]
    save_file(tensors, weights, metadata={"format": "pt"})
    with pytest.raises(
        SupportbenchError, match=rf"its weights lack 1 tensor\(s\) the config needs: {norm}"
    ):
        load_model(tmp_path / "m")
