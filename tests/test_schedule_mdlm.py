"""Noise schedules, antithetic times, the MDLM forward process, SUBS, and the NELBO against the exact NLL."""

from __future__ import annotations

import math

import pytest
import torch

from unie.data.tokenizer import blocked_ids
import torch.nn.functional as F

from unie.methods.mdlm import MDLM, MDLMDenoiser, masked_nll, nelbo, q_xt, subs_logp
from unie.core.schedule import Linear, LogLinear, antithetic_t, make_schedule
from unie.data.toy_world import OracleDenoiser

T_GRID = torch.linspace(1e-3, 1.0, 1001, dtype=torch.float64)


# ---------------------------------------------------------------------- schedules
@pytest.mark.parametrize("eps", [1e-3, 1e-2])
def test_loglinear_alpha_sigma_mask_prob(eps):
    s = LogLinear(eps)
    t = T_GRID
    assert torch.allclose(s.alpha(t), 1 - (1 - eps) * t, atol=1e-15)
    assert s.alpha(torch.tensor(0.0, dtype=torch.float64)).item() == 1.0
    assert abs(s.alpha(torch.tensor(1.0, dtype=torch.float64)).item() - eps) < 1e-15
    assert torch.allclose(s.mask_prob(t), (1 - eps) * t, atol=1e-15)
    assert torch.allclose(s.sigma(t), -torch.log(1 - (1 - eps) * t), atol=1e-14)
    assert torch.equal(s.sigma(t), -torch.log(s.alpha(t)))
    # dsigma is the derivative of sigma (central differences)
    h = 1e-6
    tt = t[1:-1]
    fd = (s.sigma(tt + h) - s.sigma(tt - h)) / (2 * h)
    assert torch.allclose(s.dsigma(tt), fd, rtol=1e-5)


