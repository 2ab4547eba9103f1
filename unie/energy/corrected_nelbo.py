"""The likelihoods of the energy rows of Table 1 (EDLM / Uni-EDLM).

The MDLM NELBO with the energy-corrected conditional in place of ``log p_theta(x0 | xt)``::

    NLL(x0) ~ w(t) * -[ log p_theta(x0|xt) - E(x0, xs, xt) - log F ],   xt ~ q(xt|x0), s = u t, xs ~ q(xs|xt, x0)

* **Uni-E / Ind-E with an AR proxy** (Eq. uni_edlm): the closed-form ``log F`` of
  :func:`unie.energy.energies.log_partition` (Uni-E: ``log p_AR(xs|xt) - log p_theta(xs|xt)``, Eq.
  partition_calculation; Ind-E: 0, EDLM's self-normalised choice).  For Uni-E the corrected conditional
  equals ``log p_AR(x0 | xs)``: the tokens revealed in ``D`` are not scored at all, so this is *not* a
  bound (the brute-force check measures the missing normaliser).  ``ar_context: teacher_forced`` is refused:
  it needs the AR's marginal ``log p_AR(xt)`` of the visible tokens, which teacher forcing cannot compute;
  Table 1's teacher-forced rows use ``teacher_forced_carry_over`` (EDLM's CoAR estimator), i.e. the plug-in
  ``log p_AR(xt) ≈ Σ_{i visible} log p_AR(x0_i | x0_<i)`` along the data sequence, which makes the corrected
  conditional ``Σ_{i∈M_t} log p_AR(x0_i | x0_<i)``.
* **EDLM-NCE** (energy ``ebm``, ``docs/baselines.md``, EDLM): EDLM's single-sample plug-in for the
  normaliser, ``log F ≈ -E_phi(x̂0, xt)`` with ``x̂0 ~ p_theta(·|xt)``, so the per-sequence term is
  ``w(t) * -[log p_theta(x0|xt) - E_phi(x0, xt) + E_phi(x̂0, xt)]``.  Not a bound either
  (``E[log of a one-sample estimate of Z] <= log Z``).
"""

from __future__ import annotations

import torch

from ..core.gumbel import gumbel_argmax, uniform
from ..core.schedule import antithetic_t
from ..methods.mdlm import q_xt, transition
from .energies import ENERGIES, ARTerms, log_partition, logp_dlm_x0


def energy_corrected_nelbo(
    dlm, scorer, energy_name: str, ar_context: str | None, x0: torch.Tensor, schedule, mask_id: int, generator
) -> torch.Tensor:
    """One Monte-Carlo sample per sequence ``(B,)`` of the estimator above (module doc).

    ``scorer``: the AR proxy (``ind``, ``uni``) or the energy network's scorer (``ebm``)."""
    B = x0.shape[0]
    t = antithetic_t(B, generator, 1e-3, x0.device)
    xt = q_xt(x0, schedule.mask_prob(t), mask_id, generator)
    logp = dlm.logp_x0(xt).to(x0.device)
    x0k = x0[:, None]
    if ENERGIES[energy_name].scorer == "ebm":
        neg = gumbel_argmax(logp, generator).to(x0.device)  # x̂0 ~ p_theta(x0 | xt), one draw per position
        neg = torch.where(xt == mask_id, neg, xt)
        E, logF = scorer.energy(xt, x0k), -scorer.energy(xt, neg[:, None])
    else:
        s = uniform((B,), generator, x0.device) * t.double()
        xs = transition(xt, x0, schedule.alpha(t.double()), schedule.alpha(s), mask_id, generator)
        ar = ARTerms(scorer, ar_context, xt, x0k, xs[:, None], mask_id)
        E = ENERGIES[energy_name](xt, x0k, xs[:, None], logp, ar, mask_id)
        logF = log_partition(energy_name, xt, x0k, xs[:, None], logp, ar, mask_id)
    log_cond = logp_dlm_x0(logp, xt, x0k, mask_id) - E - logF
    return (schedule.weight(t.double()) * -log_cond[:, 0].double()).cpu()
