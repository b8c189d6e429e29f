import pytest
import torch


@pytest.fixture(scope="session")
def tiny_qwen2_lora():
    """A builder of the controlled interfaces' tiny test model: a 2-layer Qwen2 (d_model 32, d_ff
    96) seeded with 0, its last layer's interfaces at rank 3 (4 neurons = 3 x (96 + 32) / (3 x 32))
    and the LoRA attached. Returns ``build(vocab_size) -> (model, itf)``, a fresh model per call."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from supportbench.benchmarks.controlled import interfaces as interfaces

    def build(vocab_size: int):
        torch.manual_seed(0)
        base = Qwen2ForCausalLM(
            Qwen2Config(
                vocab_size=vocab_size,
                hidden_size=32,
                intermediate_size=96,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=2,
                tie_word_embeddings=False,
                use_sliding_window=False,
            )
        )
        itf = interfaces.make_interfaces(base, -1, 3, seed=0)
        return interfaces.attach_lora(base, itf), itf

    return build
