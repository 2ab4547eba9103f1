"""ReMDM: the remasking schedules, one step's distribution, eta = 0 is MDLM bit for bit, remasking happens."""

from __future__ import annotations

import math

import pytest
import torch

import unie.methods.remdm as rm
from unie.methods.mdlm import MDLMDenoiser
from unie.core.registry import SAMPLERS
from unie.core.sampling import time_grid
from unie.methods.mdlm import sample_mdlm
from unie.methods.remdm import STRATEGIES, nucleus_filter, remask_sigma, remdm_step, sample_remdm, sigma_max
from unie.core.schedule import make_schedule


@pytest.fixture(scope="module")
def denoiser(net_factory, tok):
    return MDLMDenoiser(net_factory(max_len=8), tok.mask_id, [tok.bos_id])


def grid_alphas(steps=50):
    sched = make_schedule("loglinear")
    a = sched.alpha(time_grid(steps, 1e-5))
    return [(float(a[k]), float(a[k + 1])) for k in range(steps)]


# ---------------------------------------------------------------------- schedules
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("eta_cap,eta_rescale", [(0.05, 0.5), (0.0, 1.0), (2.0, 1.0), (1.0, 0.0), (0.3, 0.9)])
def test_sigma_t_is_within_zero_and_sigma_max(strategy, eta_cap, eta_rescale):
    for steps in (4, 50, 1000):
        for a_t, a_s in grid_alphas(steps):
            smax = sigma_max(a_t, a_s)
            assert smax == min(1.0, (1 - a_s) / a_t)
            sig = remask_sigma(strategy, a_t, a_s, eta_cap, eta_rescale)
            assert 0.0 <= sig <= smax
            # the masked-position probabilities of the ReMDM step are then valid
            reveal = (a_s - (1 - sig) * a_t) / (1 - a_t)
            stay = (1 - a_s - sig * a_t) / (1 - a_t)
            assert -1e-12 <= reveal <= 1 + 1e-12 and -1e-12 <= stay <= 1 + 1e-12
            assert abs(reveal + stay - 1) < 1e-12


def test_schedule_formulas():
    a_t, a_s = 0.5, 0.52  # sigma_max = 0.96
    assert remask_sigma("cap", a_t, a_s, 0.05, 0.5) == 0.05
    assert remask_sigma("rescale", a_t, a_s, 0.05, 0.5) == pytest.approx(0.5 * 0.96)
    assert remask_sigma("cap_rescale", a_t, a_s, 0.05, 0.5) == pytest.approx(0.025)  # the default reading
    a_t, a_s = 0.99, 0.999  # sigma_max ~ 0.00101 < eta_cap
    assert remask_sigma("cap_rescale", a_t, a_s) == pytest.approx(0.5 * (1 - a_s) / a_t)
    with pytest.raises(ValueError, match="cap_rescale"):
        remask_sigma("loop", 0.5, 0.6)


def test_bad_options_are_rejected(denoiser):
    g = torch.Generator().manual_seed(0)
    for kw in ({"strategy": "conf"}, {"eta_rescale": 1.5}, {"eta_cap": -0.1}, {"nucleus": 0.0}):
        with pytest.raises(ValueError):
            sample_remdm(denoiser, 1, 8, 4, g, **kw)


# ---------------------------------------------------------------------- one step
def test_remdm_step_rates():
    """Decoded tokens are remasked w.p. sigma_t; masked ones are revealed w.p.
    (alpha_s - (1 - sigma_t) alpha_t) / (1 - alpha_t)."""
    mask_id, B, L, V = 9, 4000, 8, 10
    g = torch.Generator().manual_seed(0)
    xt = torch.randint(0, 9, (B, L), generator=g)
    xt[:, ::2] = mask_id
    logp = torch.log_softmax(torch.randn(B, L, V, generator=g), -1)
    logp[..., mask_id] = -math.inf
    a_t, a_s, sig = 0.4, 0.55, 0.2
    xs, remask = remdm_step(xt, logp, a_t, a_s, sig, mask_id, torch.Generator().manual_seed(1))
    dec, msk = xt != mask_id, xt == mask_id
    assert torch.equal(remask, dec & (xs == mask_id))
    assert torch.equal(xs[dec & ~remask], xt[dec & ~remask])  # decoded tokens never change into another token
    for rate, p, k in (
        (remask[dec].double().mean().item(), sig, dec.sum().item()),
        ((xs[msk] != mask_id).double().mean().item(), (a_s - (1 - sig) * a_t) / (1 - a_t), msk.sum().item()),
    ):
        assert abs(rate - p) < 5 * math.sqrt(p * (1 - p) / k), (rate, p)


