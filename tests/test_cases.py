"""The case studies: reveal steps recorded without changing the samples, the exact-pi gaps against brute force,
and the selection rule."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from unie.energy.sampler import sample_energy
from unie.eval.cases import case_gaps, dependency_gaps, invariance_gaps, select_cases
from unie.methods.ar import ARModel
from unie.methods.mdlm import MDLMDenoiser

from conftest import make_net


def approx(v):
    return pytest.approx(v, abs=1e-9)


def test_record_steps_does_not_change_the_samples(tok):
    dlm = MDLMDenoiser(make_net(tok.vocab_size, seed=1), tok.mask_id, [tok.bos_id])
    proxy = ARModel(make_net(tok.vocab_size, causal=True, seed=2), tok.bos_id, tok.mask_id)
    steps = 4
    for K in (1, 3):
        opts = dict(energy="uni", K=K, w=1.0, ar_context="masked")
        a, _ = sample_energy(dlm, proxy, 2, 10, steps, torch.Generator().manual_seed(0), opts, batch_size=2)
        b, stats = sample_energy(
            dlm, proxy, 2, 10, steps, torch.Generator().manual_seed(0), opts, batch_size=2, record_steps=True
        )
        assert torch.equal(a, b)
        st = stats["reveal_step"]
        assert st.shape == (2, 10) and st.min() >= 0 and st.max() <= steps
    # batches concatenate in order: the same rows with batch_size 1
    _, stats1 = sample_energy(
        dlm, proxy, 2, 10, steps, torch.Generator().manual_seed(0), opts, batch_size=1, record_steps=True
    )
    assert stats1["reveal_step"].shape == (2, 10)


def _brute_log_marginal(hmm, x, observed):
    """log pi(x_O) by summing the joint over every value of the unobserved positions and every state path."""
    L = len(x)
    S, V = hmm.E.shape
    free = [i for i in range(L) if not observed[i]]
    total = 0.0
    for vals in itertools.product(range(V), repeat=len(free)):
        y = list(x)
        for i, v in zip(free, vals):
            y[i] = v
        for z in itertools.product(range(S), repeat=L):
            p = float(hmm.pi0[z[0]] * hmm.E[z[0], y[0]])
            for i in range(1, L):
                p *= float(hmm.T[z[i - 1], z[i]] * hmm.E[z[i], y[i]])
            total += p
    return math.log(total)


def test_gaps_match_brute_force_on_the_tiny_hmm(tiny_hmm):
    x = torch.tensor([0, 2, 1, 1])
    step = torch.tensor([0, 1, 1, 2])  # step 1 reveals positions 1 and 2 together, after position 0
    obs = lambda *pos: [i in pos for i in range(4)]  # noqa: E731
    lm = lambda *pos: _brute_log_marginal(tiny_hmm, x.tolist(), obs(*pos))  # noqa: E731
    joint = lm(0, 1, 2) - lm(0)
    singles = (lm(0, 1) - lm(0)) + (lm(0, 2) - lm(0))
    dep = dependency_gaps(tiny_hmm, x, step)
    assert set(dep) == {1}  # steps 0 and 2 reveal one token: no gap
    assert dep[1] == approx(joint - singles)
    inv = invariance_gaps(tiny_hmm, x, step)
    # token 3, revealed at step 2 with 0, 1, 2 visible, against 0, 1, 2 visible in the final sequence: no gap
    assert float(inv[3]) == approx(0.0)
    # token 1: at reveal pi(x_1 | x_0); finally pi(x_1 | x_0, x_2, x_3)
    want = (lm(0, 1) - lm(0)) - (lm(0, 1, 2, 3) - lm(0, 2, 3))
    assert float(inv[1]) == approx(want)
    # the batched call over two samples equals the one-sample calls
    both = case_gaps(tiny_hmm, torch.stack([x, x.flip(0)]), torch.stack([step, step]), 2)
    assert both[0]["dep"][1] == approx(dep[1]) and torch.allclose(both[0]["inv"], inv)


def test_selection_picks_the_planted_cases():
    L = 4
    quiet = {"dep": {1: -0.1}, "inv": torch.zeros(L)}
    mdlm = [dict(quiet) for _ in range(5)]
    uni = [dict(quiet) for _ in range(5)]
    mdlm[1] = {"dep": {2: -9.0}, "inv": torch.zeros(L)}  # the worst dependency error, but Uni-E errs too
    uni[1] = {"dep": {2: -8.0}, "inv": torch.zeros(L)}
    mdlm[3] = {"dep": {0: -5.0}, "inv": torch.tensor([0.0, 6.0, 0.0, 0.0])}  # avoided by Uni-E
    mdlm[4] = {"dep": {}, "inv": torch.tensor([0.0, 0.0, 9.0, 0.0])}  # worst invariance error, not avoided
    uni[4] = {"dep": {}, "inv": torch.tensor([0.0, 0.0, 5.0, 0.0])}
    out = select_cases(mdlm, uni, 2.3, 2.3)
    dep, inv = out["dependency"], out["invariance"]
    assert dep["index"] == 3 and dep["avoided"] and dep["n_errors"] == 2 and dep["n_avoided"] == 1
    assert dep["n_uni_errors"] == 1 and dep["mdlm_gap"] == -5.0
    assert inv["index"] == 3 and inv["avoided"] and inv["n_errors"] == 2 and inv["mdlm_gap"] == 6.0
    # nobody avoided: the worst MDLM error overall, said so
    out = select_cases([mdlm[1]], [uni[1]], 2.3, 2.3)
    assert out["dependency"]["index"] == 0 and not out["dependency"]["avoided"] and out["dependency"]["mdlm_error"]
