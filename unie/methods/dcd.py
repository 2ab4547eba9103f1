"""DCD, Discrete Copula Diffusion: the "DCD_autoregressive" sampler (Liu et al.; ``docs/baselines.md``).

An AR model (the "copula", our AR proxy) adds the dependencies a masked diffusion model (DM) drops.
The sampled law is the I-projection of the AR distribution onto the DM's marginals,
``p(x) ∝ p_AR(x) prod_i p_dm(x_i | xt) / p_hat_AR(x_i | .)``, implemented as a re-weighted AR sampler:

1. Time grid ``t_k = linspace(1, 1e-5, S+1)``.  Step ``k`` (``t -> s``) decodes the contiguous chunk
   ``[sid, eid)`` with ``eid = round((1 - P_mask(s)) L)``, ``P_mask(s) = 1 - alpha_s``: tokens are revealed
   strictly left to right, about ``L/S`` per step; ``sid <- eid`` afterwards.
2. Two DM passes on the current state ``x`` (``(B, L)``, masked from ``sid`` on): the bidirectional one
   gives ``nc_i = p_theta(x0_i | x)`` and the SAME weights with a causal mask at inference give ``c_i``
   (the MDLM form of upstream's causal pass, SUBS in both), for ``i`` in the chunk.
3. Sequential AR sampling over the chunk, KV-cached: for ``i = sid .. eid-1``,
   ``x_i ~ softmax(l_AR(. | x_<i) + alpha (log nc_i - log c_i))`` with probabilities clipped at
   ``1e-16`` before the logs (``alpha = 1`` in the released code), by float64 Gumbel-max instead of
   ``torch.multinomial``.  Ids the AR or the DM may never emit (mask, input-only BOS) stay at ``-inf``
   (exact exclusion from the AR's normalisation).
4. Anything left after the last step is drawn from the DM's marginals (the released final denoise step);
   with the ``1e-5`` end of the grid ``eid = L`` at the last step, so this is a safeguard.

Steps whose chunk is empty (rounding, ``S`` close to ``L``) make no DM pass.  Cost: ``2 x`` (non-empty
steps) DM passes (``nfe``) plus ``L`` sequential AR passes (``ar_steps``) per batch: an AR model's
wall-clock plus DM overhead.  With ``alpha = 0`` the sampler is exactly the proxy's ancestral sampler
(:meth:`unie.methods.ar.ARModel.sample`): the same Gumbel draws in the same order give the same tokens (tested).

An AR that reads chunks beginning with their own BOS (``chunk_bos``, the released AR) is fed as its sampler is:
position 0 is that BOS (the AR's context, never drawn, as in upstream's ``_ar_sampler``) and the AR draws positions
``1..L-1`` (``L - 1`` AR passes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.gumbel import gumbel_argmax
from ..core.options import make_options
from ..core.registry import register_sampler
from ..core.sampling import in_batches, time_grid
from ..core.schedule import Schedule, make_schedule
from .mdlm import fill_remaining, subs_logp


def chunk_bounds(steps: int, L: int, schedule: Schedule, eps: float = 1e-5) -> list[tuple[int, int]]:
    """The chunk ``[sid, eid)`` decoded at each of the ``steps`` steps; ``eid = round(alpha_s L)``, monotone.

    The last chunk may end before ``L`` only if ``alpha(eps) L`` rounds below ``L``."""
    ts = time_grid(steps, eps)
    bounds, sid = [], 0
    for k in range(steps):
        eid = min(L, max(sid, int(round(float(schedule.alpha(ts[k + 1])) * L))))
        bounds.append((sid, eid))
        sid = eid
    return bounds


@torch.no_grad()
def dm_chunk_logratio(dlm, x: torch.Tensor, sid: int, eid: int, clip: float = 1e-16) -> torch.Tensor:
    """``log nc_i - log c_i`` ``(B, eid - sid, V)`` float64 for the chunk: bidirectional vs causal-at-inference
    passes of the same denoiser network, both SUBS, probabilities clipped at ``clip``."""
    net = dlm.net
    xin = x.to(net.device)
    blocked = getattr(dlm, "blocked", (dlm.mask_id,))
    nc = subs_logp(net(xin), xin, dlm.mask_id, blocked)[:, sid:eid]
    c = subs_logp(net(xin, causal=True), xin, dlm.mask_id, blocked)[:, sid:eid]
    floor = math.log(clip)
    return nc.double().clamp(min=floor) - c.double().clamp(min=floor)


@dataclass(frozen=True)
class DCDOptions:
    """``alpha``: weight of the DM's log-ratio on the AR logits (1 in the released code; 0 = the AR alone);
    ``eps``: end of the time grid; ``clip``: probability floor before the logs."""

    alpha: float = 1.0
    eps: float = 1e-5
    clip: float = 1e-16


@torch.no_grad()
def sample_dcd(
    dlm,
    proxy,
    n: int,
    L: int,
    steps: int,
    generator: torch.Generator,
    options=None,
    *,
    schedule: Schedule | None = None,
    batch_size: int = 256,
    device="cpu",
    **kwargs,
) -> tuple[torch.Tensor, dict]:
    """DCD_autoregressive with ``steps`` DM steps. ``dlm``: an :class:`~unie.methods.mdlm.MDLMDenoiser` (its ``.net`` is
    the bidirectional transformer); ``proxy``: an :class:`~unie.methods.ar.ARModel` (KV cache).

    Options: :class:`DCDOptions`.  Returns ``(x (n, L) int64 cpu, stats)`` with ``nfe`` (DM passes) and
    ``ar_steps`` (AR passes)."""
    opts = make_options(DCDOptions, options, "dcd options", **kwargs)
    alpha, eps, clip = opts.alpha, opts.eps, opts.clip
    schedule = schedule or make_schedule("loglinear")
    mask_id = dlm.mask_id
    bounds = chunk_bounds(steps, L, schedule, eps)
    ar_net, ar_dev = proxy.net, proxy.net.device
    first = 1 if getattr(proxy, "chunk_bos", False) else 0  # positions the AR never draws (module doc)

    def one_batch(b):
        nfe, ar_steps = 0, 0
        x = torch.full((b, L), mask_id, dtype=torch.long, device=device)
        x[:, :first] = proxy.bos_id  # chunk_bos: position 0 is the chunk's BOS, the AR's first context
        kv = ar_net.new_cache()
        feed = torch.full((b, 1), proxy.bos_id, dtype=torch.long, device=ar_dev)  # next input of the AR
        for sid, eid in bounds:
            sid = max(sid, first)
            if eid <= sid:
                continue
            ratio = dm_chunk_logratio(dlm, x, sid, eid, clip).to(ar_dev)
            nfe += 2
            for i in range(sid, eid):
                logp_ar = proxy.normalise(ar_net(feed, cache=kv)[:, -1])  # log p_AR(x_i | x_<i), (b, V)
                ar_steps += 1
                tok = gumbel_argmax(logp_ar.double() + alpha * ratio[:, i - sid], generator).to(ar_dev)
                x[:, i] = tok.to(device)
                feed = tok[:, None]
        if (x == mask_id).any():  # final denoise step (safeguard): the DM's marginals
            xin = x.to(dlm.net.device)
            x = fill_remaining(x, dlm.logp_x0(xin).to(device), mask_id, generator)
            nfe += 1
        return x, {"nfe": nfe, "ar_steps": ar_steps}

    return in_batches(n, batch_size, one_batch)


@register_sampler("dcd", DCDOptions, roles={"dlm": ("absorbing",), "proxy": ("ar",)})
def dcd_sampler(models: dict, n: int, L: int, steps: int, generator, options: DCDOptions, batch_size: int, device):
    """Registry entry: ``models['dlm']`` an MDLM denoiser, ``models['proxy']`` the AR copula."""
    return sample_dcd(
        models["dlm"], models["proxy"], n, L, steps, generator, options, batch_size=batch_size, device=device
    )