def test_nucleus_filter():
    p = torch.tensor([[0.5, 0.25, 0.15, 0.07, 0.03], [0.9, 0.05, 0.03, 0.01, 0.01]], dtype=torch.float64)
    lp = p.log()[:, [3, 0, 4, 1, 2]]  # shuffled columns
    out = nucleus_filter(lp, 0.8)
    keep = torch.isfinite(out)
    # row 0: cumulative 0.5, 0.75 <= 0.8 -> {0.5, 0.25}; row 1: only the top token (0.9 > 0.8) is kept
    assert keep[0].tolist() == [False, True, False, True, False]
    assert keep[1].tolist() == [False, True, False, False, False]
    assert torch.equal(out[keep], lp[keep])  # kept log-probs unchanged (Gumbel-max needs no renormalisation)
    assert nucleus_filter(lp, 1.0) is lp


# ---------------------------------------------------------------------- the sampler
@pytest.mark.parametrize(
    "strategy,kw",
    [
        ("cap", {"eta_cap": 0.0}),
        ("rescale", {"eta_rescale": 0.0}),
        ("cap_rescale", {"eta_rescale": 0.0}),
        ("cap_rescale", {"eta_cap": 0.0}),
    ],
)
def test_eta_zero_is_mdlm_bit_for_bit(denoiser, strategy, kw):
    for steps in (5, 40):
        a, sa = sample_mdlm(denoiser, 10, 8, steps, torch.Generator().manual_seed(3), batch_size=4)
        b, sb = sample_remdm(
            denoiser, 10, 8, steps, torch.Generator().manual_seed(3), strategy=strategy, batch_size=4, **kw
        )
        assert torch.equal(a, b)
        assert sb["remasked"] == 0 and sb["nfe"] == sa["nfe"] and sb["rows_evaluated"] == sa["rows_evaluated"]


def test_remasking_happens_and_no_mask_is_left(denoiser, tok, monkeypatch):
    seen = []
    real_step = rm.remdm_step

    def spy(xt, logp, a_t, a_s, sigma_t, mask_id, generator, nucleus=1.0):
        seen.append((a_t, a_s, sigma_t))
        return real_step(xt, logp, a_t, a_s, sigma_t, mask_id, generator, nucleus)

    monkeypatch.setattr(rm, "remdm_step", spy)
    steps = 48
    x, stats = sample_remdm(denoiser, 12, 8, steps, torch.Generator().manual_seed(0), batch_size=8)
    assert len(seen) == 2 * steps  # two batches
    assert all(0 <= s <= sigma_max(a_t, a_s) for a_t, a_s, s in seen)
    assert all(s == pytest.approx(0.5 * min(0.05, sigma_max(a_t, a_s))) for a_t, a_s, s in seen)  # the default
    assert stats["remasked"] > 0
    assert x.shape == (12, 8) and x.dtype == torch.int64
    assert not (x == tok.mask_id).any() and not (x == tok.bos_id).any()
    assert stats["nfe"] <= 2 * (steps + 1)
    y, _ = sample_remdm(denoiser, 12, 8, steps, torch.Generator().manual_seed(0), batch_size=8)
    assert torch.equal(x, y)
    z, _ = SAMPLERS["remdm"]({"dlm": denoiser}, 12, 8, steps, torch.Generator().manual_seed(0), batch_size=8)
    assert torch.equal(x, z)


def test_strong_remasking(denoiser, tok):
    x, stats = sample_remdm(denoiser, 6, 8, 32, torch.Generator().manual_seed(1), strategy="rescale", eta_rescale=1.0)
    assert stats["remasked"] > 10 and not (x == tok.mask_id).any() and not (x == tok.bos_id).any()


class Peaked:
    """A denoiser whose p_theta puts 0.6 on token 0 and spreads the rest: nucleus 0.5 keeps token 0 only."""

    def __init__(self, tok):
        self.mask_id, self.vocab_size = tok.mask_id, tok.vocab_size
        self.blocked = [tok.mask_id, tok.bos_id]

    def logp_x0(self, xt, sigma=None):
        p = torch.full((*xt.shape, self.vocab_size), 0.4 / (self.vocab_size - 3))
        p[..., 0] = 0.6
        p[..., self.blocked] = 0.0
        return p.log()


def test_nucleus_restricts_every_draw(tok):
    """Every token, including those drawn after remasking and in the final fill, comes from the nucleus."""
    x, stats = sample_remdm(
        Peaked(tok), 16, 8, 24, torch.Generator().manual_seed(0), strategy="rescale", eta_rescale=1.0, nucleus=0.5
    )
    assert stats["remasked"] > 0 and (x == 0).all()
    y, _ = sample_remdm(Peaked(tok), 16, 8, 24, torch.Generator().manual_seed(0))
    assert (y != 0).any()  # without the nucleus the tail is drawn
