"""Duo: uniform-state diffusion (UDLM) trained through its Gaussian relaxation (Sahoo et al. 2025).

``docs/baselines.md``.  Distillation (discrete consistency distillation) is optional and
is left out; so are the Ψ-samplers and Duo++'s polynomial table / top-k inputs.

**Vocabulary.**  A uniform-state process has no mask: its states are the tokenizer's *real* tokens,
every id except :func:`unie.data.tokenizer.blocked_ids` (the mask and an input-only ``<bos>``).  The
method works on that sub-vocabulary of size ``V`` (toy world: 198 words + ``<eos>`` = 199) through the
index maps ``sub_to_tok (V,)`` and ``tok_to_sub (V_full,)`` (-1 on blocked ids).  The shared network
still embeds and predicts the full tokenizer vocabulary: its inputs are mapped with ``sub_to_tok`` and
its logits restricted to the ``V`` state columns.

**Upstream's vocabulary** (``pad_state``).  The released Duo has no mask either, but its tokenizer is GPT-2
plus ``[PAD]`` (``dataloader.get_tokenizer`` adds it) and its network is ``len(tokenizer)`` = 50,258 wide
(``trainer_base.py``: ``vocab_size = len(tokenizer)``): ``[PAD]`` (id 50,257) is a state like any other, the
log-softmax runs over all 50,258 outputs (``DUO_BASE._process_model_output``) and the uniform noise and prior
draw from all 50,258 (``UniformState.q_xt``, ``prior_sample``), so ``V = 50,258`` in every formula below.  Our
GPT-2 tokenizer puts its mask at that id: with ``pad_state`` the mask id is a state of the process, playing
upstream's ``[PAD]`` (the same embedding row and output column), and ``V`` counts it.  A released Duo is read
with it (:func:`unie.methods.released_methods.load_released`); a ``[PAD]`` a sample keeps (never in the data: after the
last step of a trained model its probability is ~0) is written ``[PAD]`` in the Gen PPL text, as upstream decodes
it (:data:`unie.pipeline.sample.PAD_TEXT`).

**Forward process.**  ``q(xt | x0) = Cat(alpha_t onehot(x0) + (1 - alpha_t)/V)``: each token is
redrawn uniformly from the ``V`` real tokens w.p. ``1 - alpha_t`` (possibly drawing ``x0`` again);
log-linear ``alpha_t = 1 - (1 - eps) t``.  The network is time-conditioned on
``sigma = -log alpha_t`` (``ModelConfig.cond_dim > 0``, adaLN) and outputs ``x_theta (B, L, V)``
("mean" parameterisation).

**NELBO.**  Per token, with ``xbar_theta = V alpha_t x_theta + (1 - alpha_t)`` and
``c = alpha'_t / (V alpha_t)`` (< 0)::

    loss_i = c (term1 - term2)
    term1  = V (1/xbar_t - 1/xbar_theta[xt]),   xbar_t = (1 - alpha_t) + V alpha_t [x0 = xt]
    kappa  = (1 - alpha_t) / (V alpha_t + 1 - alpha_t)
    term2  = -w (sum_v log xbar_theta[v] - V log xbar_theta[xt])
             - (V alpha_t / (1 - alpha_t)) (log xbar_theta[x0] - log xbar_theta[xt]) [x0 != xt] + offset
    w      = kappa if x0 = xt else 1
    offset = ((V - 1) kappa [x0 = xt] - kappa^-1 [x0 != xt]) log kappa

This equals the continuous-time (CTMC) bound ``(-alpha'/(V alpha)) sum_{y != xt} r_y h(rtheta_y / r_y)``
with ``h(u) = u - 1 - log u >= 0``, ``r_y = xbar_t[y]/xbar_t[xt]`` and ``rtheta_y = xbar_theta[y]/xbar_theta[xt]``
(the reverse-rate ratios), so every term is >= 0.  ``t ~ U[t_eps, 1]`` (antithetic); the prior term
``KL(q_1 || uniform)`` (``alpha_1 = eps``: ~1e-4 nats/token at V = 199) and the reconstruction term
below ``t_eps`` are dropped, as in the reference.  Its minimiser is *not* the posterior of ``x0_i``
given all of ``xt`` but the leave-one-out posterior ``pi(x0_i | xt_{-i})`` (the rate ratio is a ratio
of expectations over ``x0_i``); with it the bound is tight (tested on an enumerable HMM).

**Gaussian-to-discrete duality.**  ``w_t = at onehot(x0) + st eps`` in ``R^V`` with
``at = sqrt(sigmoid(-gamma))``, ``st = sqrt(sigmoid(gamma))``; ``argmax(w_t)`` is a uniform-state sample
with ``alpha_USDM(gamma) = (V P(gamma) - 1)/(V - 1)``, ``P(gamma) = int phi(z - e^{-gamma/2}) Phi(z)^{V-1} dz``
(the probability that the clean coordinate wins).  ``P`` and ``dP/dgamma`` are computed by trapezoid
quadrature for *our* ``V`` on a uniform grid of ``n_gamma`` values of ``gamma`` in
``[gamma_min, gamma_max]`` (cached per ``V`` and range) and interpolated linearly; the derivative is
the exact integral ``dP/dgamma = -(mu/2) int (z - mu) phi(z - mu) Phi(z)^{V-1} dz``, ``mu = e^{-gamma/2}``
(the reference uses a finite difference of the table).  ``gamma_t = gamma_min + t (gamma_max - gamma_min)``.

**Curriculum.**  For the first ``curriculum_steps`` optimisation steps: draw ``w_t``, feed the
soft input ``softmax(w_t / tau) @ E`` (``E`` = the network's embedding rows of the real tokens) via
``inputs_embeds``, condition on ``sigma = -log alpha_USDM(gamma_t)``, and apply the same UDLM loss at
``xt = argmax(w_t)`` with ``alpha = alpha_USDM(gamma_t)`` and ``alpha' = dalpha_USDM/dgamma (gamma_max - gamma_min)``.
Afterwards: plain UDLM.  ``nll`` always uses the plain UDLM bound (the reference's "true NLL").

*Which step?*  The training loop (:func:`unie.train.train`) calls ``loss(net, x0, generator)`` once per
optimisation step, so the method counts its ``loss`` calls (``self.calls``).  Calling ``loss`` for
anything else (a dev loss) advances the count; a resumed run restarts the count at 0 unless the loop
calls :meth:`Duo.set_step` with the true step before each ``loss`` (the loop does, so a resumed run
continues the curriculum where it stopped).

**Settings at our scale.**
* ``gamma_min``/``gamma_max``: the reference's (-3.55, -1.85) are tuned to its ``V = 50,258`` (GPT-2 +
  ``[PAD]``), where they cover ``alpha_USDM`` in [0.049, 0.945] (most of the noise range).  At ``V = 199`` the
  same gammas cover only [0.42, 0.998]: the curriculum would never see high noise.  The default (``None``)
  therefore *matches the reference's alpha range*: each end is the ``gamma`` at which ``alpha_USDM`` for
  our ``V`` equals the reference's ``alpha_USDM`` at ``V = 50,258`` (toy world, V = 199: (-3.00, -0.044);
  a released Duo, ``pad_state``: exactly (-3.55, -1.85)).  Explicit values are used as given.
* ``tau = 1e-3`` (the reference) is kept: ``softmax(w_t/tau)`` is then nearly one-hot, as in the
  reference; larger values give softer inputs.
* ``curriculum_steps`` defaults to 0 (plain UDLM); the reference uses half of training.

**Sampler.** Duo's ancestral sampler for uniform-state diffusion (``docs/baselines.md``).

Start from uniform random real tokens (the prior of the uniform-state process); time grid
``t_k = linspace(1, eps, S + 1)``.  One step ``t -> s`` (``alpha_s > alpha_t``, ``alpha_ts = alpha_t/alpha_s``)
draws every position from, in float64,

    q(xs | xt, x_theta) ∝ alpha_t V x_theta ⊙ xt + (alpha_ts - alpha_t) xt + (alpha_s - alpha_t) x_theta
                          + (1 - alpha_ts)(1 - alpha_s)/V,
    normaliser            alpha_t V x_theta[xt] + (1 - alpha_t),

i.e. ``q(xt | xs) q(xs | x_theta) / q(xt | x_theta)`` with ``x_theta`` as a soft ``x0``.  Any token can
change at any step (no carry-over), and there is no caching: the denoiser is time-conditioned, so
every step is one network evaluation.  Final noise removal at ``t = eps``: ``ancestral`` (default,
the same posterior with ``alpha_s = 1``) or ``greedy`` (``argmax x_theta``).  Every draw is float64
Gumbel-max (:func:`unie.core.gumbel.gumbel_argmax`); the uniform start is ``floor(V U)`` with float64 ``U``
(:func:`unie.methods.duo.uniform_tokens`).  Distillation, nucleus filtering and the Ψ-samplers are
left out.

The denoiser is a :class:`unie.methods.duo.DuoDenoiser` (or anything with ``x_theta(xt, t) -> (B, L, V)``
probabilities over the states, ``V``, ``sub_to_tok`` and ``schedule``); samples are returned as
tokenizer ids (never an input-only ``<bos>``, nor the mask unless it is upstream's ``[PAD]`` state).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.gumbel import gumbel_argmax, uniform
from ..core.options import ConfigError, make_options
from ..core.precision import widen
from ..core.registry import METHODS, register_sampler
from ..core.sampling import in_batches, time_grid
from ..core.schedule import Schedule, antithetic_t, make_schedule
from ..data.tokenizer import blocked_ids

# The reference's curriculum range (scripts/train_owt_duo.sh) and the vocabulary it was tuned for: upstream's
# V = len(tokenizer), GPT-2's 50,257 tokens + [PAD] (module doc, "Upstream's vocabulary").
REF_GAMMA_MIN, REF_GAMMA_MAX, REF_VOCAB = -3.55, -1.85, 50258


# ---------------------------------------------------------------------- sub-vocabulary
def sub_vocab(tokenizer_info: dict, device=None, pad_state: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Index maps between the states of the process and the tokenizer's ids.

    Returns ``sub_to_tok (V,)`` (sorted tokenizer ids of the states: the real tokens, and with ``pad_state`` the
    mask id too, upstream's ``[PAD]``) and ``tok_to_sub (V_full,)`` (``-1`` on blocked ids), both int64."""
    full = tokenizer_info["vocab_size"]
    blocked = set(blocked_ids(tokenizer_info)) - ({tokenizer_info["mask_id"]} if pad_state else set())
    sub_to_tok = torch.tensor([i for i in range(full) if i not in blocked], dtype=torch.long, device=device)
    tok_to_sub = torch.full((full,), -1, dtype=torch.long, device=device)
    tok_to_sub[sub_to_tok] = torch.arange(len(sub_to_tok), device=device)
    return sub_to_tok, tok_to_sub


