"""The toy world's exact quantities against brute-force enumeration, the real domains, corpora and oracles."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import pytest
import torch

from unie.data.tokenizer import word_tokenizer
from unie.data.toy_world import DOMAINS, HMM, OracleAR, OracleDenoiser, generate_corpus, word_list

L_SMALL = 4


# ---------------------------------------------------------------------- brute force
def brute_joint(hmm: HMM, L: int) -> dict[tuple, float]:
    """pi(x) for every x in V^L, summing over every hidden path z in S^L."""
    pi0, T, E = hmm.pi0.tolist(), hmm.T.tolist(), hmm.E.tolist()
    joint = {}
    for x in itertools.product(range(hmm.V), repeat=L):
        total = 0.0
        for z in itertools.product(range(hmm.S), repeat=L):
            p = pi0[z[0]] * E[z[0]][x[0]]
            for i in range(1, L):
                p *= T[z[i - 1]][z[i]] * E[z[i]][x[i]]
            total += p
        joint[x] = total
    return joint


def brute_marginal(joint: dict, x: tuple, observed: tuple[bool, ...]) -> float:
    """pi(x_O): the joint summed over every value of the unobserved positions."""
    return sum(p for y, p in joint.items() if all(y[i] == x[i] for i, o in enumerate(observed) if o))


def brute_conditional(joint: dict, i: int, given: list[int]):
    """``f(x, v) = pi(x_i = v | x_given)`` by summing the joint."""
    num, den = defaultdict(float), defaultdict(float)
    for y, p in joint.items():
        key = tuple(y[c] for c in given)
        num[key, y[i]] += p
        den[key] += p
    return lambda x, v: num[tuple(x[c] for c in given), v] / den[tuple(x[c] for c in given)]


ALL_X = list(itertools.product(range(3), repeat=L_SMALL))
PATTERNS = list(itertools.product([False, True], repeat=L_SMALL))  # all 16 observation patterns


@pytest.fixture(scope="module")
def joint4(tiny_hmm):
    return brute_joint(tiny_hmm, L_SMALL)


def test_from_matrices_pi0_is_stationary(tiny_hmm):
    assert torch.allclose(tiny_hmm.pi0 @ tiny_hmm.T, tiny_hmm.pi0, atol=1e-13)
    assert abs(tiny_hmm.pi0.sum().item() - 1) < 1e-13


def test_log_marginal_normalises_over_all_sequences(tiny_hmm, joint4):
    x = torch.tensor(ALL_X)
    p = tiny_hmm.log_marginal(x).exp()
    assert abs(p.sum().item() - 1.0) < 1e-12
    assert torch.allclose(p, torch.tensor([joint4[tuple(r)] for r in ALL_X], dtype=torch.float64), rtol=1e-10)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_log_marginal_with_missing_positions(tiny_hmm, joint4, pattern):
    x = torch.tensor(ALL_X)
    observed = torch.tensor(pattern).expand(len(ALL_X), -1)
    got = tiny_hmm.log_marginal(x, observed)
    want = torch.tensor([math.log(brute_marginal(joint4, r, pattern)) for r in ALL_X], dtype=torch.float64)
    assert torch.allclose(got, want, atol=1e-10)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_predictive_is_conditional_on_visible_left_context(tiny_hmm, joint4, pattern):
    x = torch.tensor(ALL_X)
    observed = torch.tensor(pattern).expand(len(ALL_X), -1)
    got = tiny_hmm.predictive(x, observed).exp()
    assert got.shape == (len(ALL_X), L_SMALL, tiny_hmm.V)
    for i in range(L_SMALL):
        cond = brute_conditional(joint4, i, [c for c in range(i) if pattern[c]])
        want = torch.tensor([[cond(r, v) for v in range(3)] for r in ALL_X], dtype=torch.float64)
        assert torch.allclose(got[:, i], want, atol=1e-12), f"position {i}"


@pytest.mark.parametrize("pattern", PATTERNS)
def test_posterior_is_conditional_on_all_other_visible_positions(tiny_hmm, joint4, pattern):
    x = torch.tensor(ALL_X)
    observed = torch.tensor(pattern).expand(len(ALL_X), -1)
    got = tiny_hmm.posterior(x, observed).exp()
    for i in range(L_SMALL):
        cond = brute_conditional(joint4, i, [c for c in range(L_SMALL) if pattern[c] and c != i])
        want = torch.tensor([[cond(r, v) for v in range(3)] for r in ALL_X], dtype=torch.float64)
        assert torch.allclose(got[:, i], want, atol=1e-12), f"position {i}"


def test_posterior_with_explicit_non_stationary_start():
    g = torch.Generator().manual_seed(7)
    T = torch.rand(3, 3, generator=g, dtype=torch.float64) + 0.05
    E = torch.rand(3, 3, generator=g, dtype=torch.float64) + 0.05
    hmm = HMM.from_matrices(T / T.sum(1, keepdim=True), E / E.sum(1, keepdim=True), pi0=torch.tensor([0.7, 0.2, 0.1]))
    joint = brute_joint(hmm, 3)
    xs = list(itertools.product(range(3), repeat=3))
    x = torch.tensor(xs)
    observed = torch.tensor([True, False, True]).expand(len(xs), -1)
    got = hmm.posterior(x, observed).exp()[:, 1]
    cond = brute_conditional(joint, 1, [0, 2])
    want = torch.tensor([[cond(r, v) for v in range(3)] for r in xs], dtype=torch.float64)
    assert torch.allclose(got, want, atol=1e-12)


def test_sample_frequencies_match_pi(tiny_hmm):
    L, n = 3, 60_000
    joint = brute_joint(tiny_hmm, L)
    x = tiny_hmm.sample(n, L, torch.Generator().manual_seed(0))
    assert x.shape == (n, L) and x.dtype == torch.int64
    assert int(x.min()) >= 0 and int(x.max()) < tiny_hmm.V
    idx = (x * torch.tensor([9, 3, 1])).sum(1)
    freq = torch.bincount(idx, minlength=27).double() / n
    p = torch.tensor([joint[t] for t in itertools.product(range(3), repeat=L)], dtype=torch.float64)
    assert 0.5 * (freq - p).abs().sum().item() < 0.02
    chi2 = (n * (freq - p) ** 2 / p).sum()
    p_value = torch.special.gammaincc(torch.tensor(26 / 2, dtype=torch.float64), chi2 / 2).item()
    assert p_value > 1e-3, f"chi-square {chi2.item():.1f} on 26 dof (p={p_value:.2g})"


def test_sample_is_reproducible(tiny_hmm):
    a = tiny_hmm.sample(100, 5, torch.Generator().manual_seed(3))
    b = tiny_hmm.sample(100, 5, torch.Generator().manual_seed(3))
    c = tiny_hmm.sample(100, 5, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)


# ---------------------------------------------------------------------- the real domains
@pytest.fixture(scope="module")
def domain_hmms():
    return {name: HMM(name) for name in DOMAINS}


def test_eight_domains():
    assert len(DOMAINS) == 8 and "owt" in DOMAINS


@pytest.mark.parametrize("name", list(DOMAINS))
def test_domain_is_a_valid_stationary_hmm(domain_hmms, name):
    hmm = domain_hmms[name]
    one = torch.ones(hmm.S, dtype=torch.float64)
    assert torch.allclose(hmm.T.sum(1), one, atol=1e-12)
    assert torch.allclose(hmm.E.sum(1), one, atol=1e-12)
    assert (hmm.T >= 0).all()
    assert (hmm.E > 0).all(), "every word must have positive emission probability (full support)"
    assert abs(hmm.pi0.sum().item() - 1) < 1e-12 and (hmm.pi0 >= 0).all()
    assert torch.allclose(hmm.pi0 @ hmm.T, hmm.pi0, atol=1e-12)
    assert hmm.V == len(word_list()) + 1 and hmm.eos_id == hmm.V - 1


def test_domains_differ(domain_hmms):
    owt = domain_hmms["owt"]
    for name, hmm in domain_hmms.items():
        if name != "owt":
            assert not (torch.allclose(hmm.T, owt.T) and torch.allclose(hmm.E, owt.E)), name


def test_generate_corpus_is_deterministic_and_split_dependent(tok):
    a = generate_corpus("owt", "train", 40, 16, seed=0)
    assert a == generate_corpus("owt", "train", 40, 16, seed=0)
    assert a != generate_corpus("owt", "valid", 40, 16, seed=0)
    assert a != generate_corpus("owt", "train", 40, 16, seed=1)
    assert a != generate_corpus("ptb", "train", 40, 16, seed=0)
    assert len(a) == 40
    for line in a:
        assert len(line.split()) == 16
        ids = tok.encode(line)  # every word is in the vocabulary
        assert max(ids) <= tok.eos_id


# ---------------------------------------------------------------------- oracles
def _masked_batch(hmm, tok, n=6, L=12, rate=0.5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x0 = hmm.sample(n, L, g)
    m = torch.rand(n, L, generator=g) < rate
    m[0] = True  # one fully masked row
    m[1] = False  # one fully visible row
    return x0, torch.where(m, torch.full_like(x0, tok.mask_id), x0), m


def test_oracle_denoiser(owt_hmm, tok):
    den = OracleDenoiser(owt_hmm, tok)
    assert den.mask_id == tok.mask_id and den.vocab_size == tok.vocab_size
    x0, xt, m = _masked_batch(owt_hmm, tok)
    logp = den.logp_x0(xt)
    assert logp.shape == (*xt.shape, tok.vocab_size) and logp.dtype == torch.float32
    assert torch.isneginf(logp[..., tok.mask_id]).all() and torch.isneginf(logp[..., tok.bos_id]).all()
    # unmasked positions: exact one-hot on the carried token
    vis = logp[~m]
    assert torch.equal(vis.gather(-1, xt[~m][:, None]).squeeze(-1), torch.zeros(vis.shape[0]))
    assert (torch.isneginf(vis).sum(-1) == tok.vocab_size - 1).all()
    # masked positions: normalised and equal to the HMM posterior given the visible tokens
    hid = logp[m]
    assert torch.allclose(hid.logsumexp(-1), torch.zeros(hid.shape[0]), atol=1e-5)
    post = owt_hmm.posterior(xt, ~m)[m].float()
    assert torch.allclose(hid[:, : owt_hmm.V], post, atol=1e-5)


def test_oracle_denoiser_matches_ratio_of_marginals(owt_hmm, tok):
    """pi(x_i | visible) = pi(x_i, visible) / pi(visible), with both from the forward algorithm."""
    den = OracleDenoiser(owt_hmm, tok)
    x0, xt, m = _masked_batch(owt_hmm, tok, seed=1)
    i = 5
    rows = m[:, i]
    logp = den.logp_x0(xt)[rows, i].double().gather(-1, x0[rows, i][:, None]).squeeze(-1)
    obs = ~m[rows]
    with_i = obs.clone()
    with_i[:, i] = True
    want = owt_hmm.log_marginal(x0[rows], with_i) - owt_hmm.log_marginal(x0[rows], obs)
    assert torch.allclose(logp, want, atol=1e-4)


def test_oracle_rejects_a_foreign_tokenizer(owt_hmm):
    with pytest.raises(ValueError):
        OracleDenoiser(owt_hmm, word_tokenizer(word_list()[:-1]))


def test_oracle_ar_is_the_exact_predictive(owt_hmm, tok):
    ar = OracleAR(owt_hmm, tok)
    x = owt_hmm.sample(5, 10, torch.Generator().manual_seed(2))
    logp = ar.logp_next(x)
    assert logp.shape == (5, 10, tok.vocab_size)
    assert torch.isneginf(logp[..., tok.mask_id]).all() and torch.isneginf(logp[..., tok.bos_id]).all()
    assert torch.allclose(logp[..., : owt_hmm.V], owt_hmm.predictive(x).float(), atol=1e-5)
    assert torch.allclose(logp.logsumexp(-1), torch.zeros(5, 10), atol=1e-5)
    # chain rule: sum of next-token log-probs = log pi(x)
    chain = logp.double().gather(-1, x[..., None]).squeeze(-1).sum(-1)
    assert torch.allclose(chain, owt_hmm.log_marginal(x), atol=1e-3)
    assert torch.allclose(ar.log_prob(x).double(), owt_hmm.log_marginal(x), atol=1e-3)


def test_oracle_ar_treats_masks_as_missing(owt_hmm, tok):
    ar = OracleAR(owt_hmm, tok)
    x = owt_hmm.sample(5, 10, torch.Generator().manual_seed(3))
    j = 4
    ctx = x.clone()
    ctx[:, j] = tok.mask_id
    logp, clean = ar.logp_next(ctx), ar.logp_next(x)
    assert torch.equal(logp[:, : j + 1], clean[:, : j + 1])  # nothing before the mask changes
    assert not torch.allclose(logp[:, j + 1], clean[:, j + 1])
    missing = torch.ones_like(x, dtype=torch.bool)
    missing[:, j] = False
    assert torch.allclose(logp[..., : owt_hmm.V], owt_hmm.predictive(x, missing).float(), atol=1e-6)
    # independent check: log pi(x_i | visible x_<i) = log pi(visible x_<=i) - log pi(visible x_<i)
    pos = torch.arange(10)
    for i in (j + 1, 9):
        upto = missing & (pos <= i)
        before = missing & (pos < i)
        want = owt_hmm.log_marginal(x, upto) - owt_hmm.log_marginal(x, before)
        got = logp[:, i].double().gather(-1, x[:, i, None]).squeeze(-1)
        assert torch.allclose(got, want, atol=1e-4)
