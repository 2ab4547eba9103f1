"""The attention layer rotates q and k together on a contiguous (B, L, 2H, Dh) copy (a speed-up): its outputs and
gradients must equal, bit for bit, the textbook layer that rotates the permuted q and k one by one."""

import math

import pytest
import torch
import torch.nn.functional as F

from unie.core.options import ModelConfig
from unie.models import transformer as T


def reference_forward(self, h, cos, sin, causal, attn_mask=None, cache=None, probs=None):
    """The layer before the change: q, k, v permuted to (B, H, L, Dh), q and k rotated separately."""
    B, L, D = h.shape
    q, k, v = self.qkv(h).view(B, L, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)

    def rot(x):
        x1, x2 = x.chunk(2, dim=-1)
        return (x * cos + torch.cat([-x2, x1], dim=-1) * sin).type_as(x)

    q, k = rot(q), rot(k)
    if cache is not None:
        if "k" in cache:
            k = torch.cat([cache["k"], k], dim=2)
            v = torch.cat([cache["v"], v], dim=2)
        cache["k"], cache["v"] = k, v
    is_causal = causal and attn_mask is None and k.shape[2] == L and L > 1
    if causal and attn_mask is None and k.shape[2] != L and L > 1:
        past = k.shape[2] - L
        attn_mask = torch.ones(L, k.shape[2], dtype=torch.bool, device=h.device).tril(diagonal=past)
    if probs is not None:
        probs.append(T.attention_probs(q, k, attn_mask, is_causal))
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=self.dropout if self.training else 0.0
    )
    return self.proj(out.transpose(1, 2).reshape(B, L, D))


def run_both(monkeypatch, net, fn):
    """``fn(net)`` with the layer as it is and with the reference layer."""
    got = fn(net)
    with monkeypatch.context() as m:
        m.setattr(T.Attention, "forward", reference_forward)
        want = fn(net)
    return got, want


@pytest.mark.parametrize("causal,cond", [(False, 0), (True, 0), (False, 32)])
def test_logits_and_gradients_bit_identical(monkeypatch, causal, cond):
    torch.manual_seed(0)
    net = T.Transformer(ModelConfig(vocab_size=50, d_model=48, n_layers=2, n_heads=4, causal=causal, cond_dim=cond))
    for p in net.parameters():  # adaLN starts at zero: give it weights so the test sees it
        torch.nn.init.normal_(p, std=0.1)
    x = torch.randint(0, 50, (2, 13))
    kw = {"sigma": torch.rand(2)} if cond else {}

    def fwd_bwd(n):
        n.zero_grad()
        out = n(x, **kw)
        out.log_softmax(-1)[..., 3].sum().backward()
        return out.detach(), [p.grad.clone() for p in n.parameters()]

    (a, ga), (b, gb) = run_both(monkeypatch, net, fwd_bwd)
    assert torch.equal(a, b)
    assert all(torch.equal(u, v) for u, v in zip(ga, gb))


def test_mask_cache_and_attention_probs_bit_identical(monkeypatch):
    torch.manual_seed(1)
    net = T.Transformer(ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=2, causal=True)).eval()
    x = torch.randint(0, 40, (3, 9))
    mask = torch.rand(3, 1, 9, 9) > 0.3
    mask |= torch.eye(9, dtype=torch.bool)

    def all_paths(n):
        with torch.no_grad():
            masked = n(x, attn_mask=mask)
            cache = n.new_cache()
            first = n(x[:, :5], cache=cache)
            rest = n(x[:, 5:], cache=cache)  # cached decoding of several new tokens
            logits, probs = n(x, causal=False, return_attn=2)
        return [masked, first, rest, logits, *probs]

    got, want = run_both(monkeypatch, net, all_paths)
    assert all(torch.equal(u, v) for u, v in zip(got, want))


def test_apply_rotary_is_a_rotation():
    """Each (i, i + Dh/2) pair is rotated by its position's angle: norms kept, position 0 unchanged."""
    cos, sin = T.rotary_tables(torch.arange(6), 8)
    x = torch.randn(2, 3, 6, 8)
    y = T.apply_rotary(x, cos, sin)
    pairs = lambda t: torch.stack([t[..., :4], t[..., 4:]], -1).norm(dim=-1)  # noqa: E731
    assert torch.allclose(pairs(x), pairs(y), atol=1e-6)
    assert torch.equal(y[:, :, 0], x[:, :, 0])
    theta = 1.0 * 10000 ** (-0 / 8)  # position 1, first frequency
    assert torch.allclose(y[..., 1, 0], x[..., 1, 0] * math.cos(theta) - x[..., 1, 4] * math.sin(theta), atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_apply_rotary_rounds_as_the_textbook_formula_in_any_dtype(dtype):
    """Half-precision q/k with float32 tables: both products in float32, one rounding at the end (a product
    rounded to half precision first would differ in about a tenth of the elements)."""
    torch.manual_seed(2)
    cos, sin = T.rotary_tables(torch.arange(7), 16)
    x = torch.randn(2, 3, 7, 16).to(dtype)
    x1, x2 = x.chunk(2, dim=-1)
    want = (x * cos + torch.cat([-x2, x1], dim=-1) * sin).type_as(x)
    got = T.apply_rotary(x, cos, sin)
    assert got.dtype == dtype and torch.equal(got, want)
