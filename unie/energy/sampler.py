"""Algorithm 2: energy-based importance sampling for a masked diffusion model (Uni-EDLM inference).

At every step ``t`` inside the window ``t ∈ (1 - w, 1]``: one denoiser pass gives ``p_theta(x0|xt)``;
``K`` candidates ``x0^j ~ p_theta`` are drawn (float64 Gumbel-max; on a CUDA generator an exact inverse-CDF
draw at the masked positions only, :func:`propose`); one ``s = u·t`` per sequence; each
``xs^j`` is derived **from its own** ``x0^j`` (every masked position revealed with probability
``(alpha_s - alpha_t)/(1 - alpha_t)``); the energies ``(B, K)`` come from one batched call; the
candidate with the lowest energy (``argmin``, the paper), one resampled from ``softmax(-E/τ)`` (``resample``:
EDLM and the released code) or the proxy's favourite reveal (``proxy_rerank``; the rules are
:func:`~unie.energy.energies.select`, shared with Algorithm 3) drives the ancestral step ``q(x_{t-Δ} | xt, x0^{j*})``.  Outside the window it is the
plain MDLM step with caching.  ``K = 1`` or ``w = 0`` is the plain MDLM sampler, bit for bit.

The positions that a step reveals are drawn first: they do not depend on which ``x0`` is chosen, so
rows where the step reveals nothing skip the energy computation (their result is the same for any
choice) — an exact saving, not an approximation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.options import ConfigError, make_options
from ..core.gumbel import categorical_inverse_cdf, gumbel_argmax, uniform
from ..core.registry import ENERGIES, register_sampler
from ..core.sampling import in_batches, time_grid
from ..core.schedule import Schedule, make_schedule
from ..methods.mdlm import CachedDenoiser, fill_remaining, mdlm_step, reveal_mask, transition
from .energies import AR_CONTEXTS, SELECTIONS, select
from .energies import selection_energy


DRAWS = ("auto", "gumbel", "inverse_cdf")


def propose(logp: torch.Tensor, xt: torch.Tensor, K: int, mask_id: int, generator, draw: str = "auto") -> torch.Tensor:
    """``K`` candidates ``x0^j ~ p_theta(x0 | xt)`` ``(B, K, L)``; unmasked positions carry ``xt``'s tokens.

    ``draw``: ``gumbel``: float64 Gumbel-max over every ``(j, i, v)`` (the reference: ``K·L·V`` variates);
    ``inverse_cdf``: :func:`~unie.core.gumbel.categorical_inverse_cdf` at the masked positions only (one
    integer table per position shared by the ``K`` draws, ``K`` uniforms per position): the same law within
    ``2e-11`` in total variation per token (its doc), far fewer bytes; ``auto`` (default): ``inverse_cdf`` for
    a CUDA generator, ``gumbel`` otherwise, so every CPU run (the default profile, its tables) draws exactly
    the values it always drew (the two consume the generator differently)."""
    if draw == "auto":
        draw = "inverse_cdf" if generator is not None and generator.device.type == "cuda" else "gumbel"
    if draw not in DRAWS:
        raise ValueError(f"unknown draw {draw!r}; known: {', '.join(DRAWS)}")
    B, L, V = logp.shape
    if draw == "gumbel":
        x0 = gumbel_argmax(logp[:, None].expand(B, K, L, V), generator).to(xt.device)
        return torch.where((xt == mask_id)[:, None, :], x0, xt[:, None, :])
    masked = xt == mask_id
    x0 = xt[:, :, None].repeat(1, 1, K)  # (B, L, K)
    x0[masked] = categorical_inverse_cdf(logp[masked.to(logp.device)], K, generator).to(xt.device)
    return x0.transpose(1, 2).contiguous()


def in_window(t: float, w: float) -> bool:
    """The energy window ``t ∈ (1 - w, 1]``."""
    return t > 1.0 - w


@dataclass(frozen=True)
class EnergyOptions:
    """Algorithm 2's options: the ``energy`` (a key of ``ENERGIES``), ``K`` candidates, the window ``w``
    (``t ∈ (1 - w, 1]``), how the proxy reads a partial state (``ar_context``; default ``teacher_forced``
    for the proxy energies, none for ``ebm``), the ``selection`` rule (``argmin``, the paper; ``resample``
    from ``softmax(-E/temperature)``, EDLM and the released code; ``proxy_rerank``, the released DLLM code's rule) and ``eps``, the end of the time grid."""

    energy: str = "uni"
    K: int = 2
    w: float = 0.2
    ar_context: str | None = None
    selection: str = "argmin"
    temperature: float = 1.0
    eps: float = 1e-5

    def __post_init__(self):
        if self.energy not in ENERGIES:
            raise ConfigError(ENERGIES.unknown_message(self.energy))
        if ENERGIES[self.energy].scorer == "ebm":
            if self.ar_context is not None:
                raise ConfigError(f"energy {self.energy!r} is a learned energy network: it takes no ar_context")
        elif self.ar_context is None:
            object.__setattr__(self, "ar_context", "teacher_forced")
        elif self.ar_context not in AR_CONTEXTS:
            raise ConfigError(f"unknown ar_context {self.ar_context!r}; known: {', '.join(AR_CONTEXTS)}")
        if self.K < 1 or not 0.0 <= self.w <= 1.0:
            raise ConfigError(f"need K >= 1 and 0 <= w <= 1, got K={self.K}, w={self.w}")
        if self.selection not in SELECTIONS:
            raise ConfigError(f"unknown selection {self.selection!r}; known: {', '.join(SELECTIONS)}")
        if self.selection == "proxy_rerank" and ENERGIES[self.energy].scorer == "ebm":
            raise ConfigError(f"selection 'proxy_rerank' reads an AR proxy; energy {self.energy!r} has none")
        if self.temperature <= 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")

    @property
    def scorer_role(self) -> str:
        """The model role that scores candidates: ``proxy`` (an AR) or ``ebm`` (EDLM's energy network)."""
        return "ebm" if ENERGIES[self.energy].scorer == "ebm" else "proxy"


@torch.no_grad()
def sample_energy(
    denoiser,
    scorer,
    n: int,
    L: int,
    steps: int,
    generator: torch.Generator,
    options=None,
    *,
    schedule: Schedule | None = None,
    batch_size: int = 256,
    device="cpu",
    record_steps: bool = False,
    draw: str = "auto",
    **kwargs,
) -> tuple[torch.Tensor, dict]:
    """Algorithm 2 for ``n`` sequences of length ``L`` in ``steps`` steps. Returns ``(x (n, L), stats)``.

    ``denoiser``: a :class:`~unie.core.protocols.Denoiser`; ``scorer``: the AR proxy
    (:class:`~unie.core.protocols.Proxy`; for ``ar_context: exact`` the toy world's
    :class:`~unie.data.toy_world.OracleAR`), or EDLM's energy network for ``energy: ebm``; options:
    :class:`EnergyOptions` or its fields as keywords.  ``record_steps``: ``stats["reveal_step"]`` ``(n, L)`` int64,
    the step ``k`` (0-based) that revealed each position (``steps`` for the final noise removal); the samples
    are the same with or without it.  ``draw``: how the candidates are drawn (:func:`propose`; ``auto``: exact
    inverse-CDF on a CUDA generator, the float64 Gumbel-max of every CPU run otherwise)."""
    opts = make_options(EnergyOptions, options, "energy sampler options", **kwargs)
    energy, K, w, ar_context = opts.energy, opts.K, opts.w, opts.ar_context
    selection, temperature, eps = opts.selection, opts.temperature, opts.eps
    schedule = schedule or make_schedule("loglinear")
    mask_id = denoiser.mask_id
    ts = time_grid(steps, eps)

    revealed_at = []  # record_steps: (b, L) per batch
    draw_kw = {} if draw == "auto" else {"draw": draw}  # propose's own default when not forced

    def one_batch(b):
        stats = {"energy_rows": 0, "energy_calls": 0, "window_steps": 0}
        x = torch.full((b, L), mask_id, dtype=torch.long, device=device)  # x_{T_1}: fully masked
        step_of = torch.full((b, L), steps, dtype=torch.long, device=device)
        cache = CachedDenoiser(denoiser)
        for k in range(steps):  # Alg. 2, l.1: for t = T_1 > T_2 > ... > T_T
            if record_steps and k:
                step_of[(step_of == steps) & (x != mask_id)] = k - 1
            t = float(ts[k])
            a_t, a_next = float(schedule.alpha(ts[k])), float(schedule.alpha(ts[k + 1]))
            logp = cache(x)  # p_theta(x0 | xt): reused while x is unchanged (no time input)
            if K == 1 or not in_window(t, w):
                x = mdlm_step(x, logp, a_t, a_next, mask_id, generator)  # l.9 + l.11: plain MDLM step
                continue
            stats["window_steps"] += 1
            reveal = reveal_mask(x, a_t, a_next, mask_id, generator)  # where this step unmasks (any x0)
            x0 = propose(logp, x, K, mask_id, generator, **draw_kw)  # l.3: K candidates x0^j ~ p_theta(x0 | xt)
            s = uniform((b,), generator, x.device) * t  # l.3: one s < t per sequence
            xs = transition(x, x0, a_t, schedule.alpha(s), mask_id, generator)  # l.4: xs^j ~ q(xs | xt, x0^j)
            j = torch.zeros(b, dtype=torch.long, device=x.device)
            rows = reveal.any(-1)  # the choice only matters where the step reveals something
            if rows.any():
                sub = (x, x0, xs, logp) if rows.all() else (x[rows], x0[rows], xs[rows], logp[rows])  # no copy
                E = selection_energy(
                    selection, energy, *sub, scorer, ar_context, mask_id, check=False
                )  # l.5: E^j for every (x0^j, xs^j), one batched call
                j[rows] = select(E, selection, temperature, generator)  # l.6: j* = argmin_j E^j
                stats["energy_rows"] += int(rows.sum())
                stats["energy_calls"] += 1
            x0_sel = x0[torch.arange(b, device=x.device), j]  # l.7: x0~ = x0^{j*}
            x = torch.where(reveal, x0_sel, x)  # l.11: x_{t-Δ} ~ q(x_{t-Δ} | xt, x0~)
        if record_steps and steps:
            step_of[(step_of == steps) & (x != mask_id)] = steps - 1
            revealed_at.append(step_of.cpu())
        if (x == mask_id).any():
            x = fill_remaining(x, cache(x), mask_id, generator)
        return x, {"nfe": cache.nfe, "rows_evaluated": cache.rows_evaluated, **stats}

    x, stats = in_batches(n, batch_size, one_batch)
    if record_steps:
        stats["reveal_step"] = torch.cat(revealed_at)
    return x, stats


def needs(options: EnergyOptions) -> tuple[str, ...]:
    """Roles a run names: the denoiser, and the scorer: EDLM's energy network for ``energy: ebm``, else an AR
    proxy, which for ``ar_context: exact`` is the toy world's exact model (supplied by the pipeline)."""
    if options.scorer_role == "ebm":
        return ("dlm", "ebm")
    return ("dlm",) if options.ar_context == "exact" else ("dlm", "proxy")


@register_sampler(
    "energy", EnergyOptions, roles={"dlm": ("absorbing",), "proxy": ("ar",), "ebm": ("ebm",)}, needs=needs
)
def energy_sampler(
    models: dict, n: int, L: int, steps: int, generator, options: EnergyOptions, batch_size: int, device
):
    """Registry entry: ``models['dlm']`` (denoiser) and the scorer: ``models['proxy']`` (an AR, or the toy
    world's exact model for ``ar_context: exact``) or ``models['ebm']`` (``energy: ebm``)."""
    role = options.scorer_role
    if role not in models:
        raise ValueError(
            f"the energy sampler with energy {options.energy!r} needs models[{role!r}]"
            + (" (for ar_context 'exact': the toy world's OracleAR)" if role == "proxy" else "")
        )
    return sample_energy(
        models["dlm"], models[role], n, L, steps, generator, options, batch_size=batch_size, device=device
    )
