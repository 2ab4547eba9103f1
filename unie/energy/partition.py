"""Brute-force check of the paper's closed-form partition function (Eq. partition_calculation).

The paper claims that for ``E_uni`` the partition ``F(xt) = Σ_x0 p_theta(x0|xt) exp(-E_uni(x0, xs, xt))``
is ``log F = log p_AR(xs|xt) - log p_theta(xs|xt)``, "since Σ_x0 p_AR(x0|xs) = 1".  ``xs`` is itself derived
from ``x0`` (its revealed tokens are ``x0``'s), so the claim can be read two ways; both are enumerated:

* ``fixed_xs``: ``xs`` held fixed, the sum running over the ``x0`` consistent with it (the only ones with
  support under exact carry-over).  Then ``Σ p_theta exp(-E) / F = Σ_{x0_{M_s}} p_AR(x0|xs)``.
* ``derived_xs``: the Uni-EDLM conditional used for likelihoods and sampling, ``p(x0|xt) =
  p_theta(x0|xt) exp(-E(x0, xs(x0), xt)) / F(xs(x0))`` for a fixed reveal pattern ``D``, summed over
  every ``x0``.  This is the normaliser the NELBO needs.

Everything is enumerated exactly for a vocabulary of 3 and length 4 on a fully masked ``xt``.
"""

from __future__ import annotations

import itertools
import math

import torch

from ..data.tokenizer import word_tokenizer
from ..data.toy_world import HMM, OracleAR, OracleDenoiser
from .energies import ARTerms, log_partition, logp_dlm_x0, uni_energy


def tiny_world(seed: int = 0, S: int = 2, V: int = 3):
    """A random HMM over ``V`` symbols (the last plays ``<eos>``) with its word tokenizer."""
    g = torch.Generator().manual_seed(seed)
    T = torch.rand(S, S, generator=g, dtype=torch.float64) + 0.2
    E = torch.rand(S, V, generator=g, dtype=torch.float64) + 0.2
    hmm = HMM.from_matrices(T / T.sum(1, keepdim=True), E / E.sum(1, keepdim=True))
    tok = word_tokenizer([f"w{i}" for i in range(V - 1)])
    return hmm, tok


def check_partition(ar_context: str = "teacher_forced", L: int = 4, V: int = 3, seed: int = 0) -> list[dict]:
    """Enumerate both readings for every reveal pattern ``D`` of a fully masked ``xt`` of length ``L``.

    The proxy is the toy HMM's exact next-token model (a proper AR model); ``p_theta`` is the product of its
    exact per-position marginals (the best independent denoiser).  Returns one record per pattern with the
    total mass of each reading (1 would mean "normalised")."""
    hmm, tok = tiny_world(seed, V=V)
    den, proxy = OracleDenoiser(hmm, tok), OracleAR(hmm, tok)
    m = tok.mask_id
    xt = torch.full((1, L), m)
    logp = den.logp_x0(xt)  # (1, L, V+2)
    seqs = torch.tensor(list(itertools.product(range(V), repeat=L)))  # all x0, (V^L, L)
    N = len(seqs)
    rows = []
    for r in range(L + 1):
        for D in itertools.combinations(range(L), r):
            dmask = torch.zeros(L, dtype=torch.bool)
            dmask[list(D)] = True
            xs = torch.where(dmask, seqs, torch.full_like(seqs, m))  # xs derived from each x0
            x0k, xsk = seqs[:, None], xs[:, None]
            xtk = xt.expand(N, L)
            lp = logp.expand(N, -1, -1)
            ar = ARTerms(proxy, ar_context, xtk, x0k, xsk, m)
            E = uni_energy(xtk, x0k, xsk, lp, ar, m)[:, 0].double()
            logF = log_partition("uni", xtk, x0k, xsk, lp, ar, m)[:, 0].double()
            base = logp_dlm_x0(lp, xtk, x0k, m)[:, 0].double()
            w = torch.exp(base - E - logF)  # p_theta(x0|xt) exp(-E) / F(xs(x0)) for every x0
            derived = w.sum().item()
            # fixed xs: one xs per distinct revealed-token assignment; sum over the x0 consistent with it
            keys = [tuple(row) for row in xs.tolist()]
            groups: dict = {}
            for i, k in enumerate(keys):
                groups.setdefault(k, []).append(i)
            fixed = [w[idx].sum().item() for idx in groups.values()]
            rows.append(
                {
                    "ar_context": ar_context,
                    "revealed": len(D),
                    "D": "".join(map(str, D)) or "-",
                    "fixed_xs_min": min(fixed),
                    "fixed_xs_max": max(fixed),
                    "derived_xs": derived,
                    "log_derived_xs": math.log(derived),
                    "V_pow_D": V ** len(D),
                }
            )
    return rows
