"""MDLM's ancestral sampler with caching, its building blocks, and float64 Gumbel-max sampling."""

from __future__ import annotations

import math

import pytest
import torch

import unie.methods.mdlm as anc
from unie.core.gumbel import gumbel_argmax, gumbel_noise
from unie.methods.mdlm import MDLMDenoiser
from unie.core.registry import SAMPLERS
from unie.core.sampling import time_grid
from unie.methods.mdlm import CachedDenoiser, reveal_mask, sample_mdlm, transition
from unie.core.schedule import make_schedule
from unie.data.toy_world import OracleDenoiser


class Counting:
    """Wraps a denoiser and counts its forward passes (and the rows they cover)."""

    def __init__(self, inner):
        self.inner = inner
        self.mask_id = inner.mask_id
        self.vocab_size = inner.vocab_size
        self.calls = 0
        self.rows = 0
        self.inputs = []

    def logp_x0(self, xt, sigma=None):
        self.calls += 1
        self.rows += xt.shape[0]
        self.inputs.append(xt.clone())
        return self.inner.logp_x0(xt)


@pytest.fixture
def tiny_denoiser(net_factory, tok):
    return MDLMDenoiser(net_factory(max_len=8), tok.mask_id)


# ---------------------------------------------------------------------- Gumbel-max
def test_gumbel_noise_is_float64_standard_gumbel():
    g = gumbel_noise((200_000,), torch.Generator().manual_seed(0))
    assert g.dtype == torch.float64 and torch.isfinite(g).all()
    assert abs(g.mean().item() - 0.5772156649) < 0.01  # Euler-Mascheroni
    assert abs(g.var().item() - math.pi**2 / 6) < 0.03


def test_gumbel_argmax_draws_from_softmax():
    n = 100_000
    logp = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03]))
    draws = gumbel_argmax(logp.expand(n, -1), torch.Generator().manual_seed(0))
    assert draws.shape == (n,) and draws.dtype == torch.int64
    freq = torch.bincount(draws, minlength=5).double() / n
    p = logp.double().exp()
    assert 0.5 * (freq - p).abs().sum().item() < 0.01
    chi2 = (n * (freq - p) ** 2 / p).sum()
    p_value = torch.special.gammaincc(torch.tensor(2.0, dtype=torch.float64), chi2 / 2).item()  # 4 dof
    assert p_value > 1e-3


def test_gumbel_argmax_is_shift_invariant_and_respects_minus_inf():
    logits = torch.randn(1000, 7, generator=torch.Generator().manual_seed(1))
    a = gumbel_argmax(logits, torch.Generator().manual_seed(2))
    b = gumbel_argmax(logits + 13.0, torch.Generator().manual_seed(2))  # unnormalised log-probs
    assert torch.equal(a, b)
    logits[:, 3] = -math.inf
    assert (gumbel_argmax(logits, torch.Generator().manual_seed(3)) != 3).all()


# ---------------------------------------------------------------------- one step
def test_time_grid():
    ts = time_grid(10, 1e-5)
    assert ts.dtype == torch.float64 and ts.shape == (11,)
    assert ts[0] == 1.0 and abs(ts[-1].item() - 1e-5) < 1e-15 and (torch.diff(ts) < 0).all()


@pytest.mark.parametrize("a_t,a_s", [(0.001, 0.3), (0.5, 0.6), (0.9, 0.999)])
def test_reveal_mask_rate(a_t, a_s):
    mask_id = 9
    B, L = 2000, 16
    xt = torch.randint(0, 9, (B, L), generator=torch.Generator().manual_seed(0))
    xt[:, ::2] = mask_id  # half the positions are masked
    r = reveal_mask(xt, a_t, a_s, mask_id, torch.Generator().manual_seed(1))
    assert r.dtype == torch.bool and r.shape == xt.shape
    assert not r[xt != mask_id].any(), "only masked positions can be revealed"
    p = (a_s - a_t) / (1 - a_t)
    k = (xt == mask_id).sum().item()
    rate = r[xt == mask_id].double().mean().item()
    assert abs(rate - p) < 5 * math.sqrt(p * (1 - p) / k)


