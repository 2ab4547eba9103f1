"""BD3-LM's semi-autoregressive sampler with a fixed total number of denoising steps (``notes/baselines.md`` §4.3).

Blocks of ``L'`` tokens are generated left to right; each block starts fully masked and is denoised by
MDLM ancestral updates (:func:`unie.samplers.ancestral.mdlm_step`, float64 Gumbel-max, caching of
unchanged rows, noise removal at the end) conditioned on the clean earlier blocks, which live in a KV
cache (exact, see :class:`unie.bd3lm.BD3Denoiser`).

**Step allocation: ``S`` is the total number of denoising steps for the whole sequence**, as for MDLM's
``S`` (the released sampler uses first-hitting, one token per call, and ignores ``S``; §4.3's caution).
With ``n_b = L / L'`` blocks the ``S`` steps are spread over "decode units" (:func:`allocate_steps`):

* ``S >= n_b``: every block is one unit and gets ``s_b = floor((b+1) S / n_b) - floor(b S / n_b)``
  steps (``floor(S/n_b)`` or ``ceil(S/n_b)``, evenly interleaved, ``sum_b s_b = S``), run on MDLM's grid
  ``linspace(1, 1e-5, s_b + 1)`` inside the block.  ``S = L`` with ``L' = 4`` gives 4 steps per block
  (about one token per step, like first hitting); ``S = L/4`` gives one step per block (all 4 tokens of a
  block drawn at once from their independent marginals).
* ``S < n_b`` (e.g. ``S = L/8`` with ``L' = 4``): a block model needs one network pass per block to see its
  clean prefix, which ``S`` passes cannot give.  To keep ``S`` honest the ``n_b`` blocks are split into
  ``S`` consecutive groups (sizes ``floor/ceil(n_b/S)``), and each group is decoded in ONE step
  (``t: 1 -> 1e-5``): every block of the group is drawn from ``p_theta(x^b | clean prefix before the
  group)``, i.e. a later block of the group does not see the earlier ones (the same "parallel decoding"
  error MDLM makes at ``S < L``).  By default the blocks of a group keep BD3's block-diagonal attention
  (each sees its own masks and the clean prefix, nothing in between); ``joint_blocks=True`` lets them
  attend to each other's masks as one larger noisy block (both are outside the training distribution,
  the default is the one whose context is a strict subset of the trained one).

Consequence (measured with the toy world's exact block conditionals, L = 16, L' = 4; see the tests): at
``S <= L/4`` BD3 draws *adjacent* tokens independently and is much worse than MDLM at the same ``S``
(excess NLL/token ~2.9 vs ~1.3 at ``S = L/4``), while with many steps per block it converges to exact
samples.  That is the honest price of a fixed step budget, not a bug; the ``S = L`` column is the
closest to the released first-hitting sampler (about one token per network evaluation).

So every sequence gets exactly ``S`` calls of the ancestral step and at most ``S`` network evaluations
plus rare noise-removal passes (``nfe`` counts the real passes; caching skips a pass when no token of
the current block changed).  The clean keys/values of a finished unit are committed to the cache inside
the first evaluation of the next unit (one fused pass), so there is no extra pass per block.  With
``L' = L`` there is one unit and the sampler is :func:`~unie.samplers.ancestral.sample_mdlm` bit for bit
(tested).  Not reproduced: the forced BOS at position 0, nucleus filtering, the entropy-based early stop.
"""

from __future__ import annotations

import torch

from ..registry import SAMPLERS
from ..schedule import Schedule, make_schedule
from .ancestral import CachedDenoiser, fill_remaining, in_batches, mdlm_step, time_grid


