"""Duo (uniform-state diffusion + Gaussian relaxation): NELBO, duality, curriculum, sampler."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import unie.core.gumbel as gumbel_mod
import unie.methods.duo as duo_sampler
from unie.core.options import ModelConfig
from unie.data.corpus import tokenize_corpus, write_text_parquet
from unie.methods.duo import (
    REF_GAMMA_MAX,
    REF_GAMMA_MIN,
    REF_VOCAB,
    Duo,
    DuoDenoiser,
    alpha_from_p,
    duality_integrals,
    duality_table,
    gaussian_latent,
    matched_gamma_range,
    sub_vocab,
    to_sub,
    udlm_nelbo_per_token,
    udlm_q_xt,
)
from unie.pipeline.model_files import load_wrapped, train_from_spec
from unie.models.transformer import Transformer
from unie.core.registry import METHODS, SAMPLERS
from unie.methods.duo import duo_posterior, sample_duo
from unie.core.schedule import make_schedule
from unie.data.toy_world import generate_corpus


def duo_net(vocab_size: int, d_model: int = 16, max_len: int = 16, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=vocab_size, d_model=d_model, n_layers=1, n_heads=2, mlp_ratio=2, max_len=max_len, cond_dim=16
    )
    return Transformer(cfg).eval()


def ctmc_form(log_x_theta, xt, x0, alpha, dalpha):
    """The same bound written as a CTMC rate-matching divergence (independent of the module doc's NELBO algebra):
    ``(-alpha'/(V alpha)) sum_{y != xt} r_y h(rtheta_y / r_y)``, ``h(u) = u - 1 - log u``."""
    V = log_x_theta.shape[-1]
    a, da = alpha[:, None, None], dalpha[:, None]
    xbar_t = V * a * F.one_hot(x0, V).double() + (1 - a)
    xbar_th = V * a * log_x_theta.exp() + (1 - a)
    r = xbar_t / xbar_t.gather(-1, xt[..., None])
    rth = xbar_th / xbar_th.gather(-1, xt[..., None])
    u = rth / r
    h = r * (u - 1 - torch.log(u))
    h = h.scatter(-1, xt[..., None], 0.0)
    return (-da / (V * a[..., 0])) * h.sum(-1)


# ---------------------------------------------------------------------- UDLM NELBO
def test_udlm_nelbo_equals_ctmc_form_and_is_nonnegative():
    g = torch.Generator().manual_seed(0)
    B, L, V = 64, 5, 7
    log_x = torch.log_softmax(3 * torch.randn(B, L, V, generator=g, dtype=torch.float64), -1)
    x0 = torch.randint(0, V, (B, L), generator=g)
    xt = torch.where(torch.rand(B, L, generator=g) < 0.5, x0, torch.randint(0, V, (B, L), generator=g))
    alpha = torch.cat([torch.tensor([1e-3, 0.999, 0.5]), torch.rand(B - 3, generator=g)]).double()
    dalpha = torch.full_like(alpha, -(1 - 1e-3))
    got = udlm_nelbo_per_token(log_x, xt, x0, alpha, dalpha)
    assert got.shape == (B, L) and got.dtype == torch.float64
    want = ctmc_form(log_x, xt, x0, alpha, dalpha)
    assert torch.allclose(got, want, rtol=1e-9, atol=1e-9)
    assert (got >= -1e-9).all()
    # the exact ratios (x_theta = onehot(x0)) give exactly 0; log x_theta = -inf is handled
    exact = udlm_nelbo_per_token(torch.log(F.one_hot(x0, V).double()), xt, x0, alpha, dalpha)
    assert torch.allclose(exact, torch.zeros_like(exact), atol=1e-9)
    # float32 log-probabilities (training) give the same per-token values up to float32 rounding
    got32 = udlm_nelbo_per_token(log_x.float(), xt, x0, alpha, dalpha)
    assert torch.allclose(got32, got, rtol=1e-4, atol=1e-4)


def test_udlm_forward_process_marginals():
    V, n = 5, 200_000
    x0 = torch.full((n, 1), 2)
    alpha = torch.full((n,), 0.3, dtype=torch.float64)
    xt = udlm_q_xt(x0, alpha, V, torch.Generator().manual_seed(0))
    freq = torch.bincount(xt[:, 0], minlength=V).double() / n
    want = torch.full((V,), 0.7 / V, dtype=torch.float64)
    want[2] += 0.3
    assert (freq - want).abs().max() < 0.005


# ---------------------------------------------------------------------- oracle on an enumerable HMM
def enumerate_seqs(V: int, L: int) -> torch.Tensor:
    return torch.tensor(list(itertools.product(range(V), repeat=L)))


def udlm_oracle(hmm, allx, xt, alpha, leave_one_out=True):
    """``x_theta(xt)_i`` ``(B, L, V)`` by brute force over all ``x0``: ``pi(x0_i | xt_{-i})`` (leave-one-out) or
    ``pi(x0_i | xt)`` (the full posterior), under the uniform-noise likelihood ``alpha [xt = x0] + (1-alpha)/V``."""
    V = hmm.V
    a = alpha.double()[:, None, None]
    lik = torch.log(a * (xt[:, None, :] == allx[None]).double() + (1 - a) / V)  # (B, N, L)
    logw = hmm.log_marginal(allx)[None, :, None] + lik.sum(-1, keepdim=True) - (lik if leave_one_out else 0)
    return torch.einsum("bnl,nlv->blv", torch.softmax(logw, dim=1), F.one_hot(allx, V).double())


def exact_bound(hmm, allx, t_lo: float, leave_one_out: bool, n_nodes: int = 48) -> torch.Tensor:
    """``int_{t_lo}^1 E_{xt ~ q(.|x0)} [sum_i nelbo_i] dt`` for every ``x0`` in ``allx`` ``(N,)``: the expectation over
    ``xt`` by enumeration, the integral by Gauss-Legendre in ``u = log t`` (no Monte-Carlo error)."""
    N, L = allx.shape
    sched = make_schedule("loglinear", 1e-3)
    xs, ws = np.polynomial.legendre.leggauss(n_nodes)
    lo = math.log(t_lo)
    u = torch.tensor((xs + 1) / 2 * -lo + lo)
    wu = torch.tensor(ws * -lo / 2)
    t = u.exp()  # (K,)
    K = len(t)
    x0 = allx[None, :, None, :].expand(K, N, N, L).reshape(-1, L)
    xt = allx[None, None, :, :].expand(K, N, N, L).reshape(-1, L)
    alpha = sched.alpha(t)[:, None, None].expand(K, N, N).reshape(-1)
    p = udlm_oracle(hmm, allx, xt, alpha, leave_one_out)
    per_seq = udlm_nelbo_per_token(torch.log(p), xt, x0, alpha, sched.dalpha(alpha)).sum(-1)
    logq = torch.log(alpha[:, None] * (x0 == xt).double() + (1 - alpha[:, None]) / hmm.V).sum(-1)
    expect = (logq.exp() * per_seq).view(K, N, N).sum(-1)  # (K, N)
    return ((wu * t)[:, None] * expect).sum(0)


def test_udlm_bound_with_the_oracle_is_tight(tiny_hmm):
    """With the exact reverse rates the continuous-time bound equals ``-log pi(x0)`` for *every* ``x0``.

    The exact rates correspond to the *leave-one-out* posterior ``x_theta(xt)_i = pi(x0_i | xt_{-i})``, not
    to ``pi(x0_i | xt)``: the reverse rate ratio ``xbar_theta[y]/xbar_theta[xt]`` must equal the expected
    ratio ``E[q(y|x0_i)/q(xt_i|x0_i) | xt]``, and the likelihood of ``xt_i`` cancels in that expectation.
    * integrated over ``t in [1e-9, 1]`` the LOO bound matches to < 1e-4 nats (what is left is the prior
      term ``KL(q_1 || uniform)``, alpha_1 = 1e-3, dropped by the estimator);
    * the estimator's range ``[t_eps, 1] = [1e-3, 1]`` drops ``int_0^{1e-3}``, about
      ``1e-3 L (log(1/1e-3) + 1)`` nats: the truncated "bound" sits slightly *below* ``-log pi`` (< 0.03 here);
    * the full posterior gives a valid but loose bound (> 0.1 nats above for every x0)."""
    allx = enumerate_seqs(tiny_hmm.V, 3)
    nll = -tiny_hmm.log_marginal(allx)
    full_range = exact_bound(tiny_hmm, allx, 1e-9, leave_one_out=True)
    assert (full_range - nll).abs().max() < 1e-4
    truncated = exact_bound(tiny_hmm, allx, 1e-3, leave_one_out=True)
    assert ((nll - truncated) > 0).all() and ((nll - truncated) < 0.03).all()
    loose = exact_bound(tiny_hmm, allx, 1e-3, leave_one_out=False)
    assert ((loose - nll) > 0.1).all()


# ---------------------------------------------------------------------- Gaussian-to-discrete duality
@pytest.mark.parametrize("V", [3, 199])
def test_duality_quadrature_matches_monte_carlo_argmax(V):
    """``P(gamma)`` = P(argmax w_t = x0) for ``w_t`` drawn by :func:`gaussian_latent` (4 s.e.)."""
    gammas = torch.tensor([-3.0, -1.5, 0.5], dtype=torch.float64)
    P, _ = duality_integrals(gammas, V)
    n = 20_000
    g = torch.Generator().manual_seed(V)
    x0 = torch.randint(0, V, (n, 1), generator=g)
    for gam, p in zip(gammas, P):
        w = gaussian_latent(x0, gam.expand(n), V, g)
        hit = (w.argmax(-1) == x0).double().mean().item()
        se = math.sqrt(p * (1 - p) / n) + 1e-4
        assert abs(hit - p.item()) < 4 * se, (V, gam.item(), hit, p.item())


def test_duality_monotone_derivative_and_alpha_range():
    for V in (3, 199, REF_VOCAB):
        gammas = torch.linspace(-6, 6, 241, dtype=torch.float64)
        P, dP = duality_integrals(gammas, V)
        # P increases with -gamma (higher SNR): strictly until it saturates at 1 (quadrature rounding ~1e-16)
        assert (P.diff() < 1e-12).all() and (P.diff()[P[1:] < 0.999] < 0).all() and (dP <= 1e-12).all()
        alpha = alpha_from_p(P, V)
        assert (alpha >= 0).all() and (alpha <= 1).all()
        h = 1e-4  # central difference; the z grid moves with gamma, so P carries ~1e-13 of quadrature noise
        fd = (duality_integrals(gammas + h, V)[0] - duality_integrals(gammas - h, V)[0]) / (2 * h)
        assert torch.allclose(dP, fd, rtol=1e-5, atol=1e-7)
    # limits: no signal -> 1/V, infinite SNR -> 1
    assert abs(duality_integrals(torch.tensor([40.0]), 10)[0].item() - 0.1) < 1e-3
    assert abs(duality_integrals(torch.tensor([-12.0]), 10)[0].item() - 1.0) < 1e-9


def test_duality_table_interpolates_and_matched_range():
    lo, hi = matched_gamma_range(199)
    table = duality_table(199, lo, hi, 1001)
    g = torch.rand(50, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * (hi - lo) + lo
    P, dP = duality_integrals(g, 199)
    assert torch.allclose(table.prob(g), P, atol=1e-6)
    assert torch.allclose(table.dalpha_dgamma(g), 199 / 198 * dP, atol=1e-5)
    # the matched range covers the reference's alpha range at GPT-2's vocabulary
    ref = alpha_from_p(duality_integrals(torch.tensor([REF_GAMMA_MIN, REF_GAMMA_MAX]), REF_VOCAB)[0], REF_VOCAB)
    ours = table.alpha(torch.tensor([lo, hi], dtype=torch.float64))
    assert torch.allclose(ours, ref, atol=1e-6)
    assert matched_gamma_range(REF_VOCAB) == (REF_GAMMA_MIN, REF_GAMMA_MAX)


# ---------------------------------------------------------------------- the method
def test_sub_vocab_excludes_mask_and_bos(tok_info):
    s2t, t2s = sub_vocab(tok_info)
    assert len(s2t) == tok_info["vocab_size"] - 2
    assert tok_info["mask_id"] not in s2t.tolist() and tok_info["bos_id"] not in s2t.tolist()
    assert tok_info["eos_id"] in s2t.tolist()
    assert (s2t[t2s[s2t]] == s2t).all() and t2s[tok_info["mask_id"]] == -1
    with pytest.raises(ValueError, match="mask"):
        to_sub(torch.tensor([[0, tok_info["mask_id"]]]), t2s)
    assert METHODS["duo"] is Duo and SAMPLERS["duo"].fn is duo_sampler.duo_sampler


class Spy(torch.nn.Module):
    """Records whether each forward got tokens or ``inputs_embeds``."""

    def __init__(self, net):
        super().__init__()
        self.net, self.embed, self.cfg, self.calls = net, net.embed, net.cfg, []

    def forward(self, x=None, sigma=None, inputs_embeds=None, **kw):
        self.calls.append("soft" if inputs_embeds is not None else "tokens")
        return self.net(x, sigma=sigma, inputs_embeds=inputs_embeds, **kw)


def test_curriculum_then_udlm_and_gradients(tok_info, random_words):
    method = Duo(tok_info, curriculum_steps=2, tau=1.0)
    spy = Spy(duo_net(tok_info["vocab_size"]).train())
    x0 = random_words(4, 8)
    losses = []
    for k in range(3):
        spy.zero_grad()
        loss = method.loss(spy, x0, torch.Generator().manual_seed(k))
        assert loss.ndim == 0 and torch.isfinite(loss) and loss > 0
        loss.backward()
        grad = spy.net.embed.weight.grad
        assert grad is not None and torch.isfinite(grad).all()
        touched = (grad.abs().sum(-1) > 0).sum().item()
        # soft inputs (tau = 1) reach every real token's embedding row; hard tokens only the rows used
        assert (touched == len(method.sub_to_tok)) if k < 2 else (touched <= x0.numel())
        assert grad[tok_info["mask_id"]].abs().sum() == 0
        losses.append(loss.item())
    assert spy.calls == ["soft", "soft", "tokens"] and method.calls == 3
    method.set_step(0)
    assert method.in_curriculum()
    # nll: the plain bound, per sequence, never the curriculum, does not advance the step
    nll = method.nll(spy, x0, torch.Generator().manual_seed(9))
    assert nll.shape == (4,) and nll.dtype == torch.float64 and (nll > 0).all() and spy.calls[-1] == "tokens"
    assert method.calls == 0


def test_curriculum_alpha_and_conditioning(tok_info):
    method = Duo(tok_info, curriculum_steps=1)
    assert (method.gamma_min, method.gamma_max) == matched_gamma_range(len(method.sub_to_tok))
    assert method.tau == 1e-3 and Duo(tok_info).curriculum_steps == 0
    t = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    alpha = method.table().alpha(method.gamma_min + t * (method.gamma_max - method.gamma_min))
    assert (alpha.diff() < 0).all() and alpha[0] > 0.9 and alpha[-1] < 0.06


# ---------------------------------------------------------------------- sampler
def brute_posterior(x_theta, xt, a_t, a_s):
    """``q(xt | xs) q(xs | x_theta) / q(xt | x_theta)`` with explicit transition matrices."""
    V = x_theta.shape[-1]
    a_ts = a_t / a_s
    Q_ts = a_ts * torch.eye(V, dtype=torch.float64) + (1 - a_ts) / V  # Q_ts[xs, xt] = q(xt | xs)
    prior_s = a_s * x_theta + (1 - a_s) / V  # q(xs | x_theta)
    num = Q_ts[:, xt].permute(1, 2, 0) * prior_s  # (B, L, V)
    return num / num.sum(-1, keepdim=True)


def test_duo_posterior_invariants():
    g = torch.Generator().manual_seed(0)
    B, L, V = 8, 6, 5
    x_theta = torch.softmax(2 * torch.randn(B, L, V, generator=g, dtype=torch.float64), -1)
    xt = torch.randint(0, V, (B, L), generator=g)
    for a_t, a_s in [(0.2, 0.5), (1e-3, 0.01), (0.9, 1.0), (0.5, 0.5)]:
        q = duo_posterior(x_theta, xt, a_t, a_s)
        assert q.dtype == torch.float64 and (q >= 0).all()
        assert torch.allclose(q.sum(-1), torch.ones(B, L, dtype=torch.float64), atol=1e-12)
        assert torch.allclose(q, brute_posterior(x_theta, xt, a_t, a_s), atol=1e-12)
    # alpha_s = alpha_t: a point mass at xt
    assert torch.equal(duo_posterior(x_theta, xt, 0.4, 0.4), F.one_hot(xt, V).double())
    # with x_theta = onehot(x0) the step composes with the forward process: sum_xt q(xs|xt,x0) q(xt|x0) = q(xs|x0)
    a_t, a_s, x0 = 0.3, 0.7, 2
    oh = F.one_hot(torch.tensor([[x0]]), V).double()
    q_t = a_t * oh[0, 0] + (1 - a_t) / V
    mix = sum(q_t[v] * duo_posterior(oh, torch.tensor([[v]]), a_t, a_s)[0, 0] for v in range(V))
    assert torch.allclose(mix, a_s * oh[0, 0] + (1 - a_s) / V, atol=1e-12)


class LOOOracle:
    """The exact uniform-state denoiser of a tiny HMM (leave-one-out posterior), sampler interface."""

    def __init__(self, hmm, L):
        self.hmm, self.allx = hmm, enumerate_seqs(hmm.V, L)
        self.V, self.sub_to_tok, self.schedule = hmm.V, torch.arange(hmm.V), make_schedule("loglinear", 1e-3)

    def x_theta(self, xt, t):
        alpha = self.schedule.alpha(torch.as_tensor(t, dtype=torch.float64).expand(xt.shape[0]))
        return udlm_oracle(self.hmm, self.allx, xt, alpha)


def test_sampler_with_the_oracle_samples_pi(tiny_hmm):
    """With the exact denoiser the ancestral sampler reproduces ``pi`` (TV within sampling noise, ~0.02 at
    n = 10k over 27 sequences); uniform sequences are at TV 0.26."""
    L, n = 3, 10_000
    oracle = LOOOracle(tiny_hmm, L)
    x, stats = sample_duo(oracle, n, L, 8, torch.Generator().manual_seed(0), batch_size=n)
    assert stats == {"nfe": 9}
    idx = (x * torch.tensor([9, 3, 1])).sum(-1)
    freq = torch.bincount(idx, minlength=27).double() / n
    pi = tiny_hmm.log_marginal(oracle.allx).exp()
    assert 0.5 * (freq - pi).abs().sum() < 0.04


@pytest.fixture
def duo_denoiser(tok_info):
    return Duo(tok_info).wrap(duo_net(tok_info["vocab_size"]))


@pytest.mark.parametrize("noise_removal", ["ancestral", "greedy"])
def test_sampler_shapes_tokens_determinism(duo_denoiser, tok_info, noise_removal):
    run = lambda seed: SAMPLERS["duo"](
        {"dlm": duo_denoiser}, 5, 8, 4, torch.Generator().manual_seed(seed), batch_size=3, noise_removal=noise_removal
    )
    x, stats = run(0)
    assert x.shape == (5, 8) and x.dtype == torch.int64 and x.device.type == "cpu"
    assert stats["nfe"] == 2 * (4 + 1)  # two batches, steps + final noise removal each
    assert not torch.isin(x, torch.tensor([tok_info["mask_id"], tok_info["bos_id"]])).any()
    assert (x >= 0).all() and (x < tok_info["vocab_size"]).all()
    assert torch.equal(x, run(0)[0]) and not torch.equal(x, run(1)[0])
    with pytest.raises(ValueError, match="noise_removal"):
        sample_duo(duo_denoiser, 2, 4, 2, torch.Generator(), noise_removal="nucleus")


def test_sampler_draws_with_float64_gumbel(duo_denoiser, monkeypatch):
    seen = []
    inner = gumbel_mod.gumbel_noise

    def spy(shape, generator, device=None):
        out = inner(shape, generator, device)
        seen.append(out.dtype)
        return out

    logps = []
    inner_argmax = duo_sampler.gumbel_argmax

    def spy_argmax(logp, generator):
        logps.append(logp.dtype)
        return inner_argmax(logp, generator)

    monkeypatch.setattr(gumbel_mod, "gumbel_noise", spy)
    monkeypatch.setattr(duo_sampler, "gumbel_argmax", spy_argmax)
    sample_duo(duo_denoiser, 2, 6, 3, torch.Generator().manual_seed(0))
    assert len(seen) == 4 and set(seen) == {torch.float64}  # 3 steps + ancestral noise removal
    assert set(logps) == {torch.float64}


def test_denoiser_time_conditioning(duo_denoiser):
    xt = torch.randint(0, duo_denoiser.V, (2, 6), generator=torch.Generator().manual_seed(0))
    # adaLN is zero-initialised: perturb it so that the time input matters
    for p in duo_denoiser.net.parameters():
        p.data.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    p1, p2 = duo_denoiser.x_theta(xt, 0.9), duo_denoiser.x_theta(xt, 0.1)
    assert p1.shape == (2, 6, duo_denoiser.V) and p1.dtype == torch.float64
    assert torch.allclose(p1.sum(-1), torch.ones(2, 6, dtype=torch.float64), atol=1e-5)
    assert not torch.allclose(p1, p2)


# ---------------------------------------------------------------------- end to end
def test_train_from_spec_and_sample(tok, tmp_path):
    tok.save(tmp_path / "tokenizer")
    write_text_parquet(generate_corpus("owt", "train", 32, 8, seed=0), tmp_path / "raw.parquet")
    tokenize_corpus(
        tmp_path / "raw.parquet", tok, tmp_path / "train.parquet", 8, insert_eos=False, chunk_specials=False
    )
    spec = {
        "method": "duo",
        "options": {"curriculum_steps": 2},
        "arch": {"d_model": 16, "n_layers": 1, "n_heads": 2, "mlp_ratio": 2},
        "train": {"steps": 4, "batch_size": 8, "lr": 1e-3, "warmup": 1, "ckpt_every": 4, "log_every": 2},
    }
    ema, history = train_from_spec(
        "duo",
        spec,
        tmp_path / "train.parquet",
        tmp_path / "tokenizer",
        tmp_path / "out",
        tmp_path / "ckpt",
        seq_len=8,
        log=lambda m: None,
    )
    assert ema.cfg.cond_dim > 0 and all(math.isfinite(h["loss"]) for h in history)
    wrapped = load_wrapped(tmp_path / "out", tok)
    assert isinstance(wrapped, DuoDenoiser)
    x, stats = SAMPLERS["duo"]({"dlm": wrapped}, 3, 8, 2, torch.Generator().manual_seed(0))
    assert x.shape == (3, 8) and not torch.isin(x, torch.tensor([tok.mask_id, tok.bos_id])).any()