def test_transition_copies_x0_only_at_revealed_masked_positions():
    mask_id = 9
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, 9, (64, 12), generator=g)
    xt = torch.randint(0, 9, (64, 12), generator=g)  # deliberately != x0 at unmasked positions
    xt[torch.rand(64, 12, generator=g) < 0.6] = mask_id
    xs = transition(xt, x0, 0.2, 0.6, mask_id, torch.Generator().manual_seed(5))
    reveal = reveal_mask(xt, 0.2, 0.6, mask_id, torch.Generator().manual_seed(5))
    assert torch.equal(xs, torch.where(reveal, x0, xt))
    assert torch.equal(xs[xt != mask_id], xt[xt != mask_id])  # carried over, never replaced by x0
    assert reveal.any() and (xs == mask_id).any()  # a non-trivial step


def test_mdlm_step_draws_only_at_revealed_positions(tiny_denoiser, tok):
    mask_id = tok.mask_id
    x = torch.full((16, 8), mask_id)
    x[:, 0] = 3
    logp = tiny_denoiser.logp_x0(x)
    xs = anc.mdlm_step(x, logp, 0.3, 0.7, mask_id, torch.Generator().manual_seed(0))
    reveal = reveal_mask(x, 0.3, 0.7, mask_id, torch.Generator().manual_seed(0))
    assert torch.equal(xs != mask_id, reveal | (x != mask_id))
    assert (xs[:, 0] == 3).all()
    assert (xs[reveal] != tok.bos_id).all() and (xs[reveal] < tok.vocab_size).all()


# ---------------------------------------------------------------------- caching
def test_cached_denoiser_reevaluates_only_changed_rows(tiny_denoiser, tok):
    mask_id = tok.mask_id
    counting = Counting(tiny_denoiser)
    cache = CachedDenoiser(counting)
    x = torch.full((5, 8), mask_id)
    first = cache(x)
    assert cache.nfe == 1 and cache.rows_evaluated == 5
    assert torch.equal(cache(x.clone()), first) and cache.nfe == 1  # unchanged: no forward pass
    x2 = x.clone()
    x2[1, 3] = 4
    x2[3, 0] = 7
    out = cache(x2)
    assert cache.nfe == 2 and cache.rows_evaluated == 7 and counting.rows == 7
    assert counting.inputs[-1].shape[0] == 2 and torch.equal(counting.inputs[-1], x2[[1, 3]])
    assert torch.equal(out[[0, 2, 4]], first[[0, 2, 4]])
    assert torch.equal(out[[1, 3]], tiny_denoiser.logp_x0(x2[[1, 3]]))
    x3 = x2.clone()
    x3[2] = 5  # row 2 changed but has no mask left: nothing to predict
    cache(x3)
    assert cache.nfe == 2 and cache.rows_evaluated == 7


# ---------------------------------------------------------------------- the sampler
@pytest.mark.parametrize("seed", range(6))
def test_sampler_makes_at_most_L_plus_1_calls_per_sequence(tiny_denoiser, seed):
    L, steps = 8, 200
    counting = Counting(tiny_denoiser)
    x, stats = sample_mdlm(counting, 1, L, steps, torch.Generator().manual_seed(seed))
    assert counting.calls == stats["nfe"] <= L + 1
    assert counting.calls < steps // 10
    assert not (x == counting.mask_id).any()