def test_loglinear_weight_is_one_over_t():
    s = LogLinear(1e-3)
    assert (s.weight(T_GRID) > 0).all()
    assert torch.allclose(s.weight(T_GRID), 1 / T_GRID, rtol=1e-10, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_loglinear_weight_is_exactly_one_over_t(dtype):
    """The module promises ``weight(t)`` is *exactly* 1/t for the log-linear schedule: no cancellation error
    from ``1 - (1 - (1 - eps) t)`` (at small t in float32 that loses ~5 significant bits)."""
    t = torch.linspace(1e-3, 1.0, 1001, dtype=dtype)
    assert torch.equal(LogLinear(1e-3).weight(t), 1 / t)


def test_linear_schedule():
    s = Linear()
    t = T_GRID
    assert s.eps == 0.0
    assert torch.allclose(s.alpha(t), 1 - t, atol=1e-15)
    assert torch.allclose(s.mask_prob(t), t, atol=1e-15)
    assert torch.allclose(s.weight(t), 1 / t, rtol=1e-12)
    assert torch.allclose(s.sigma(t[:-1]), -torch.log1p(-t[:-1]), atol=1e-12)


def test_make_schedule():
    assert isinstance(make_schedule("loglinear", 1e-2), LogLinear) and make_schedule("loglinear", 1e-2).eps == 1e-2
    assert isinstance(make_schedule("linear"), Linear)
    with pytest.raises(KeyError, match="loglinear"):
        make_schedule("loglinaer")


@pytest.mark.parametrize("n", [1, 7, 16, 64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_antithetic_t_one_per_stratum(n, seed):
    eps = 1e-3
    t = antithetic_t(n, torch.Generator().manual_seed(seed), eps=eps)
    assert t.shape == (n,) and t.dtype == torch.float32
    assert (t >= eps).all() and (t <= 1).all()
    u = (t.double() - eps) / (1 - eps)  # back to [0, 1)
    strata = torch.floor(u * n).clamp(max=n - 1).long()
    assert sorted(strata.tolist()) == list(range(n))
    # the n times are one uniform shifted by multiples of 1/n: equally spaced after sorting
    if n > 1:
        gaps = torch.diff(torch.sort(t.double()).values)
        assert torch.allclose(gaps, torch.full_like(gaps, (1 - eps) / n), atol=1e-6)


def test_antithetic_t_reproducible():
    a = antithetic_t(8, torch.Generator().manual_seed(5))
    assert torch.equal(a, antithetic_t(8, torch.Generator().manual_seed(5)))
    assert not torch.equal(a, antithetic_t(8, torch.Generator().manual_seed(6)))


# ---------------------------------------------------------------------- forward process and SUBS
def test_q_xt_masking_rate():
    mask_id = 9
    B, L = 3000, 16
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, 9, (B, L), generator=g)
    probs = torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0]).repeat_interleave(B // 5)
    xt = q_xt(x0, probs, mask_id, g)
    assert xt.shape == x0.shape
    m = xt == mask_id
    assert torch.equal(xt[~m], x0[~m])  # unmasked tokens are carried unchanged
    for p in probs.unique():
        rows = probs == p
        k = rows.sum().item() * L
        rate = m[rows].float().mean().item()
        assert abs(rate - p.item()) <= 5 * math.sqrt(p * (1 - p) / k) + 1e-12, (p.item(), rate)
    # per-position probabilities (B, L)
    pp = torch.linspace(0, 1, L).expand(B, L)
    rate = (q_xt(x0, pp, mask_id, g) == mask_id).double().mean(0)
    assert torch.allclose(rate, pp[0].double(), atol=5 * math.sqrt(0.25 / B))


def test_q_xt_reproducible():
    x0 = torch.randint(0, 9, (4, 8), generator=torch.Generator().manual_seed(0))
    p = torch.full((4,), 0.5)
    a = q_xt(x0, p, 9, torch.Generator().manual_seed(1))
    assert torch.equal(a, q_xt(x0, p, 9, torch.Generator().manual_seed(1)))


def test_subs_logp():
    V, mask_id = 10, 9
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, V, generator=g) * 3
    xt = torch.randint(0, 9, (3, 6), generator=g)
    xt[:, ::2] = mask_id
    logp = subs_logp(logits, xt, mask_id)
    m = xt == mask_id
    assert logp.shape == logits.shape
    assert torch.isneginf(logp[..., mask_id]).all()
    vis = logp[~m]
    assert torch.equal(vis.gather(-1, xt[~m][:, None]).squeeze(-1), torch.zeros(vis.shape[0]))
    assert (torch.isneginf(vis).sum(-1) == V - 1).all(), "carry-over must be exact (-inf), not a finite penalty"
    hid = logp[m]
    assert torch.allclose(hid.logsumexp(-1), torch.zeros(hid.shape[0]), atol=1e-6)
    assert torch.allclose(hid[:, :mask_id], F.log_softmax(logits[m][:, :mask_id], -1), atol=1e-6)
    assert torch.equal(logits, logits.clone())  # input not modified in place
    assert not torch.isneginf(logits[..., mask_id]).any()


def test_masked_nll_counts_only_masked_positions():
    V, mask_id = 10, 9
    g = torch.Generator().manual_seed(1)
    logp = F.log_softmax(torch.randn(4, 5, V, generator=g), -1)  # finite everywhere, also at unmasked rows
    x0 = torch.randint(0, 9, (4, 5), generator=g)
    xt = x0.clone()
    xt[:, 1] = mask_id
    xt[2, 3] = mask_id
    got = masked_nll(logp, x0, xt, mask_id)
    want = torch.zeros(4)
    for b in range(4):
        for i in range(5):
            if xt[b, i] == mask_id:
                want[b] -= logp[b, i, x0[b, i]]
    assert got.shape == (4,)
    assert torch.allclose(got, want, atol=1e-6)
    assert masked_nll(logp, x0, x0, mask_id).abs().sum() == 0  # nothing masked -> 0


