"""SEDD (absorbing): log-score parameterisation, score-entropy loss, NELBO against the exact NLL, analytic sampler."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

import unie.core.gumbel
from unie.core.options import ModelConfig
from unie.methods.mdlm import nelbo, q_xt
from unie.models.transformer import Transformer
from unie.core.registry import METHODS, SAMPLERS
from unie.core.schedule import antithetic_t, make_schedule
from unie.methods.sedd import SEDD, SEDDScore, score_entropy, sedd_log_score, sedd_nelbo
from unie.methods.sedd import denoise_step, sample_sedd, tweedie_logits, tweedie_step
from unie.data.tokenizer import blocked_ids
from unie.data.toy_world import OracleDenoiser


def reference_dse(log_score, xt, x0, sigma, mask_id):
    """The reference's literal form ``sum_{y != m} s_y - r log s_x0 + r (log r - 1)`` (float64), 0 where unmasked."""
    ls = log_score.double().clone()
    ls[..., mask_id] = -math.inf
    r = (1 / torch.expm1(sigma.double()))[:, None]
    val = ls.exp().sum(-1) - r * ls.gather(-1, x0[..., None]).squeeze(-1) + r * (r.log() - 1)
    return torch.where(xt == mask_id, val, torch.zeros_like(val))


class StubNet:
    """A time-conditioned "network" with fixed outputs ``o = log p0 + log V_real`` (the exact optimum).

    ``logp0`` is ``(B, L, V)`` or a callable ``xt -> (B, L, V)`` (an oracle).  Records the ``sigma`` it gets."""

    def __init__(self, logp0, vocab_size: int, n_real: int):
        self.logp0 = logp0
        self.cfg = SimpleNamespace(vocab_size=vocab_size, cond_dim=64, causal=False)
        self.device = torch.device("cpu")
        self.n_real = n_real
        self.sigmas = []

    def __call__(self, x, sigma=None):
        assert sigma is not None and sigma.shape == (x.shape[0],), "SEDD must pass sigma (B,)"
        self.sigmas.append(sigma.clone())
        lp = self.logp0(x) if callable(self.logp0) else self.logp0
        return lp + math.log(self.n_real)


@pytest.fixture(scope="module")
def n_real(tok_info):
    return tok_info["vocab_size"] - len(set(blocked_ids(tok_info)))


@pytest.fixture(scope="module")
def oracle_net(owt_hmm, tok, n_real):
    return StubNet(OracleDenoiser(owt_hmm, tok).logp_x0, tok.vocab_size, n_real)


def cond_net(vocab_size: int, d_model: int = 16, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=vocab_size, d_model=d_model, n_layers=1, n_heads=2, mlp_ratio=2, max_len=16, cond_dim=16
    )
    return Transformer(cfg)


