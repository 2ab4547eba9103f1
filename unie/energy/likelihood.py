"""The paper's likelihood for the EDLM / Uni-EDLM rows of Table 1 (Eq. uni_edlm with the closed-form log F).

The MDLM NELBO with the energy-corrected conditional in place of ``log p_theta(x0 | xt)``::

    NLL(x0) ~ w(t) * -[ log p_theta(x0|xt) - E(x0, xs, xt) - log F ],   xt ~ q(xt|x0), s = u t, xs ~ q(xs|xt, x0)

with the closed-form ``log F`` of :func:`unie.energy.energies.log_partition` (Uni-E:
``log p_AR(xs|xt) - log p_theta(xs|xt)``, Eq. partition_calculation; Ind-E: 0, EDLM's self-normalised
choice).  For Uni-E the corrected conditional equals ``log p_AR(x0 | xs)``: the tokens revealed in ``D``
are not scored at all, so this is *not* a bound (the brute-force check measures the missing normaliser).
"""

from __future__ import annotations

import torch

from ..core.gumbel import uniform
from ..core.schedule import antithetic_t
from ..methods.mdlm import q_xt, transition
from .energies import ENERGIES, ARTerms, log_partition, logp_dlm_x0


def energy_corrected_nelbo(dlm, proxy, energy_name: str, ar_context: str, x0: torch.Tensor, schedule, mask_id: int,
                           generator) -> torch.Tensor:
    """One Monte-Carlo sample per sequence ``(B,)`` of the estimator above (module doc)."""
    B = x0.shape[0]
    t = antithetic_t(B, generator, 1e-3, x0.device)
    xt = q_xt(x0, schedule.mask_prob(t), mask_id, generator)
    logp = dlm.logp_x0(xt).to(x0.device)
    s = uniform((B,), generator, x0.device) * t.double()
    a_t, a_s = schedule.alpha(t.double()), schedule.alpha(s)
    xs = transition(xt, x0, a_t, a_s, mask_id, generator)
    x0k, xsk = x0[:, None], xs[:, None]
    ar = ARTerms(proxy, ar_context, xt, x0k, xsk, mask_id)
    E = ENERGIES[energy_name](xt, x0k, xsk, logp, ar, mask_id)
    logF = log_partition(energy_name, xt, x0k, xsk, logp, ar, mask_id)
    log_cond = logp_dlm_x0(logp, xt, x0k, mask_id) - E - logF
    return (schedule.weight(t.double()) * -log_cond[:, 0].double()).cpu()