# ---------------------------------------------------------------------- NELBO
def test_nelbo_with_oracle_equals_exact_nll(owt_hmm, tok):
    """With the exact per-position posterior, the continuous-time NELBO is an *unbiased* estimator of
    -log pi(x0) (the any-order-autoregressive identity), not just an upper bound.

    Tolerance: 4 paired standard errors, plus 0.3% for the eps = 1e-3 truncation of the schedule
    (t ~ U[eps, 1] rescales the integral by 1/(1 - eps) ~ +0.1%, and the masking rates in
    ((1 - eps), 1] are never drawn, which drops ~eps * sum_i -log pi(x0_i) ~ -0.15%)."""
    g = torch.Generator().manual_seed(0)
    n, R, L = 512, 16, 16
    x0 = owt_hmm.sample(n, L, g)
    nll = -owt_hmm.log_marginal(x0)
    den, sched = OracleDenoiser(owt_hmm, tok), make_schedule("loglinear", 1e-3)
    draws = torch.stack([nelbo(den, x0, antithetic_t(n, g, eps=1e-3), sched, tok.mask_id, g) for _ in range(R)])
    assert draws.shape == (R, n) and torch.isfinite(draws).all() and (draws >= 0).all()
    diff = draws.mean(0) - nll  # paired per sequence
    se = diff.std().item() / math.sqrt(n)
    tol = 4 * se + 0.003 * nll.mean().item()
    assert abs(diff.mean().item()) < tol, (draws.mean().item(), nll.mean().item(), se)
    assert se < 0.02 * nll.mean().item()  # the test has power: SE under 2% of the NLL


def test_nelbo_of_a_random_model_is_far_above_exact_nll(owt_hmm, tok, net_factory):
    g = torch.Generator().manual_seed(1)
    x0 = owt_hmm.sample(64, 16, g)
    den = MDLMDenoiser(net_factory(), tok.mask_id)
    ne = nelbo(den, x0, antithetic_t(64, g), make_schedule("loglinear"), tok.mask_id, g)
    assert ne.mean() > 1.5 * (-owt_hmm.log_marginal(x0)).mean()


def test_mdlm_loss_is_finite_matches_nelbo_and_backpropagates(tok_info, net_factory, random_words):
    net = net_factory().train()
    method = MDLM(tok_info)
    x0 = random_words(8, 12)
    loss = method.loss(net, x0, torch.Generator().manual_seed(3))
    assert loss.ndim == 0 and torch.isfinite(loss) and loss > 0
    # the same randomness, spelled out: mean per-token 1/t-weighted masked NLL under SUBS
    g = torch.Generator().manual_seed(3)
    t = antithetic_t(8, g, eps=1e-3)
    xt = q_xt(x0, method.schedule.mask_prob(t), tok_info["mask_id"], g)
    with torch.no_grad():
        lp = subs_logp(net(xt), xt, tok_info["mask_id"], blocked_ids(tok_info))
    want = (masked_nll(lp, x0, xt, tok_info["mask_id"]) / t).sum() / x0.numel()
    assert torch.allclose(loss.detach(), want, rtol=1e-4)
    loss.backward()
    grads = [p.grad for p in net.parameters()]
    assert all(gr is not None and torch.isfinite(gr).all() for gr in grads)
    assert sum(gr.abs().sum() for gr in grads) > 0
    assert net.embed.weight.grad.abs().sum() > 0 and net.head.weight.grad.abs().sum() > 0


def test_mdlm_nll_and_wrap(tok_info, net_factory, random_words):
    net = net_factory()
    method = MDLM(tok_info)
    x0 = random_words(6, 10, seed=1)
    nll = method.nll(net, x0, torch.Generator().manual_seed(0))
    assert nll.shape == (6,) and torch.isfinite(nll).all() and (nll >= 0).all() and nll.sum() > 0
    den = method.wrap(net)
    assert isinstance(den, MDLMDenoiser) and den.mask_id == tok_info["mask_id"]
    assert den.vocab_size == tok_info["vocab_size"]
    xt = x0.clone()
    xt[:, :5] = tok_info["mask_id"]
    assert torch.equal(den.logp_x0(xt), subs_logp(net(xt), xt, tok_info["mask_id"], blocked_ids(tok_info)))
    # an input-only <bos> is never predicted
    assert torch.isinf(den.logp_x0(xt)[..., tok_info["bos_id"]]).all()