def random_p0(shape, tok_info, seed=0, peaked=1.0):
    """A random distribution over the producible tokens ``(B, L, V)`` (log), blocked ids at -inf."""
    lp = torch.randn(*shape, tok_info["vocab_size"], generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    lp[..., blocked_ids(tok_info)] = -math.inf
    return torch.log_softmax(peaked * lp, -1)


# ---------------------------------------------------------------------- parameterisation
def test_registered_method_flags(tok_info):
    m = METHODS["sedd"](tok_info)
    assert isinstance(m, SEDD)
    assert m.time_conditioned and not m.causal and m.has_likelihood and m.stochastic_nll


def test_log_score_parameterisation(tok_info):
    V, mask_id, bos = tok_info["vocab_size"], tok_info["mask_id"], tok_info["bos_id"]
    g = torch.Generator().manual_seed(0)
    out = torch.randn(3, 6, V, generator=g)
    xt = torch.randint(0, tok_info["eos_id"] + 1, (3, 6), generator=g)
    xt[:, ::2] = mask_id
    sigma = torch.tensor([0.01, 0.7, 5.0], dtype=torch.float64)
    ls = sedd_log_score(out, xt, sigma, mask_id, blocked_ids(tok_info))
    assert ls.shape == out.shape and ls.dtype == out.dtype
    n_real = V - 2
    want = out - (torch.log(torch.expm1(sigma)) + math.log(n_real)).float()[:, None, None]
    m = xt == mask_id
    assert torch.equal(ls.gather(-1, xt[..., None]).squeeze(-1), torch.zeros(3, 6))  # current token: score 1
    real = torch.ones(V, dtype=torch.bool)
    real[[mask_id, bos]] = False
    hid = ls[m]
    assert torch.allclose(hid[:, real], want[m][:, real], atol=1e-5)
    assert torch.isneginf(hid[:, bos]).all() and (hid[:, mask_id] == 0).all()
    vis = ls[~m]
    assert torch.isneginf(vis[:, bos]).all() and torch.isneginf(vis[:, mask_id]).all()  # exact exclusion
    assert torch.equal(out, out.clone()) and torch.isfinite(out).all()  # not modified in place


# ---------------------------------------------------------------------- score entropy
def test_score_entropy_matches_reference_form_and_is_nonnegative(tok_info):
    mask_id = tok_info["mask_id"]
    g = torch.Generator().manual_seed(1)
    B, L, V = 4, 10, tok_info["vocab_size"]
    x0 = torch.randint(0, tok_info["eos_id"] + 1, (B, L), generator=g)
    sigma = torch.tensor([1e-3, 0.1, 1.0, 6.9], dtype=torch.float64)
    xt = q_xt(x0, torch.full((B,), 0.6), mask_id, g)
    out = 3 * torch.randn(B, L, V, generator=g, dtype=torch.float64)
    ls = sedd_log_score(out, xt, sigma, mask_id, blocked_ids(tok_info))
    dse = score_entropy(ls, xt, x0, sigma, mask_id)
    assert dse.shape == (B, L) and dse.dtype == torch.float64
    assert (dse[xt != mask_id] == 0).all() and (dse[xt == mask_id] > 0).all()
    assert torch.allclose(dse, reference_dse(ls, xt, x0, sigma, mask_id), rtol=1e-9, atol=1e-9)


def test_dse_is_zero_at_the_true_score_of_a_point_mass(tok_info, n_real):
    """Given x0, the true concrete score on a masked position is ``r * onehot(x0)``: loss and NELBO are 0."""
    x0 = torch.randint(0, tok_info["eos_id"] + 1, (8, 12), generator=torch.Generator().manual_seed(2))
    onehot = torch.full((8, 12, tok_info["vocab_size"]), -math.inf).scatter_(-1, x0[..., None], 0.0)
    net = StubNet(onehot, tok_info["vocab_size"], n_real)
    method = SEDD(tok_info)
    loss = method.loss(net, x0, torch.Generator().manual_seed(0))
    assert abs(loss.item()) < 1e-6
    nll = method.nll(net, x0, torch.Generator().manual_seed(1))
    assert nll.shape == (8,) and nll.abs().max() < 1e-6
    # the sigma handed to the network is -log alpha_t of the log-linear schedule at the antithetic times
    t = antithetic_t(8, torch.Generator().manual_seed(1), eps=1e-3)
    assert torch.allclose(net.sigmas[-1].double(), make_schedule("loglinear").sigma(t.double()), rtol=1e-6)


@pytest.mark.parametrize("sigma", [1e-3, 0.3, 2.0, 6.9])
def test_expected_dse_is_a_divergence_minimised_at_the_true_score(tok_info, n_real, sigma):
    """``E_{x0 ~ p0}[DSE] - r H(p0)`` is the score-entropy divergence between ``s_theta`` and the true score
    ``s = r p0`` (docs/baselines.md, SEDD): exactly 0 at the stub that outputs the true score, positive at any other."""
    mask_id = tok_info["mask_id"]
    B, L = 3, 5
    logp0 = random_p0((B, L), tok_info, seed=3)
    xt = torch.full((B, L), mask_id)
    sig = torch.full((B,), sigma, dtype=torch.float64)
    r = 1 / math.expm1(sigma)
    real = torch.isfinite(logp0[0, 0])
    H = -(logp0.exp() * logp0.nan_to_num(neginf=0.0)).sum(-1)

    def divergence(o):
        ls = sedd_log_score(o, xt, sig, mask_id, blocked_ids(tok_info))
        exp_dse = torch.zeros(B, L, dtype=torch.float64)
        for y in torch.nonzero(real).flatten().tolist():  # exact expectation over x0_i ~ p0
            dse_y = score_entropy(ls, xt, torch.full((B, L), y), sig, mask_id)
            exp_dse += logp0[..., y].exp() * dse_y
        return exp_dse - r * H

    truth = StubNet(logp0, tok_info["vocab_size"], n_real)
    d0 = divergence(truth(xt, sigma=sig))
    assert d0.abs().max() < 1e-6 * max(r, 1.0)
    for k in range(3):
        noise = 0.3 * torch.randn(logp0.shape, generator=torch.Generator().manual_seed(10 + k), dtype=torch.float64)
        d = divergence(truth(xt, sigma=sig) + noise)
        assert (d > 0).all()
    assert (divergence(truth(xt, sigma=sig) + 0.1) > 0).all()  # a mis-scaled (unnormalised) score is penalised too


# ---------------------------------------------------------------------- NELBO
def test_sedd_nelbo_with_oracle_equals_mdlm_nelbo_termwise(owt_hmm, tok, oracle_net):
    """With the true score the DSE is ``r * -log p0(x0_i | xt)`` and ``r dsigma/dt = 1/t``: the SEDD NELBO is
    MDLM's, sequence by sequence, for the same (t, xt)."""
    g = torch.Generator().manual_seed(4)
    x0 = owt_hmm.sample(32, 16, g)
    t = antithetic_t(32, g)
    sched = make_schedule("loglinear")
    score = SEDD(tok.info()).wrap(oracle_net)
    a = sedd_nelbo(score, x0, t, sched, tok.mask_id, torch.Generator().manual_seed(5))
    b = nelbo(OracleDenoiser(owt_hmm, tok), x0, t, sched, tok.mask_id, torch.Generator().manual_seed(5))
    assert a.shape == (32,) and a.dtype == torch.float64
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-4)


