"""DCD_autoregressive (docs/baselines.md): chunks revealed left to right, the causal pass of the
denoiser, the re-weighted AR logits, and the reduction to plain AR sampling."""

from __future__ import annotations

import math

import pytest
import torch

import unie.methods.dcd as dcd
from unie.methods.ar import ARModel
from unie.methods.mdlm import MDLMDenoiser, subs_logp
from unie.core.registry import SAMPLERS
from unie.methods.dcd import chunk_bounds, dm_chunk_logratio, sample_dcd
from unie.core.schedule import make_schedule
from unie.data.tokenizer import blocked_ids


class RecordingNet:
    """Forwards to a network and records every input and whether the pass was causal."""

    def __init__(self, net):
        self.net, self.cfg, self.calls = net, net.cfg, []

    @property
    def device(self):
        return self.net.device

    def __call__(self, x, **kw):
        self.calls.append((x.clone(), bool(kw.get("causal", False))))
        return self.net(x, **kw)


@pytest.fixture
def models(net_factory, tok, tok_info):
    dlm = MDLMDenoiser(net_factory(max_len=16, seed=1), tok.mask_id, blocked_ids(tok_info))
    proxy = ARModel(net_factory(causal=True, max_len=16, seed=2), tok.bos_id, tok.mask_id)
    return dlm, proxy