def to_sub(x: torch.Tensor, tok_to_sub: torch.Tensor) -> torch.Tensor:
    """Tokenizer ids ``(B, L)`` -> sub-vocabulary ids; raises on a blocked id (mask, input-only ``<bos>``)."""
    s = tok_to_sub.to(x.device)[x]
    if (s < 0).any():
        bad = sorted(set(x[s < 0].tolist()))
        raise ValueError(f"Duo: token ids {bad} (mask/<bos>) are not states of the uniform-state process")
    return s


def uniform_tokens(shape, V: int, generator, device=None) -> torch.Tensor:
    """Uniform draws from ``{0..V-1}`` as ``floor(V U)`` with float64 ``U`` ``-> shape`` int64.

    The same law as Gumbel-max over constant logits (no tail to truncate), at O(1) instead of O(V) per
    draw (a ``(B, L, V)`` noise tensor would be 50k times larger at GPT-2's V)."""
    u = uniform(shape, generator, device)
    return (u * V).floor().long().clamp_(max=V - 1).to(device)


# ---------------------------------------------------------------------- UDLM forward process and NELBO
def udlm_q_xt(x0: torch.Tensor, alpha: torch.Tensor, V: int, generator) -> torch.Tensor:
    """``xt ~ q(xt | x0)``: redraw each token uniformly from ``V`` w.p. ``1 - alpha``; ``alpha (B,)``. ``(B, L)``."""
    u = uniform(x0.shape, generator, x0.device)
    noise = uniform_tokens(x0.shape, V, generator, x0.device)
    return torch.where(u < (1.0 - alpha.double().to(x0.device))[:, None], noise, x0)