def test_sedd_nelbo_with_oracle_matches_exact_nll(owt_hmm, tok, oracle_net):
    """Averaged over t (and the masking), the oracle SEDD NELBO is -log pi(x0) (tolerance as the MDLM test:
    4 paired standard errors + 0.3% for the eps = 1e-3 truncation)."""
    g = torch.Generator().manual_seed(0)
    n, R, L = 256, 8, 16
    x0 = owt_hmm.sample(n, L, g)
    nll = -owt_hmm.log_marginal(x0)
    method = SEDD(tok.info())
    draws = torch.stack([method.nll(oracle_net, x0, g) for _ in range(R)])
    assert draws.shape == (R, n) and torch.isfinite(draws).all() and (draws >= 0).all()
    diff = draws.mean(0) - nll
    se = diff.std().item() / math.sqrt(n)
    assert abs(diff.mean().item()) < 4 * se + 0.003 * nll.mean().item(), (draws.mean().item(), nll.mean().item(), se)
    assert se < 0.03 * nll.mean().item()


def test_sedd_loss_of_a_random_net_is_finite_spelled_out_and_backpropagates(tok_info, random_words):
    net = cond_net(tok_info["vocab_size"]).train()
    method = SEDD(tok_info)
    x0 = random_words(8, 12)
    loss = method.loss(net, x0, torch.Generator().manual_seed(3))
    assert loss.ndim == 0 and torch.isfinite(loss) and loss > 0
    g = torch.Generator().manual_seed(3)  # the same randomness, spelled out with the reference's DSE form
    t = antithetic_t(8, g, eps=1e-3)
    xt = q_xt(x0, method.schedule.mask_prob(t), tok_info["mask_id"], g)
    sigma = method.schedule.sigma(t.double())
    with torch.no_grad():
        ls = sedd_log_score(net(xt, sigma=sigma.float()), xt, sigma, tok_info["mask_id"], blocked_ids(tok_info))
    dse = reference_dse(ls, xt, x0, sigma, tok_info["mask_id"])
    want = (method.schedule.dsigma(t.double())[:, None] * dse).sum() / x0.numel()
    assert torch.allclose(loss.detach().double(), want, rtol=1e-4)
    loss.backward()
    grads = [p.grad for p in net.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(gr).all() for gr in grads)
    assert net.head.weight.grad.abs().sum() > 0 and net.embed.weight.grad.abs().sum() > 0
    assert any(blk.ada.weight.grad.abs().sum() > 0 for blk in net.blocks)  # sigma reaches the network
    nll = method.nll(net.eval(), x0, torch.Generator().manual_seed(0))
    assert nll.shape == (8,) and torch.isfinite(nll).all() and (nll >= 0).all() and nll.sum() > 0
    score = method.wrap(net)
    assert isinstance(score, SEDDScore) and score.mask_id == tok_info["mask_id"]
    assert score.vocab_size == tok_info["vocab_size"]
    assert score.log_score(xt, sigma).shape == (8, 12, tok_info["vocab_size"])


# ---------------------------------------------------------------------- analytic sampler
@pytest.mark.parametrize("t,s", [(1.0, 0.5), (0.5, 0.49), (0.2, 1e-5)])
def test_tweedie_step_with_true_score_is_mdlm_reverse_kernel(tok_info, t, s):
    mask_id = tok_info["mask_id"]
    sched = make_schedule("loglinear")
    tt, sd = torch.tensor([t, s], dtype=torch.float64).unbind()
    a_t, a_s = sched.alpha(tt).item(), sched.alpha(sd).item()
    sig_t, sig_s = sched.sigma(tt), sched.sigma(sd)
    logp0 = random_p0((4,), tok_info, seed=5)  # (N, V)
    log_s = logp0 - torch.log(torch.expm1(sig_t))  # s = r p0
    log_s[:, mask_id] = 0.0
    q = torch.softmax(tweedie_logits(log_s, float(sig_t - sig_s), mask_id), -1)
    want = logp0.exp() * (a_s - a_t) / (1 - a_t)
    want[:, mask_id] = (1 - a_s) / (1 - a_t)
    assert torch.allclose(q, want, atol=1e-10)


