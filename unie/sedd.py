"""SEDD: score-entropy discrete diffusion with the absorbing graph (Lou et al. 2024; ``notes/baselines.md`` §2).

Forward process: the same masking process as MDLM (each token of ``x0`` becomes the mask w.p.
``1 - alpha_t``, log-linear schedule), written in SEDD's total-noise variable ``sigma(t) = -log alpha_t``.
The network is **time-conditioned** (it gets ``sigma`` through adaLN) and, instead of a distribution over
``x0``, outputs a *concrete score*: for every position ``i`` and token ``y``,
``s_theta(xt, sigma)_i[y] ~ p_t(xt with x_i := y) / p_t(xt)``.

Parameterisation (§2.1, ``scale_by_sigma``), raw output ``o`` ``(B, L, V)``::

    log s[y] = o[y] - log(e^sigma - 1) - log(V_real)          (y a token the model may produce)
    log s[y] = -inf                                           (y blocked: the mask, an input-only <bos>)
    log s[xt_i] = 0                                           (the entry of the current token)

``V_real`` is the number of producible tokens (GPT-2: 50,257, the reference's ``dim - 1``).  On a masked
position the true score is ``s[y] = p0(y | unmasked xt) * r`` with ``r = 1 / (e^sigma - 1)`` (§2.5 #16),
so the optimal ``o`` is ``log p0(y | .) + log V_real``: the ``sigma`` scaling makes the target
time-independent and ``o ~ 0`` on average.

Loss (§2.2, diffusion score entropy, DSE), per masked position with clean token ``x0_i``::

    DSE_i = sum_{y != m} s[y] - r log s[x0_i] + r (log r - 1)
          = r * ( sum_{y != m} e^{z_y} - 1 - z_{x0_i} ),        z = log s - log r

The second form is an algebraic identity (the ``r log r`` terms cancel).  It is what :func:`score_entropy`
computes: no large cancelling terms at small ``sigma`` (where ``r ~ 1/sigma``), and every summand is
visibly ``>= 0`` (``sum e^z >= e^{z_x0} >= 1 + z_x0``), zero iff ``s = r * onehot(x0)``.
Per sequence, ``NELBO = dsigma/dt * sum_i DSE_i``; with the true score this equals MDLM's
``1/t * sum_i -log p0(x0_i | xt)`` term by term (``r dsigma/dt = -alpha'_t/(1 - alpha_t)``).  Training
and the reported bound use the same quantity, normalised per token like MDLM (mean over all ``B*L``).
"""

from __future__ import annotations

import math

import torch

from .mdlm import q_xt
from .registry import METHODS
from .schedule import Schedule, antithetic_t, make_schedule
from .tokenizer import blocked_ids


def log_expm1(sigma: torch.Tensor) -> torch.Tensor:
    """``log(e^sigma - 1)`` via ``expm1`` (accurate for small ``sigma``)."""
    return torch.log(torch.expm1(sigma))


def excluded_ids(mask_id: int, blocked=()) -> list[int]:
    """Ids that never get a positive score: the mask and any other blocked id (sorted, unique)."""
    return sorted({mask_id, *blocked})


def sedd_log_score(out: torch.Tensor, xt: torch.Tensor, sigma: torch.Tensor, mask_id: int, blocked=()) -> torch.Tensor:
    """SEDD's log concrete score ``(B, L, V)`` from raw outputs ``out`` ``(B, L, V)`` (§2.1).

    ``sigma`` ``(B,)`` is the total noise ``-log alpha_t``.  Blocked ids (the mask, ``blocked``) get
    ``-inf`` (score 0, an exact exclusion); then the entry of the current token ``xt_i`` is set to 0
    (score 1: the ratio of ``xt`` to itself), so on a masked position the mask column is 0 and on an
    unmasked one the carried token is 0.  Keeps ``out``'s dtype."""
    excl = excluded_ids(mask_id, blocked)
    n_real = out.shape[-1] - len(excl)
    shift = (log_expm1(sigma.double()) + math.log(n_real)).to(device=out.device, dtype=out.dtype)
    block = torch.zeros(out.shape[-1], dtype=torch.bool, device=out.device)
    block[excl] = True
    ls = out.masked_fill(block, -math.inf) - shift[:, None, None]
    return ls.scatter(-1, xt[..., None].to(out.device), 0.0)