@pytest.mark.parametrize("L", [8, 12, 16])
@pytest.mark.parametrize("steps", [1, 2, 4, 5, 16])
def test_chunk_bounds_are_contiguous_left_to_right(L, steps):
    b = chunk_bounds(steps, L, make_schedule("loglinear"))
    assert len(b) == steps and b[0][0] == 0 and b[-1][1] == L
    assert all(s <= e for s, e in b) and all(b[k][1] == b[k + 1][0] for k in range(steps - 1))
    sizes = [e - s for s, e in b]
    assert max(sizes) <= -(-L // steps) + 1  # about L/S per step


def test_causal_pass_differs_and_only_looks_left(models, tok):
    dlm, _ = models
    x = torch.tensor([[3, 8, 1, tok.mask_id, tok.mask_id, 5, tok.mask_id, 2]])
    with torch.no_grad():
        bi, ca = dlm.net(x), dlm.net(x, causal=True)
        assert not torch.allclose(bi, ca, atol=1e-4)
        y = x.clone()
        y[0, 5:] = 7  # change the right context
        assert torch.allclose(dlm.net(y, causal=True)[:, :5], ca[:, :5], atol=1e-6)
        assert not torch.allclose(dlm.net(y)[:, :5], bi[:, :5], atol=1e-4)
        assert torch.allclose(dlm.net(x[:, :1], causal=True), ca[:, :1], atol=1e-5)  # position 0 sees itself only
    r = dm_chunk_logratio(dlm, x, 3, 7)
    assert r.shape == (1, 4, tok.vocab_size) and r.dtype == torch.float64 and torch.isfinite(r).all()
    assert (r[..., tok.mask_id] == 0).all() and (r[..., tok.bos_id] == 0).all()  # both clipped at 1e-16


def test_no_masks_shapes_determinism_stats(models, tok):
    dlm, proxy = models
    L, n = 12, 7
    a, st = sample_dcd(dlm, proxy, n, L, 4, torch.Generator().manual_seed(0), batch_size=4)
    b, _ = sample_dcd(dlm, proxy, n, L, 4, torch.Generator().manual_seed(0), batch_size=4)
    c, _ = sample_dcd(dlm, proxy, n, L, 4, torch.Generator().manual_seed(1), batch_size=4)
    d, _ = SAMPLERS["dcd"]({"dlm": dlm, "proxy": proxy}, n, L, 4, torch.Generator().manual_seed(0), batch_size=4)
    assert a.shape == (n, L) and a.dtype == torch.int64
    assert torch.equal(a, b) and torch.equal(a, d) and not torch.equal(a, c)
    assert not (a == tok.mask_id).any() and not (a == tok.bos_id).any()
    assert st == {"nfe": 2 * 4 * 2, "ar_steps": L * 2}  # 2 DM passes per step, L AR passes, per batch


@pytest.mark.parametrize("steps", [2, 4, 16])
def test_alpha_zero_is_the_proxy_ancestral_sampler(models, steps):
    dlm, proxy = models
    x, _ = sample_dcd(dlm, proxy, 9, 16, steps, torch.Generator().manual_seed(3), alpha=0.0, batch_size=5)
    y = proxy.sample(9, 16, torch.Generator().manual_seed(3), batch_size=5)
    assert torch.equal(x, y)
    # the copula re-weighting does something (a random tiny DM is nearly flat: a large alpha makes it visible)
    z, _ = sample_dcd(dlm, proxy, 9, 16, steps, torch.Generator().manual_seed(3), alpha=100.0, batch_size=5)
    assert not torch.equal(x, z)


def test_a_causal_dm_adds_nothing_to_the_ar(net_factory, tok, tok_info, models):
    """If the DM's bidirectional pass equals its causal pass (a causal network), log nc - log c = 0 and DCD is
    the AR sampler for any alpha: the correction only carries what the right context adds."""
    _, proxy = models
    causal_dlm = MDLMDenoiser(net_factory(causal=True, max_len=16, seed=4), tok.mask_id, blocked_ids(tok_info))
    x, _ = sample_dcd(causal_dlm, proxy, 6, 12, 3, torch.Generator().manual_seed(0), alpha=1.0)
    assert torch.equal(x, proxy.sample(6, 12, torch.Generator().manual_seed(0)))


def test_chunks_revealed_strictly_left_to_right(models, tok):
    dlm, proxy = models
    L, steps = 16, 5
    rec = RecordingNet(dlm.net)
    spy = MDLMDenoiser(rec, tok.mask_id, dlm.blocked)
    x, _ = sample_dcd(spy, proxy, 3, L, steps, torch.Generator().manual_seed(0))
    bounds = [(s, e) for s, e in chunk_bounds(steps, L, make_schedule("loglinear")) if e > s]
    assert [c for _, c in rec.calls] == [False, True] * len(bounds)  # bidirectional then causal, each step
    for k, (sid, _) in enumerate(bounds):
        seen = rec.calls[2 * k][0]
        assert torch.equal(rec.calls[2 * k + 1][0], seen)
        assert (seen[:, sid:] == tok.mask_id).all() and not (seen[:, :sid] == tok.mask_id).any()
        assert torch.equal(seen[:, :sid], x[:, :sid])  # revealed tokens are never changed afterwards


def test_sampled_logits_are_ar_plus_alpha_log_ratio(models, tok, monkeypatch):
    """One step (S = 1, the chunk is the whole sequence): the logits fed to Gumbel-max at position i are
    log p_AR(. | x_<i) + alpha (log nc_i - log c_i), nc/c from the DM on the all-masked state."""
    dlm, proxy = models
    L, alpha, seen = 6, 0.7, []
    real = dcd.gumbel_argmax

    def spy(logits, generator):
        assert logits.dtype == torch.float64
        seen.append(logits.clone())
        return real(logits, generator)

    monkeypatch.setattr(dcd, "gumbel_argmax", spy)
    x, _ = sample_dcd(dlm, proxy, 4, L, 1, torch.Generator().manual_seed(0), alpha=alpha)
    xt = torch.full((4, L), tok.mask_id)
    floor = math.log(1e-16)
    with torch.no_grad():
        nc = subs_logp(dlm.net(xt), xt, tok.mask_id, dlm.blocked).double().clamp(min=floor)
        c = subs_logp(dlm.net(xt, causal=True), xt, tok.mask_id, dlm.blocked).double().clamp(min=floor)
    ar = proxy.logp_next(x).double()
    want = ar + alpha * (nc - c)
    got = torch.stack(seen, dim=1)
    assert got.shape == (4, L, tok.vocab_size)
    finite = torch.isfinite(want)
    assert torch.equal(finite, torch.isfinite(got)) and (~finite[..., tok.mask_id]).all()
    assert torch.allclose(got[finite], want[finite], atol=1e-4)