def test_tweedie_step_keeps_decoded_tokens_and_clips_a_negative_mask_weight(tok_info):
    mask_id = tok_info["mask_id"]
    xt = torch.randint(0, tok_info["eos_id"] + 1, (64, 8), generator=torch.Generator().manual_seed(0))
    xt[:, ::2] = mask_id
    log_s = torch.full((64, 8, tok_info["vocab_size"]), 5.0)  # sum_y s_y far above r: mask weight < 0
    log_s[..., blocked_ids(tok_info)] = -math.inf
    log_s.scatter_(-1, xt[..., None], 0.0)
    logits = tweedie_logits(log_s[xt == mask_id], 0.5, mask_id)
    assert torch.isneginf(logits[:, mask_id]).all() and logits.dtype == torch.float64
    xs = tweedie_step(xt, log_s, 0.5, mask_id, torch.Generator().manual_seed(1))
    assert torch.equal(xs[xt != mask_id], xt[xt != mask_id])
    assert not (xs == mask_id).any() and not (xs == tok_info["bos_id"]).any()
    xd = denoise_step(xt, log_s, mask_id, torch.Generator().manual_seed(1))
    assert torch.equal(xd[xt != mask_id], xt[xt != mask_id]) and not (xd == mask_id).any()


def test_sedd_sampler_output_reproducibility_and_float64_noise(tok_info, monkeypatch):
    net = cond_net(tok_info["vocab_size"]).eval()
    score = SEDD(tok_info).wrap(net)
    dtypes = []
    real_noise = unie.core.gumbel.gumbel_noise

    def spy(shape, generator, device=None):
        g = real_noise(shape, generator, device)
        dtypes.append(g.dtype)
        return g

    monkeypatch.setattr(unie.core.gumbel, "gumbel_noise", spy)
    a, stats = sample_sedd(score, 10, 8, 12, torch.Generator().manual_seed(0), batch_size=4)
    assert dtypes and all(d == torch.float64 for d in dtypes)
    b, _ = sample_sedd(score, 10, 8, 12, torch.Generator().manual_seed(0), batch_size=4)
    c, _ = sample_sedd(score, 10, 8, 12, torch.Generator().manual_seed(1), batch_size=4)
    assert a.shape == (10, 8) and a.dtype == torch.int64
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert not (a == tok_info["mask_id"]).any() and not (a == tok_info["bos_id"]).any()
    assert 3 <= stats["nfe"] <= 3 * (12 + 1)  # no caching: about one call per step and batch
    d, _ = SAMPLERS["sedd"]({"dlm": score}, 10, 8, 12, torch.Generator().manual_seed(0), batch_size=4)
    assert torch.equal(a, d)


def test_sedd_sampler_passes_the_grid_sigmas(tok_info, n_real):
    net = StubNet(random_p0((2, 6), tok_info, seed=7), tok_info["vocab_size"], n_real)
    x, stats = sample_sedd(SEDD(tok_info).wrap(net), 2, 6, 5, torch.Generator().manual_seed(0))
    sig = make_schedule("loglinear").sigma(torch.linspace(1.0, 1e-5, 6, dtype=torch.float64))
    got = torch.stack([s[0] for s in net.sigmas]).double()
    assert len(net.sigmas) == stats["nfe"] and torch.allclose(got, sig[: len(got)].float().double())
    assert not (x == tok_info["mask_id"]).any()


def test_oracle_sedd_gen_ppl_improves_with_more_steps(owt_hmm, tok, oracle_net):
    L, n = 16, 128
    score = SEDD(tok.info()).wrap(oracle_net)

    def nll_per_token(steps):
        x, stats = sample_sedd(score, n, L, steps, torch.Generator().manual_seed(0))
        assert x.shape == (n, L) and not (x == tok.mask_id).any() and not (x == tok.bos_id).any()
        assert stats["nfe"] <= steps + 1
        nll = -owt_hmm.log_marginal(x) / L
        return nll.mean().item(), nll.std().item() / math.sqrt(n)

    fine, se_fine = nll_per_token(16)
    coarse, se_coarse = nll_per_token(2)
    assert math.exp(fine) < math.exp(coarse)
    assert coarse - fine > 3 * math.hypot(se_fine, se_coarse)