def score_entropy(log_score: torch.Tensor, xt: torch.Tensor, x0: torch.Tensor, sigma: torch.Tensor,
                  mask_id: int) -> torch.Tensor:
    """Diffusion score entropy per position ``(B, L)`` for the absorbing graph (§2.2); 0 where ``xt`` is unmasked.

    ``DSE_i = r * (sum_{y != m} e^{z_y} - 1 - z_{x0_i})`` with ``z = log s - log r``, ``r = 1/(e^sigma - 1)``,
    which equals the reference's ``sum_{y != m} s_y - r log s_{x0} + r (log r - 1)`` (module docstring).
    ``log_score`` ``(B, L, V)`` (its mask column is ignored), ``sigma`` ``(B,)``.  Differentiable."""
    dtype, dev = log_score.dtype, log_score.device
    xt, x0 = xt.to(dev), x0.to(dev)
    masked = xt == mask_id
    log_r = -log_expm1(sigma.double())  # (B,) float64

    def at_masked(v: torch.Tensor) -> torch.Tensor:  # (B,) -> (N,): one value per masked position
        return v.to(device=dev, dtype=dtype)[:, None].expand(xt.shape)[masked]

    z = log_score[masked] - at_masked(log_r)[:, None]  # (N, V)
    z = z.index_fill(-1, torch.tensor([mask_id], device=dev), -math.inf)  # sums run over y != m
    z0 = z.gather(-1, x0[masked][:, None]).squeeze(-1)
    bracket = torch.expm1(torch.logsumexp(z, -1)) - z0  # sum_y e^{z_y} - 1 - z_x0  (>= 0)
    dse = torch.zeros(xt.shape, dtype=dtype, device=dev)
    dse[masked] = at_masked(log_r.exp()) * bracket
    return dse


class SEDDScore:
    """A trained SEDD network as a sampler-facing score model: ``log_score(xt, sigma) -> (B, L, V)``."""

    def __init__(self, net, mask_id: int, blocked=(), schedule: Schedule | None = None):
        self.net = net
        self.mask_id = mask_id
        self.blocked = tuple(blocked)
        self.vocab_size = net.cfg.vocab_size
        self.schedule = schedule or make_schedule("loglinear")

    @torch.no_grad()
    def log_score(self, xt: torch.Tensor, sigma) -> torch.Tensor:
        """``log s_theta(xt, sigma)`` ``(B, L, V)``; ``sigma`` is a scalar or ``(B,)`` (total noise)."""
        dev = self.net.device
        xt = xt.to(dev)
        sigma = torch.as_tensor(sigma, dtype=torch.float64).reshape(-1).expand(xt.shape[0]).to(dev)
        return sedd_log_score(self.net(xt, sigma=sigma.float()), xt, sigma, self.mask_id, self.blocked)


def sedd_nelbo(score_model, x0: torch.Tensor, t: torch.Tensor, schedule: Schedule, mask_id: int,
               generator=None) -> torch.Tensor:
    """Single-sample SEDD NELBO per sequence ``(B,)`` in nats: ``dsigma/dt * sum_i DSE_i`` (float64).

    ``score_model`` is anything with ``log_score(xt, sigma)`` (a trained SEDD, or an oracle)."""
    td = t.double()
    xt = q_xt(x0, schedule.mask_prob(td), mask_id, generator)
    sigma = schedule.sigma(td)
    ls = score_model.log_score(xt, sigma).double()
    dse = score_entropy(ls, xt.to(ls.device), x0.to(ls.device), sigma, mask_id)
    return schedule.dsigma(td).to(ls.device) * dse.sum(-1)


@METHODS.register("sedd")
class SEDD:
    """Training loss and likelihood bound of SEDD (absorbing).  Options: ``schedule``, ``eps``, ``t_eps``."""

    causal = False
    time_conditioned = True
    has_likelihood = True
    stochastic_nll = True

    def __init__(self, tokenizer_info: dict, schedule: str = "loglinear", eps: float = 1e-3, t_eps: float = 1e-3):
        self.mask_id = tokenizer_info["mask_id"]
        self.blocked = blocked_ids(tokenizer_info)
        self.schedule = make_schedule(schedule, eps)
        self.t_eps = t_eps

    def loss(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """Mean per-token DSE bound over the batch (antithetic t), ``dsigma/dt`` weighted (§2.2)."""
        t = antithetic_t(x0.shape[0], generator, self.t_eps, x0.device)
        xt = q_xt(x0, self.schedule.mask_prob(t), self.mask_id, generator)
        sigma = self.schedule.sigma(t.double())
        ls = sedd_log_score(net(xt, sigma=sigma.float()), xt, sigma, self.mask_id, self.blocked)
        dse = score_entropy(ls, xt, x0, sigma, self.mask_id)
        w = self.schedule.dsigma(t.double()).to(dtype=dse.dtype)
        return (w[:, None] * dse).sum() / x0.numel()

    @torch.no_grad()
    def nll(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """Per-sequence NELBO ``(B,)`` with antithetic t across the batch (an ELBO, so PPL as for MDLM)."""
        t = antithetic_t(x0.shape[0], generator, self.t_eps, x0.device)
        return sedd_nelbo(self.wrap(net), x0, t, self.schedule, self.mask_id, generator)

    def wrap(self, net) -> SEDDScore:
        """The trained network as a sampler-facing score model."""
        return SEDDScore(net, self.mask_id, self.blocked, self.schedule)
