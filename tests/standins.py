"""Stand-ins shared by the tests: a tiny transformers Llama to save with ``save_pretrained`` (the paper profile's
Hugging Face loading paths, offline) and a spy that records every state a DLLM sampler asks its backbone about."""

from __future__ import annotations

import torch


def tiny_llama(vocab: int, seed: int = 0):
    """A 2-layer Llama (hidden 32, 2 heads) with ``vocab`` rows, in eval mode, its weights drawn from ``seed``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval()


class Spy:
    """Wraps a DLLM backbone and records every state ``x`` (a copy) it is asked for logits of in ``seen``."""

    def __init__(self, b):
        self.b, self.seen = b, []
        self.mask_id, self.blocked = b.mask_id, b.blocked

    def logits(self, x):
        self.seen.append(x.clone())
        return self.b.logits(x)
