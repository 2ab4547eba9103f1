"""SEDD: score-entropy discrete diffusion with the absorbing graph (Lou et al. 2024; ``docs/baselines.md``).

Forward process: the same masking process as MDLM (each token of ``x0`` becomes the mask w.p.
``1 - alpha_t``, log-linear schedule), written in SEDD's total-noise variable ``sigma(t) = -log alpha_t``.
The network is **time-conditioned** (it gets ``sigma`` through adaLN) and, instead of a distribution over
``x0``, outputs a *concrete score*: for every position ``i`` and token ``y``,
``s_theta(xt, sigma)_i[y] ~ p_t(xt with x_i := y) / p_t(xt)``.

Parameterisation (upstream's ``scale_by_sigma``), raw output ``o`` ``(B, L, V)``::

    log s[y] = o[y] - log(e^sigma - 1) - log(V_real)          (y a token the model may produce)
    log s[y] = -inf                                           (y blocked: the mask, an input-only <bos>)
    log s[xt_i] = 0                                           (the entry of the current token)

``V_real`` is the number of producible tokens (GPT-2: 50,257, the reference's ``dim - 1``).  On a masked
position the true score is ``s[y] = p0(y | unmasked xt) * r`` with ``r = 1 / (e^sigma - 1)`` (docs/baselines.md),
so the optimal ``o`` is ``log p0(y | .) + log V_real``: the ``sigma`` scaling makes the target
time-independent and ``o ~ 0`` on average.

Loss (diffusion score entropy, DSE), per masked position with clean token ``x0_i``::

    DSE_i = sum_{y != m} s[y] - r log s[x0_i] + r (log r - 1)
          = r * ( sum_{y != m} e^{z_y} - 1 - z_{x0_i} ),        z = log s - log r

The second form is an algebraic identity (the ``r log r`` terms cancel).  It is what :func:`score_entropy`
computes: no large cancelling terms at small ``sigma`` (where ``r ~ 1/sigma``), and every summand is
visibly ``>= 0`` (``sum e^z >= e^{z_x0} >= 1 + z_x0``), zero iff ``s = r * onehot(x0)``.
Per sequence, ``NELBO = dsigma/dt * sum_i DSE_i``; with the true score this equals MDLM's
``1/t * sum_i -log p0(x0_i | xt)`` term by term (``r dsigma/dt = -alpha'_t/(1 - alpha_t)``).  Training
and the reported bound use the same quantity, normalised per token like MDLM (mean over all ``B*L``).

**Sampler.** SEDD's analytic ("Tweedie tau-leaping") sampler for the absorbing graph (``docs/baselines.md``).

Time grid ``t_k = linspace(1, eps, S + 1)`` with ``eps = 1e-5``; ``sigma_k = -log alpha(t_k)`` and
``dsigma = sigma_k - sigma_{k+1}``.  Start from all masks.  One step from ``t_k`` to ``t_{k+1}`` with
``s = exp(log s_theta(xt, sigma_k))`` (the current-token entry is 1):

* staggered score: every entry times ``e^{dsigma}``, plus ``(1 - e^{dsigma}) * sum_y s_y`` on the mask column;
* times the transposed transition row of the current token, ``exp(dsigma Q)^T[xt_i]``: for ``xt_i = m``,
  1 on the mask column and ``1 - e^{-dsigma}`` on every real token; for ``xt_i != m``, ``e^{-dsigma}`` on
  ``xt_i`` only (the token stays, so only masked positions are drawn).

On a masked position this leaves the unnormalised weights

    token y != m:  (e^{dsigma} - 1) * s_y
    mask m:        1 - (e^{dsigma} - 1) * sum_{y != m} s_y        (clipped at 0: an exact exclusion)

(with the true score, ``s = r p0``, these are exactly MDLM's ``p0(y) (alpha_s - alpha_t)`` and
``1 - alpha_s`` over ``1 - alpha_t``).  The reference draws with ``probs / Exp`` in float32 where a negative
mask weight simply loses; here each position is one float64 Gumbel-max over the log-weights, with ``-inf``
for a non-positive weight.  **Final denoise**: one analytic step from ``t = eps`` to ``sigma = 0`` with the
mask column dropped, i.e. every remaining mask is drawn from ``s_theta(x, sigma(eps))`` over real tokens.

No caching: the network is time-conditioned, so each step is one network call (a step is skipped, with no
call and no draw, only when no mask is left: then every later step is a carry-over, an exact saving).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.gumbel import gumbel_argmax
from ..core.options import make_options
from ..core.precision import widen
from ..core.registry import METHODS, register_sampler
from ..core.sampling import in_batches, time_grid
from ..core.schedule import Schedule, antithetic_t, make_schedule
from ..data.tokenizer import blocked_ids
from .mdlm import MDLMOptions, q_xt


def log_expm1(sigma: torch.Tensor) -> torch.Tensor:
    """``log(e^sigma - 1)`` via ``expm1`` (accurate for small ``sigma``)."""
    return torch.log(torch.expm1(sigma))


def excluded_ids(mask_id: int, blocked=()) -> list[int]:
    """Ids that never get a positive score: the mask and any other blocked id (sorted, unique)."""
    return sorted({mask_id, *blocked})


def sedd_log_score(out: torch.Tensor, xt: torch.Tensor, sigma: torch.Tensor, mask_id: int, blocked=()) -> torch.Tensor:
    """SEDD's log concrete score ``(B, L, V)`` from raw outputs ``out`` ``(B, L, V)`` (module doc).

    ``sigma`` ``(B,)`` is the total noise ``-log alpha_t``.  Blocked ids (the mask, ``blocked``) get
    ``-inf`` (score 0, an exact exclusion); then the entry of the current token ``xt_i`` is set to 0
    (score 1: the ratio of ``xt`` to itself), so on a masked position the mask column is 0 and on an
    unmasked one the carried token is 0.  Float32 at least (a bfloat16 ``out`` is widened; float64 stays)."""
    out = widen(out)
    excl = excluded_ids(mask_id, blocked)
    n_real = out.shape[-1] - len(excl)
    shift = (log_expm1(sigma.double()) + math.log(n_real)).to(device=out.device, dtype=out.dtype)
    block = torch.zeros(out.shape[-1], dtype=torch.bool, device=out.device)
    block[excl] = True
    ls = out.masked_fill(block, -math.inf) - shift[:, None, None]
    return ls.scatter(-1, xt[..., None].to(out.device), 0.0)


def score_entropy(
    log_score: torch.Tensor, xt: torch.Tensor, x0: torch.Tensor, sigma: torch.Tensor, mask_id: int
) -> torch.Tensor:
    """Diffusion score entropy per position ``(B, L)`` for the absorbing graph (module doc); 0 where ``xt`` is unmasked.

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