def udlm_nelbo_per_token(
    log_x_theta: torch.Tensor, xt: torch.Tensor, x0: torch.Tensor, alpha: torch.Tensor, dalpha: torch.Tensor
) -> torch.Tensor:
    """Continuous-time UDLM NELBO integrand per token ``(B, L)`` float64 (the formula in the module doc).

    Args:
        log_x_theta: ``(B, L, V)`` log-probabilities of the denoiser over the states.
        xt, x0: ``(B, L)`` sub-vocabulary ids.
        alpha, dalpha: ``(B,)`` ``alpha_t`` and ``d alpha_t / dt`` (< 0).
    ``log xbar_theta`` is formed in ``log_x_theta``'s dtype; every per-token quantity is float64."""
    V = log_x_theta.shape[-1]
    a = alpha.to(log_x_theta.device, torch.float64)[:, None]  # (B, 1)
    da = dalpha.to(log_x_theta.device, torch.float64)[:, None]
    a_in = a.to(log_x_theta.dtype)[..., None]
    # log xbar_theta = log(V alpha x_theta + 1 - alpha), without leaving log space
    log_xbar = torch.logaddexp(torch.log(V * a_in) + log_x_theta, torch.log1p(-a_in))  # (B, L, V)
    lx_xt = log_xbar.gather(-1, xt[..., None]).squeeze(-1).double()
    lx_x0 = log_xbar.gather(-1, x0[..., None]).squeeze(-1).double()
    sum_lx = log_xbar.sum(-1, dtype=torch.float64)
    same = x0 == xt
    xbar_t = (1.0 - a) + V * a * same
    term1 = V * (1.0 / xbar_t - torch.exp(-lx_xt))
    kappa = (1.0 - a) / (V * a + 1.0 - a)
    w = torch.where(same, kappa, torch.ones_like(kappa))
    offset = torch.where(same, (V - 1) * kappa, -1.0 / kappa) * torch.log(kappa)
    big = V * a / (1.0 - a)
    term2 = -w * (sum_lx - V * lx_xt) - torch.where(same, torch.zeros_like(lx_x0), big * (lx_x0 - lx_xt)) + offset
    c = da / (V * a)
    return c * (term1 - term2)