def allocate_steps(n_blocks: int, steps: int) -> list[tuple[int, int, int]]:
    """Decode units ``(first_block, n_blocks_in_unit, n_steps)`` covering the blocks left to right with
    ``sum n_steps = steps`` (see the module docstring)."""
    if n_blocks < 1 or steps < 1:
        raise ValueError(f"need n_blocks >= 1 and steps >= 1, got {n_blocks}, {steps}")
    if steps >= n_blocks:
        return [(b, 1, (b + 1) * steps // n_blocks - b * steps // n_blocks) for b in range(n_blocks)]
    bounds = [k * n_blocks // steps for k in range(steps + 1)]
    return [(bounds[k], bounds[k + 1] - bounds[k], 1) for k in range(steps)]


def unit_cache(denoiser, kv_cache: list, commit: torch.Tensor | None, joint: bool = False) -> CachedDenoiser:
    """MDLM's row cache for the current unit's noisy tokens: the first evaluation covers every row and commits
    ``commit`` (the previous unit, now clean) to the KV cache in the same pass; later ones re-evaluate only the
    rows whose unit changed, against the cache."""

    def evaluate(xb, rows):
        if rows is None:
            return denoiser.evaluate(kv_cache, commit, xb, joint=joint)
        return denoiser.evaluate(kv_cache, None, xb, rows=rows.to(denoiser.net.device), joint=joint)

    return CachedDenoiser(denoiser, evaluate)


@torch.no_grad()
def sample_bd3(
    denoiser,
    n: int,
    L: int,
    steps: int,
    generator: torch.Generator,
    schedule: Schedule | None = None,
    batch_size: int = 256,
    eps: float = 1e-5,
    joint_blocks: bool = False,
    device="cpu",
) -> tuple[torch.Tensor, dict]:
    """Block-by-block sampling of ``n`` sequences of length ``L`` in ``steps`` total denoising steps.

    ``denoiser`` is a :class:`unie.bd3lm.BD3Denoiser`. Returns ``(x (n, L) int64 cpu, stats)`` with
    ``nfe`` (network passes), ``rows_evaluated``, ``steps`` (ancestral steps taken per sequence, = ``steps``)
    and ``units`` (decode units per sequence)."""
    schedule = schedule or make_schedule("loglinear")
    mask_id, bs = denoiser.mask_id, denoiser.block_size
    if L % bs:
        raise ValueError(f"sequence length {L} is not a multiple of the block size {bs}")
    units = allocate_steps(L // bs, steps)

    def one_batch(b):
        x = torch.full((b, L), mask_id, dtype=torch.long, device=device)
        kv = denoiser.new_cache()
        committed, nfe, rows = 0, 0, 0  # tokens x[:, :committed] are in the KV cache
        for first, n_blocks, n_steps in units:
            lo, hi = first * bs, (first + n_blocks) * bs
            cache = unit_cache(denoiser, kv, x[:, committed:lo] if lo > committed else None, joint_blocks)
            xb = x[:, lo:hi]
            ts = time_grid(n_steps, eps)
            for k in range(n_steps):
                a_t, a_s = float(schedule.alpha(ts[k])), float(schedule.alpha(ts[k + 1]))
                xb = mdlm_step(xb, cache(xb), a_t, a_s, mask_id, generator)
            if (xb == mask_id).any():
                xb = fill_remaining(xb, cache(xb), mask_id, generator)
            x[:, lo:hi] = xb
            committed = lo
            nfe, rows = nfe + cache.nfe, rows + cache.rows_evaluated
        return x, {"nfe": nfe, "rows_evaluated": rows}

    x, stats = in_batches(n, batch_size, one_batch)
    return x, {**stats, "steps": sum(u[2] for u in units), "units": len(units)}


@SAMPLERS.register("bd3lm")
def bd3lm_sampler(models: dict, n: int, L: int, steps: int, generator, batch_size: int = 256, device="cpu",
                  eps: float = 1e-5, joint_blocks: bool = False, **_):
    """Registry entry: ``models['dlm']`` is a :class:`unie.bd3lm.BD3Denoiser` (block size from its checkpoint)."""
    return sample_bd3(models["dlm"], n, L, steps, generator, batch_size=batch_size, eps=eps,
                      joint_blocks=joint_blocks, device=device)