def sedd_nelbo(
    score_model, x0: torch.Tensor, t: torch.Tensor, schedule: Schedule, mask_id: int, generator=None
) -> torch.Tensor:
    """Single-sample SEDD NELBO per sequence ``(B,)`` in nats: ``dsigma/dt * sum_i DSE_i`` (float64).

    ``score_model`` is anything with ``log_score(xt, sigma)`` (a trained SEDD, or an oracle)."""
    td = t.double()
    xt = q_xt(x0, schedule.mask_prob(td), mask_id, generator)
    sigma = schedule.sigma(td)
    ls = score_model.log_score(xt, sigma).double()
    dse = score_entropy(ls, xt.to(ls.device), x0.to(ls.device), sigma, mask_id)
    return schedule.dsigma(td).to(ls.device) * dse.sum(-1)


@dataclass(frozen=True)
class SEDDOptions(MDLMOptions):
    """SEDD's training options: the same forward process as MDLM (``schedule``, ``eps``, ``t_eps``)."""


@METHODS.register("sedd")
class SEDD:
    """Training loss and likelihood bound of SEDD, absorbing graph (options: :class:`SEDDOptions`)."""

    Options = SEDDOptions
    causal = False
    time_conditioned = True
    has_likelihood = True
    stochastic_nll = True

    def __init__(self, tokenizer_info: dict, options: SEDDOptions | dict | None = None, **kwargs):
        self.options = make_options(SEDDOptions, options, "sedd options", **kwargs)
        self.mask_id = tokenizer_info["mask_id"]
        self.blocked = blocked_ids(tokenizer_info)
        self.schedule = make_schedule(self.options.schedule, self.options.eps)
        self.t_eps = self.options.t_eps

    @staticmethod
    def kind(options: SEDDOptions) -> str:
        return "sedd"

    def loss(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """Mean per-token DSE bound over the batch (antithetic t), ``dsigma/dt`` weighted."""
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


# -------------------------------------------------------------------------------------- sampler
def _without_mask(log_s: torch.Tensor, mask_id: int) -> torch.Tensor:
    """``log_s`` in float64 with the mask column at ``-inf`` (``(N, V)``)."""
    return log_s.double().index_fill(-1, torch.tensor([mask_id], device=log_s.device), -math.inf)


def tweedie_logits(log_s: torch.Tensor, dsigma: float, mask_id: int) -> torch.Tensor:
    """Unnormalised float64 log-weights ``(N, V)`` of one analytic step at masked positions (module doc).

    ``log_s`` ``(N, V)``: the log-score rows of the masked positions (the mask column is ignored).
    Tokens: ``log(e^dsigma - 1) + log s_y``; mask: ``log(1 - (e^dsigma - 1) sum_{y != m} s_y)``, ``-inf``
    when that weight is not positive."""
    ls = _without_mask(log_s, mask_id)
    log_em1 = math.log(math.expm1(dsigma))
    stay = -torch.expm1(log_em1 + torch.logsumexp(ls, -1))  # 1 - (e^dsigma - 1) * sum_y s_y
    out = ls + log_em1
    out[:, mask_id] = torch.log(stay.clamp(min=0.0))
    return out


def tweedie_step(xt: torch.Tensor, log_s: torch.Tensor, dsigma: float, mask_id: int, generator) -> torch.Tensor:
    """One analytic step ``(B, L) -> (B, L)``: masked positions are drawn (float64 Gumbel-max), others stay."""
    masked = xt == mask_id
    xs = xt.clone()
    if masked.any():
        xs[masked] = gumbel_argmax(tweedie_logits(log_s[masked], dsigma, mask_id), generator).to(xs.device)
    return xs


def denoise_step(xt: torch.Tensor, log_s: torch.Tensor, mask_id: int, generator) -> torch.Tensor:
    """Final denoise (``noise_removal``): every masked position drawn from ``s_y`` over real tokens. ``(B, L)``."""
    masked = xt == mask_id
    xs = xt.clone()
    if masked.any():
        xs[masked] = gumbel_argmax(_without_mask(log_s[masked], mask_id), generator).to(xs.device)
    return xs


@dataclass(frozen=True)
class SEDDSamplerOptions:
    """``eps``: the end of the time grid ``linspace(1, eps, S + 1)``."""

    eps: float = 1e-5


@torch.no_grad()
def sample_sedd(
    score_model,
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
    """Analytic SEDD sampling of ``n`` sequences of length ``L`` in ``steps`` steps (+ the final denoise).

    ``score_model`` has ``mask_id`` and ``log_score(xt, sigma) -> (B, L, V)``.  Returns ``(x (n, L), stats)``;
    ``stats['nfe']`` counts network calls (at most ``steps + 1`` per batch)."""
    opts = make_options(SEDDSamplerOptions, options, "sedd sampler options", **kwargs)
    schedule = schedule or make_schedule("loglinear")
    mask_id = score_model.mask_id
    sig = schedule.sigma(time_grid(steps, opts.eps))  # (S + 1,) float64, decreasing

    def one_batch(b):
        x = torch.full((b, L), mask_id, dtype=torch.long, device=device)
        nfe = 0
        for k in range(steps):
            if not (x == mask_id).any():
                break
            log_s = score_model.log_score(x, sig[k].expand(b)).to(x.device)
            x = tweedie_step(x, log_s, float(sig[k] - sig[k + 1]), mask_id, generator)
            nfe += 1
        if (x == mask_id).any():
            x = denoise_step(x, score_model.log_score(x, sig[-1].expand(b)).to(x.device), mask_id, generator)
            nfe += 1
        return x, {"nfe": nfe}

    return in_batches(n, batch_size, one_batch)


@register_sampler("sedd", SEDDSamplerOptions, roles={"dlm": ("sedd",)})
def sedd_sampler(
    models: dict, n: int, L: int, steps: int, generator, options: SEDDSamplerOptions, batch_size: int, device
):
    """Registry entry: ``models['dlm']`` is the score model (``SEDD.wrap``); its schedule is used if it has one."""
    score_model = models["dlm"]
    return sample_sedd(
        score_model,
        n,
        L,
        steps,
        generator,
        options,
        schedule=getattr(score_model, "schedule", None),
        batch_size=batch_size,
        device=device,
    )