# ---------------------------------------------------------------------- Gaussian-to-discrete duality
def duality_integrals(gammas: torch.Tensor, V: int, n_z: int = 8001, chunk: int = 256):
    """``P(gamma)`` and ``dP/dgamma`` ``(G,)`` float64 by trapezoid quadrature over ``z`` (module doc).

    ``P(gamma) = int phi(z - mu) Phi(z)^{V-1} dz``, ``mu = e^{-gamma/2}``;
    ``dP/dgamma = -(mu/2) int (z - mu) phi(z - mu) Phi(z)^{V-1} dz``.  The ``z`` grid spans
    ``[min mu - 10, max mu + 10]`` (the Gaussian factor is < 1e-21 outside)."""
    g = torch.as_tensor(gammas, dtype=torch.float64).reshape(-1)
    mu = torch.exp(-g / 2)
    z = torch.linspace(mu.min().item() - 10.0, mu.max().item() + 10.0, n_z, dtype=torch.float64)
    wts = torch.full_like(z, float(z[1] - z[0]))
    wts[0] = wts[-1] = wts[0] / 2
    f = torch.exp((V - 1) * torch.special.log_ndtr(z)) * wts  # Phi(z)^{V-1} times the trapezoid weights
    P, dP = torch.empty_like(g), torch.empty_like(g)
    for s in range(0, len(g), chunk):
        d = z[None, :] - mu[s : s + chunk, None]
        phi = torch.exp(-0.5 * d * d) / math.sqrt(2 * math.pi)
        P[s : s + chunk] = phi @ f
        dP[s : s + chunk] = -(mu[s : s + chunk] / 2) * ((d * phi) @ f)
    return P, dP


def alpha_from_p(P: torch.Tensor, V: int) -> torch.Tensor:
    """``alpha_USDM = (V P - 1)/(V - 1)``: the discrete ``alpha`` whose marginal puts ``P`` on the clean token
    (clamped to [0, 1] against quadrature rounding where ``P`` saturates at 1)."""
    return ((V * P - 1.0) / (V - 1.0)).clamp(0.0, 1.0)


