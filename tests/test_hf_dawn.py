"""DAWN on Hugging Face backbones (paper profile): attention probabilities from a LLaDA-style model (its blocks'
``_scaled_dot_product_attention``; its forward refuses ``output_attentions``) and from a transformers model
(``output_attentions=True``), checked against softmax(q k^T / sqrt(d)) computed by hand, offline, tiny."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from unie.dllm.backbone import DecodeOptions
from unie.dllm.dawn import DAWNOptions, attention_preflight, dawn_decode
from unie.models.hf import HFDiffusionLM

V, D, H = 12, 16, 2


class Block(nn.Module):
    """LLaDA's block layout in miniature: attention through ``_scaled_dot_product_attention(q, k, v, attn_mask,
    dropout_p, is_causal)`` with SDPA (no probabilities)."""

    def __init__(self):
        super().__init__()
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)

    def qkv_heads(self, x):
        B, L, _ = x.shape
        return self.qkv(x).view(B, L, 3, H, D // H).permute(2, 0, 3, 1, 4)  # 3 x (B, H, L, d)

    def _scaled_dot_product_attention(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal)

    def forward(self, x):
        q, k, v = self.qkv_heads(x)
        a = self._scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False)
        return x + self.o(a.transpose(1, 2).reshape(x.shape))


class TinyLLaDA(nn.Module):
    def __init__(self, n_layers=3, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb, self.head = nn.Embedding(V, D), nn.Linear(D, V)
        self.blocks = nn.ModuleList(Block() for _ in range(n_layers))

    def forward(self, x, output_attentions=None):
        if output_attentions:
            raise ValueError("output_attentions is not yet supported in LLaDA")
        h = self.emb(x)
        for b in self.blocks:
            h = b(h)
        return SimpleNamespace(logits=self.head(h))


def wrapped(model, shift=False):
    return HFDiffusionLM(
        model.eval(), None, mask_id=V - 1, eos_id=V - 2, shift=shift, vocab_size=V, style="llada", path="tiny"
    )


def by_hand(model, x, n_layers):
    """softmax(q k^T / sqrt(d)) of the last ``n_layers`` blocks, heads and layers averaged, from their inputs."""
    inputs = []
    hooks = [b.register_forward_pre_hook(lambda m, a: inputs.append(a[0])) for b in model.blocks]
    model(x)
    for h in hooks:
        h.remove()
    probs = []
    for b, h in zip(model.blocks[-n_layers:], inputs[-n_layers:]):
        q, k, _ = b.qkv_heads(h)
        probs.append((q @ k.transpose(-2, -1) / math.sqrt(D // H)).softmax(-1).mean(1))
    return torch.stack(probs).mean(0)


@pytest.mark.parametrize("shift", [False, True])
def test_llada_style_attention_by_hand_and_logits_unchanged(shift):
    model = TinyLLaDA()
    b = wrapped(model, shift)
    x = torch.randint(0, V - 2, (2, 7))
    x[:, 4:] = V - 1
    logits, A = b.logits_and_attention(x, 2)
    assert torch.equal(logits, b.logits(x))  # the model's own attention is untouched
    assert A.shape == (2, 7, 7) and A.dtype == torch.float32
    assert torch.allclose(A, by_hand(model, x, 2), atol=1e-6)
    assert torch.allclose(A.sum(-1), torch.ones(2, 7), atol=1e-5)
    assert all("_scaled_dot_product_attention" not in vars(m) for m in model.blocks)  # restored


def test_llada_style_too_many_layers_is_named():
    with pytest.raises(ValueError, match="attn_layers=4 but tiny has 3"):
        wrapped(TinyLLaDA()).logits_and_attention(torch.zeros(1, 3, dtype=torch.long), 4)


def test_dawn_decodes_an_hf_llada_style_backbone():
    b = wrapped(TinyLLaDA())
    attention_preflight(b, DAWNOptions(attn_layers=2))
    x = torch.cat([torch.randint(0, V - 2, (2, 5)), torch.full((2, 4), V - 1)], dim=1)
    out, stats = dawn_decode(
        b, x, DecodeOptions(gen_length=4, block_length=4, tokens_per_step=1), DAWNOptions(attn_layers=2)
    )
    assert not (out == V - 1).any() and torch.equal(out[:, :5], x[:, :5]) and 1 <= stats["nfe"] <= 4


class VariantBlock(Block):
    """LLaDA's other attention paths in miniature: grouped keys (4 query heads over 2 key/value heads, repeated
    inside the method as LLaDA does), a bool or additive float mask, a causal flag.  ``fail``: the forward raises
    after the attention."""

    def __init__(self, mask: str | None, causal: bool, fail: bool = False):
        super().__init__()
        self.qkv = nn.Linear(D, D + 2 * (D // 2))  # q: 4 heads of 4, k and v: 2 heads of 4
        self.mask, self.causal, self.fail = mask, causal, fail

    def qkv_heads(self, x):
        B, L, _ = x.shape
        q, k, v = self.qkv(x).split([D, D // 2, D // 2], dim=-1)
        return (
            q.view(B, L, 4, 4).transpose(1, 2),
            k.view(B, L, 2, 4).transpose(1, 2),
            v.view(B, L, 2, 4).transpose(1, 2),
        )

    def attn_mask(self, L):
        g = torch.Generator().manual_seed(L)
        keep = (torch.rand(L, L, generator=g) > 0.4) | torch.eye(L, dtype=torch.bool)
        if self.mask == "bool":
            return keep
        if self.mask == "float":
            return torch.where(keep, torch.rand(L, L, generator=g), torch.full((L, L), -math.inf))
        return None

    def _scaled_dot_product_attention(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal)

    def forward(self, x):
        q, k, v = self.qkv_heads(x)
        a = self._scaled_dot_product_attention(
            q, k, v, attn_mask=self.attn_mask(x.shape[1]), dropout_p=0.0, is_causal=self.causal
        )
        if self.fail:
            raise RuntimeError("boom")
        return x + self.o(a.transpose(1, 2).reshape(x.shape))


class OtherNames(VariantBlock):
    """The variant whose method names its arguments ``attention_mask`` and ``dropout``."""

    def _scaled_dot_product_attention(self, q, k, v, attention_mask=None, dropout=0.0, is_causal=False):
        k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, dropout_p=dropout, is_causal=is_causal)

    def forward(self, x):
        q, k, v = self.qkv_heads(x)
        a = self._scaled_dot_product_attention(
            q, k, v, attention_mask=self.attn_mask(x.shape[1]), dropout=0.0, is_causal=self.causal
        )
        return x + self.o(a.transpose(1, 2).reshape(x.shape))


def sdpa_probs(block, h):
    """The probabilities SDPA itself applies (its output for v = the identity), heads averaged."""
    q, k, _ = block.qkv_heads(h)
    L = h.shape[1]
    eye = torch.eye(L).expand(q.shape[0], 4, L, L)
    return F.scaled_dot_product_attention(
        q, k.repeat_interleave(2, dim=1), eye, attn_mask=block.attn_mask(L), is_causal=block.causal
    ).mean(1)


@pytest.mark.parametrize("mask,causal", [(None, False), ("bool", False), ("float", False), (None, True)])
@pytest.mark.parametrize("cls", [VariantBlock, OtherNames])
def test_llada_style_attention_with_grouped_keys_masks_and_other_argument_names(mask, causal, cls):
    model = TinyLLaDA(n_layers=2)
    model.blocks = nn.ModuleList(cls(mask, causal) for _ in range(2))
    x = torch.randint(0, V - 2, (2, 7))
    inputs = []
    hooks = [blk.register_forward_pre_hook(lambda m, a: inputs.append(a[0])) for blk in model.blocks]
    logits, A = wrapped(model).logits_and_attention(x, 2)
    for h in hooks:
        h.remove()
    want = torch.stack([sdpa_probs(blk, h) for blk, h in zip(model.blocks, inputs)]).mean(0)
    assert torch.allclose(A, want, atol=1e-6)
    assert torch.equal(logits, wrapped(model).logits(x))
    assert all("_scaled_dot_product_attention" not in vars(m) for m in model.blocks)


def test_the_wrapper_is_removed_when_the_forward_raises():
    model = TinyLLaDA(n_layers=2)
    model.blocks = nn.ModuleList([VariantBlock(None, False), VariantBlock(None, False, fail=True)])
    with pytest.raises(RuntimeError, match="boom"):
        wrapped(model).logits_and_attention(torch.zeros(1, 4, dtype=torch.long), 2)
    assert all("_scaled_dot_product_attention" not in vars(m) for m in model.blocks)


def _tiny_llama(eager: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=V,
        hidden_size=D,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=H,
        num_key_value_heads=H,
        max_position_embeddings=32,
    )
    model = LlamaForCausalLM(cfg).eval()
    model.set_attn_implementation("eager" if eager else "sdpa")
    return model


def test_transformers_model_through_output_attentions():
    model = _tiny_llama(eager=True)
    b = wrapped(model)
    x = torch.randint(0, V - 2, (2, 6))
    logits, A = b.logits_and_attention(x, 1)
    ref = model(x, output_attentions=True)
    assert torch.allclose(logits, ref.logits.float()) and A.shape == (2, 6, 6)
    assert torch.allclose(A, ref.attentions[-1].float().mean(1))
    assert torch.allclose(A.sum(-1), torch.ones(2, 6), atol=1e-5)


def test_preflight_names_a_backbone_without_attention_probabilities():
    class NoAttn(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))

        def forward(self, x, output_attentions=None):
            return SimpleNamespace(logits=torch.zeros(*x.shape, V), attentions=None)

    with pytest.raises(TypeError, match="attn_implementation='eager'"):
        attention_preflight(wrapped(NoAttn()), DAWNOptions())