def test_no_forward_pass_on_a_step_where_nothing_changed(tiny_denoiser, monkeypatch):
    L, steps, n = 8, 200, 3
    counting = Counting(tiny_denoiser)
    trace = []  # (state before step k, calls made so far), recorded at every step
    real_step = anc.mdlm_step

    def spy(xt, logp, a_t, a_s, mask_id, generator):
        trace.append((xt.clone(), counting.calls))
        return real_step(xt, logp, a_t, a_s, mask_id, generator)

    monkeypatch.setattr(anc, "mdlm_step", spy)
    x, stats = sample_mdlm(counting, n, L, steps, torch.Generator().manual_seed(0))
    assert len(trace) == steps
    changed_steps = 0
    for k in range(1, steps):
        (prev, c_prev), (cur, c_cur) = trace[k - 1], trace[k]
        rows = (cur != prev).any(-1) & (cur == counting.mask_id).any(-1)
        if not (cur != prev).any():
            assert c_cur == c_prev, f"step {k}: nothing changed but the network was called"
        else:
            changed_steps += 1
            assert c_cur - c_prev == int(rows.any()), f"step {k}"
    assert changed_steps > 0
    assert stats["nfe"] == counting.calls < steps // 4
    assert not (x == counting.mask_id).any()


def test_sampler_output_and_reproducibility(tiny_denoiser, tok):
    a, stats = sample_mdlm(tiny_denoiser, 10, 8, 20, torch.Generator().manual_seed(0), batch_size=4)
    b, _ = sample_mdlm(tiny_denoiser, 10, 8, 20, torch.Generator().manual_seed(0), batch_size=4)
    c, _ = sample_mdlm(tiny_denoiser, 10, 8, 20, torch.Generator().manual_seed(1), batch_size=4)
    assert a.shape == (10, 8) and a.dtype == torch.int64
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert not (a == tok.mask_id).any() and not (a == tok.bos_id).any()
    assert (a >= 0).all() and (a < tok.vocab_size).all()
    assert stats["rows_evaluated"] >= 10 and stats["nfe"] >= 3  # at least one call per batch of 4
    # the registry entry is the same sampler
    d, _ = SAMPLERS["ancestral"]({"dlm": tiny_denoiser}, 10, 8, 20, torch.Generator().manual_seed(0), batch_size=4)
    assert torch.equal(a, d)


def test_sampler_with_linear_schedule(tiny_denoiser, tok):
    x, _ = sample_mdlm(tiny_denoiser, 4, 8, 8, torch.Generator().manual_seed(0), schedule=make_schedule("linear"))
    assert x.shape == (4, 8) and not (x == tok.mask_id).any()


def test_oracle_gen_ppl_degrades_with_fewer_steps(owt_hmm, tok):
    """With a perfect denoiser the only error left is parallel decoding: L/8 steps unmask ~8 tokens at once
    from independent marginals, so the exact generative perplexity under pi must be much worse."""
    L, n = 16, 128
    den = OracleDenoiser(owt_hmm, tok)

    def nll_per_token(steps):
        x, _ = sample_mdlm(den, n, L, steps, torch.Generator().manual_seed(0))
        assert not (x == tok.mask_id).any() and not (x == tok.bos_id).any()
        nll = -owt_hmm.log_marginal(x) / L
        return nll.mean().item(), nll.std().item() / math.sqrt(n)

    fine, se_fine = nll_per_token(L)
    coarse, se_coarse = nll_per_token(L // 8)
    assert math.exp(fine) < math.exp(coarse)
    assert coarse - fine > 4 * math.hypot(se_fine, se_coarse)
    # and the fine sampler is not far from the data's own perplexity (entropy rate of owt)
    data = (-owt_hmm.log_marginal(owt_hmm.sample(n, L, torch.Generator().manual_seed(9))) / L).mean().item()
    assert fine < data + 0.6


# ---------------------------------------------------------------------- Algorithm 2's candidate draws
def _chi2_p_value(counts: torch.Tensor, p: torch.Tensor) -> float:
    """Pearson's chi-square p-value of ``counts`` against ``p`` over the cells with ``p > 0``."""
    n = counts.sum()
    keep = p > 0
    chi2 = ((counts[keep] - n * p[keep]) ** 2 / (n * p[keep])).sum()
    dof = int(keep.sum()) - 1
    return torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), chi2 / 2).item()