class DualityTable:
    """``P`` and ``dP/dgamma`` on a uniform grid of ``n`` gammas in ``[gamma_min, gamma_max]``, for one ``V``."""

    def __init__(self, V: int, gamma_min: float, gamma_max: float, n: int = 2001):
        if not gamma_min < gamma_max:
            raise ConfigError(f"Duo: gamma_min={gamma_min} must be below gamma_max={gamma_max}")
        self.V, self.gamma_min, self.gamma_max = V, float(gamma_min), float(gamma_max)
        self.gammas = torch.linspace(self.gamma_min, self.gamma_max, n, dtype=torch.float64)
        self.P, self.dP = duality_integrals(self.gammas, V)

    def _interp(self, table: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
        g = gamma.double().cpu()
        h = (self.gamma_max - self.gamma_min) / (len(self.gammas) - 1)
        pos = ((g - self.gamma_min) / h).clamp(0, len(self.gammas) - 1)
        i = pos.floor().long().clamp(max=len(self.gammas) - 2)
        frac = pos - i
        return ((1 - frac) * table[i] + frac * table[i + 1]).to(gamma.device)

    def prob(self, gamma: torch.Tensor) -> torch.Tensor:
        """``P(gamma)`` float64, same shape as ``gamma`` (clamped to the table's range)."""
        return self._interp(self.P, gamma)

    def alpha(self, gamma: torch.Tensor) -> torch.Tensor:
        """``alpha_USDM(gamma)`` float64."""
        return alpha_from_p(self._interp(self.P, gamma), self.V)

    def dalpha_dgamma(self, gamma: torch.Tensor) -> torch.Tensor:
        """``d alpha_USDM / d gamma = V/(V-1) dP/dgamma`` (< 0) float64."""
        return self.V / (self.V - 1.0) * self._interp(self.dP, gamma)


@functools.lru_cache(maxsize=16)
def duality_table(V: int, gamma_min: float, gamma_max: float, n: int = 2001) -> DualityTable:
    """The cached table for ``(V, gamma range, n)``."""
    return DualityTable(V, gamma_min, gamma_max, n)


def gamma_for_alpha(alpha: float, V: int, lo: float = -12.0, hi: float = 12.0, iters: int = 60) -> float:
    """The ``gamma`` with ``alpha_USDM(gamma) = alpha`` for vocabulary ``V`` (bisection; decreasing in gamma)."""
    for _ in range(iters):
        mid = (lo + hi) / 2
        a = alpha_from_p(duality_integrals(torch.tensor([mid]), V)[0], V).item()
        lo, hi = (mid, hi) if a > alpha else (lo, mid)
    return (lo + hi) / 2


@functools.lru_cache(maxsize=16)
def matched_gamma_range(V: int) -> tuple[float, float]:
    """``(gamma_min, gamma_max)`` for ``V`` covering the reference's ``alpha_USDM`` range at GPT-2's ``V``."""
    if V == REF_VOCAB:
        return REF_GAMMA_MIN, REF_GAMMA_MAX
    ref = alpha_from_p(duality_integrals(torch.tensor([REF_GAMMA_MIN, REF_GAMMA_MAX]), REF_VOCAB)[0], REF_VOCAB)
    return gamma_for_alpha(ref[0].item(), V), gamma_for_alpha(ref[1].item(), V)


def gaussian_latent(x0: torch.Tensor, gamma: torch.Tensor, V: int, generator) -> torch.Tensor:
    """``w_t = at onehot(x0) + st eps`` ``(B, L, V)`` float64, ``at = sqrt(sigmoid(-gamma))``, ``st = sqrt(sigmoid(gamma))``."""
    g = gamma.double().to(x0.device)[:, None, None]
    gdev = generator.device if generator is not None else x0.device
    eps = torch.randn((*x0.shape, V), generator=generator, dtype=torch.float64, device=gdev).to(x0.device)
    w = torch.sqrt(torch.sigmoid(g)) * eps
    return w.scatter_add_(-1, x0[..., None], torch.sqrt(torch.sigmoid(-g)).expand(*x0.shape, 1).contiguous())


# ---------------------------------------------------------------------- network as a denoiser
def restricted_logits(net, sub_to_tok: torch.Tensor, sigma: torch.Tensor, tokens=None, inputs_embeds=None):
    """The network's logits over the states ``(B, L, V)``, float32 at least; ``tokens`` are tokenizer ids."""
    logits = widen(net(tokens, sigma=sigma.float(), inputs_embeds=inputs_embeds))  # float32 before log_softmax
    return logits.index_select(-1, sub_to_tok.to(logits.device))


class DuoDenoiser:
    """A trained Duo network for samplers: ``x_theta(xt, t) -> (B, L, V)`` float64 probabilities.

    ``xt`` are sub-vocabulary ids ``(B, L)``; ``t`` a float or ``(B,)`` times (conditioning on
    ``sigma = -log alpha_t``).  ``sub_to_tok``/``tok_to_sub`` map to and from tokenizer ids."""

    def __init__(
        self, net, sub_to_tok: torch.Tensor, tok_to_sub: torch.Tensor, schedule: Schedule, pad_id: int | None = None
    ):
        self.net = net
        self.sub_to_tok, self.tok_to_sub = sub_to_tok, tok_to_sub
        self.V = len(sub_to_tok)
        # the tokenizer id that plays upstream's [PAD] (pad_state: the mask id), a state its samples may hold
        self.pad_id = pad_id
        self.extra_states = () if pad_id is None else (int(pad_id),)
        self.vocab_size = net.cfg.vocab_size
        self.schedule = schedule

    @torch.no_grad()
    def logp_x0(self, xt: torch.Tensor, t) -> torch.Tensor:
        """``log x_theta(xt, t)`` ``(B, L, V)`` float32."""
        dev = self.net.device
        t = torch.as_tensor(t, dtype=torch.float64).to(dev).expand(xt.shape[0])
        sigma = -torch.log(self.schedule.alpha(t))
        tokens = self.sub_to_tok.to(dev)[xt.to(dev)]
        return F.log_softmax(restricted_logits(self.net, self.sub_to_tok, sigma, tokens=tokens), dim=-1)

    def x_theta(self, xt: torch.Tensor, t) -> torch.Tensor:
        return self.logp_x0(xt, t).double().exp()


# ---------------------------------------------------------------------- the method
@dataclass(frozen=True)
class DuoOptions:
    """Duo's training options: ``curriculum_steps`` (0 = plain UDLM), ``tau`` (soft-input temperature),
    ``gamma_min``/``gamma_max`` (None = matched to the reference's alpha range, see the module doc),
    ``n_gamma`` (duality table points), ``schedule``/``eps`` (noise schedule), ``t_eps`` (time floor),
    ``pad_state`` (upstream's vocabulary: the mask id is a state, upstream's ``[PAD]``; module doc)."""

    curriculum_steps: int = 0
    tau: float = 1e-3
    gamma_min: float | None = None
    gamma_max: float | None = None
    n_gamma: int = 2001
    schedule: str = "loglinear"
    eps: float = 1e-3
    t_eps: float = 1e-3
    pad_state: bool = False

    def __post_init__(self):
        if self.curriculum_steps < 0 or self.tau <= 0 or self.n_gamma < 2:
            raise ConfigError(
                f"Duo: need curriculum_steps >= 0, tau > 0, n_gamma >= 2 "
                f"(got {self.curriculum_steps}, {self.tau}, {self.n_gamma})"
            )


@METHODS.register("duo")
class Duo:
    """Duo's training loss (curriculum, then UDLM) and UDLM likelihood bound (options: :class:`DuoOptions`)."""

    Options = DuoOptions
    causal = False
    time_conditioned = True
    has_likelihood = True
    stochastic_nll = True

    def __init__(self, tokenizer_info: dict, options: DuoOptions | dict | None = None, **kwargs):
        self.options = o = make_options(DuoOptions, options, "duo options", **kwargs)
        self.sub_to_tok, self.tok_to_sub = sub_vocab(tokenizer_info, pad_state=o.pad_state)
        self.pad_id = tokenizer_info["mask_id"] if o.pad_state else None
        self.V = len(self.sub_to_tok)
        self.schedule = make_schedule(o.schedule, o.eps)
        self.t_eps = o.t_eps
        self.curriculum_steps = int(o.curriculum_steps)
        self.tau = float(o.tau)
        gamma_min, gamma_max, n_gamma = o.gamma_min, o.gamma_max, o.n_gamma
        if gamma_min is None or gamma_max is None:
            g_lo, g_hi = matched_gamma_range(self.V)
            gamma_min = g_lo if gamma_min is None else gamma_min
            gamma_max = g_hi if gamma_max is None else gamma_max
        self.gamma_min, self.gamma_max, self.n_gamma = float(gamma_min), float(gamma_max), int(n_gamma)
        if not self.gamma_min < self.gamma_max:
            raise ConfigError(f"Duo: gamma_min={gamma_min} must be below gamma_max={gamma_max}")
        self.calls = 0  # loss() calls so far = the optimisation step (see the module doc)

    @staticmethod
    def kind(options: DuoOptions) -> str:
        return "duo"

    def set_step(self, step: int) -> None:
        """Set the optimisation step (for a training loop that resumes; otherwise ``loss`` counts calls)."""
        self.calls = int(step)

    def in_curriculum(self) -> bool:
        return self.calls < self.curriculum_steps

    def table(self) -> DualityTable:
        return duality_table(self.V, self.gamma_min, self.gamma_max, self.n_gamma)

    # -- plain UDLM
    def udlm_nelbo(self, net, x0_sub: torch.Tensor, t: torch.Tensor, generator) -> torch.Tensor:
        """Per-token NELBO ``(B, L)`` float64 at times ``t (B,)`` (one ``xt`` draw)."""
        alpha = self.schedule.alpha(t.double())
        xt = udlm_q_xt(x0_sub, alpha, self.V, generator)
        sigma = -torch.log(alpha)
        logits = restricted_logits(
            net, self.sub_to_tok, sigma.to(x0_sub.device), tokens=self.sub_to_tok.to(x0_sub.device)[xt]
        )
        return udlm_nelbo_per_token(F.log_softmax(logits, -1), xt, x0_sub, alpha, self.schedule.dalpha(t.double()))

    # -- curriculum (Gaussian relaxation)
    def curriculum_nelbo(self, net, x0_sub: torch.Tensor, t: torch.Tensor, generator) -> torch.Tensor:
        """Per-token curriculum loss ``(B, L)`` float64: soft inputs ``softmax(w_t/tau) @ E``, UDLM loss at
        ``xt = argmax(w_t)`` with ``alpha_USDM(gamma_t)`` and its time derivative (the curriculum in the module doc)."""
        table = self.table()
        gamma = self.gamma_min + t.double() * (self.gamma_max - self.gamma_min)
        alpha = table.alpha(gamma)
        dalpha = table.dalpha_dgamma(gamma) * (self.gamma_max - self.gamma_min)
        w = gaussian_latent(x0_sub, gamma, self.V, generator)  # (B, L, V) float64
        xt = w.argmax(-1)
        E = net.embed.weight.index_select(0, self.sub_to_tok.to(net.embed.weight.device))  # (V, d)
        soft = torch.softmax((w / self.tau).to(E.dtype), dim=-1) @ E  # (B, L, d)
        logits = restricted_logits(net, self.sub_to_tok, -torch.log(alpha), inputs_embeds=soft)
        return udlm_nelbo_per_token(F.log_softmax(logits, -1), xt, x0_sub, alpha, dalpha)

    def loss(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """Mean per-token loss (antithetic t); the curriculum while ``calls < curriculum_steps``.  Counts the call."""
        x0_sub = to_sub(x0, self.tok_to_sub)
        t = antithetic_t(x0.shape[0], generator, self.t_eps, x0.device)
        per_tok = (self.curriculum_nelbo if self.in_curriculum() else self.udlm_nelbo)(net, x0_sub, t, generator)
        self.calls += 1
        return (per_tok.sum() / x0.numel()).float()

    @torch.no_grad()
    def nll(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """Per-sequence UDLM NELBO ``(B,)`` float64 in nats (antithetic t; never the curriculum)."""
        t = antithetic_t(x0.shape[0], generator, self.t_eps, x0.device)
        return self.udlm_nelbo(net, to_sub(x0, self.tok_to_sub), t, generator).sum(-1)

    def wrap(self, net) -> DuoDenoiser:
        return DuoDenoiser(net, self.sub_to_tok, self.tok_to_sub, self.schedule, pad_id=self.pad_id)


# -------------------------------------------------------------------------------------- sampler
NOISE_REMOVAL = ("ancestral", "greedy")


def duo_posterior(x_theta: torch.Tensor, xt: torch.Tensor, alpha_t: float, alpha_s: float) -> torch.Tensor:
    """``q(xs | xt, x_theta)`` ``(B, L, V)`` float64 (rows sum to 1) for ``x_theta (B, L, V)`` and ``xt (B, L)``."""
    p = x_theta.double()
    V = p.shape[-1]
    a_t, a_s = float(alpha_t), float(alpha_s)
    a_ts = a_t / a_s
    q = (a_s - a_t) * p + (1.0 - a_ts) * (1.0 - a_s) / V
    p_xt = p.gather(-1, xt[..., None])  # (B, L, 1)
    q = q.scatter_add(-1, xt[..., None], a_t * V * p_xt + (a_ts - a_t))
    return q / (a_t * V * p_xt + (1.0 - a_t))


def duo_step(x_theta: torch.Tensor, xt: torch.Tensor, alpha_t: float, alpha_s: float, generator) -> torch.Tensor:
    """One ancestral step: ``xs ~ q(xs | xt, x_theta)`` at every position (float64 Gumbel-max). ``(B, L)``."""
    return gumbel_argmax(torch.log(duo_posterior(x_theta, xt, alpha_t, alpha_s)), generator).to(xt.device)


@dataclass(frozen=True)
class DuoSamplerOptions:
    """``eps``: end of the time grid; ``noise_removal``: the last step, ``ancestral`` or ``greedy``."""

    eps: float = 1e-5
    noise_removal: str = "ancestral"

    def __post_init__(self):
        if self.noise_removal not in NOISE_REMOVAL:
            raise ConfigError(f"noise_removal {self.noise_removal!r}: expected one of {NOISE_REMOVAL}")


@torch.no_grad()
def sample_duo(
    denoiser,
    n: int,
    L: int,
    steps: int,
    generator: torch.Generator,
    options=None,
    *,
    batch_size: int = 256,
    device="cpu",
    **kwargs,
) -> tuple[torch.Tensor, dict]:
    """Sample ``n`` sequences of length ``L`` in ``steps`` steps. Returns ``(x (n, L) tokenizer ids, stats)``.

    Options: :class:`DuoSamplerOptions`.  ``stats["nfe"]``: network evaluations summed over batches
    (``steps + 1`` per batch)."""
    opts = make_options(DuoSamplerOptions, options, "duo sampler options", **kwargs)
    noise_removal = opts.noise_removal
    schedule = getattr(denoiser, "schedule", None) or make_schedule("loglinear")
    V = denoiser.V
    ts = time_grid(steps, opts.eps)

    def one_batch(b):
        x = uniform_tokens((b, L), V, generator, device)
        for k in range(steps):
            a_t, a_s = float(schedule.alpha(ts[k])), float(schedule.alpha(ts[k + 1]))
            p = denoiser.x_theta(x, ts[k].expand(b)).to(x.device)
            x = duo_step(p, x, a_t, a_s, generator)
        p = denoiser.x_theta(x, ts[-1].expand(b)).to(x.device)
        if noise_removal == "ancestral":
            x = duo_step(p, x, float(schedule.alpha(ts[-1])), 1.0, generator)
        else:
            x = p.argmax(-1)
        return denoiser.sub_to_tok.to(x.device)[x], {"nfe": steps + 1}

    return in_batches(n, batch_size, one_batch)


@register_sampler("duo", DuoSamplerOptions, roles={"dlm": ("duo",)})
def duo_sampler(
    models: dict, n: int, L: int, steps: int, generator, options: DuoSamplerOptions, batch_size: int, device
):
    """Registry entry: ``models['dlm']`` is a Duo denoiser (``Duo.wrap``)."""
    return sample_duo(models["dlm"], n, L, steps, generator, options, batch_size=batch_size, device=device)