def test_inverse_cdf_draws_from_softmax_and_never_a_blocked_token():
    from unie.core.gumbel import categorical_inverse_cdf

    p = torch.tensor([0.4, 0.0, 0.25, 0.2, 0.1, 1e-3, 0.049, 0.0], dtype=torch.float64)
    logp = p.log().float()  # -inf at the zeros (the mask, blocked ids)
    n = 200_000
    draws = categorical_inverse_cdf(logp.expand(n // 4, -1), 4, torch.Generator().manual_seed(0))
    assert draws.shape == (n // 4, 4) and draws.dtype == torch.int64
    counts = torch.bincount(draws.flatten(), minlength=8).double()
    assert counts[1] == 0 and counts[7] == 0
    p = p / p.sum()
    assert 0.5 * (counts / n - p).abs().sum() < 0.01
    assert _chi2_p_value(counts, p) > 1e-3
    # the K draws of one row are independent: the pair (first, second) follows p x p
    pair = torch.bincount(draws[:, 0] * 8 + draws[:, 1], minlength=64).double()
    assert _chi2_p_value(pair, (p[:, None] * p[None, :]).flatten()) > 1e-3


def test_inverse_cdf_table_is_exact_at_extreme_probabilities():
    """A near-certain token, a tail down to 1e-30 and unnormalised rows: valid ids, the mode almost always."""
    from unie.core.gumbel import categorical_inverse_cdf

    logp = torch.full((3, 50), -70.0)
    logp[0, 7] = 0.0
    logp[1, :] = torch.linspace(-1, -60, 50)
    logp[2, -1] = -math.inf
    logp[2, :-1] = 5.0  # unnormalised: uniform over 49 tokens
    d = categorical_inverse_cdf(logp, 2000, torch.Generator().manual_seed(1))
    assert (d[0] == 7).all() and (d >= 0).all() and (d < 50).all() and (d[2] != 49).all()
    assert len(d[2].unique()) == 49
    assert categorical_inverse_cdf(logp[:0], 2, None).shape == (0, 2)


def _propose_reference(logp, xt, K, mask_id, generator):
    """``propose`` as it was before the inverse-CDF path: float64 Gumbel-max over every (j, i, v)."""
    B, L, V = logp.shape
    x0 = gumbel_argmax(logp[:, None].expand(B, K, L, V), generator).to(xt.device)
    return torch.where((xt == mask_id)[:, None, :], x0, xt[:, None, :])


def test_propose_on_a_cpu_generator_draws_the_reference_gumbel_values_bit_for_bit():
    from unie.energy.sampler import propose

    g = torch.Generator().manual_seed(0)
    logp = torch.log_softmax(torch.randn(4, 9, 30, generator=g), -1)
    xt = torch.randint(0, 29, (4, 9), generator=g)
    xt[torch.rand(4, 9, generator=g) < 0.6] = 29
    a = propose(logp, xt, 3, 29, torch.Generator().manual_seed(5))  # draw="auto" on a CPU generator
    b = _propose_reference(logp, xt, 3, 29, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="unknown draw"):
        propose(logp, xt, 3, 29, g, draw="float32")


def test_propose_inverse_cdf_has_the_law_of_p_theta_at_masked_positions():
    """The fast path (selected by a CUDA generator, forced here): carry-over where unmasked, p_theta elsewhere."""
    from unie.energy.sampler import propose

    g = torch.Generator().manual_seed(0)
    V, L, K, mask_id = 6, 3, 2, 5
    logits = torch.randn(1, L, V, generator=g) * 2
    logits[..., mask_id] = -math.inf
    logp = torch.log_softmax(logits, -1)
    xt = torch.tensor([[mask_id, 2, mask_id]])
    n = 40_000
    x0 = propose(
        logp.expand(n, -1, -1), xt.expand(n, -1), K, mask_id, torch.Generator().manual_seed(1), draw="inverse_cdf"
    )
    assert x0.shape == (n, K, L) and (x0[:, :, 1] == 2).all() and (x0 != mask_id).all()
    for i in (0, 2):
        p = logp[0, i].double().exp()
        for j in range(K):
            counts = torch.bincount(x0[:, j, i], minlength=V).double()
            assert _chi2_p_value(counts, p) > 1e-4
