"""BD3-LM: block discrete denoising diffusion (Arriola et al. 2025; ``docs/baselines.md``).

Factorisation.  Split ``x`` ``(B, L)`` into ``L / L'`` blocks of ``L' = block_size`` tokens:
``log p(x) = sum_b log p(x^b | x^{<b})``, and each conditional is an MDLM masked diffusion over block
``b`` given the clean earlier blocks.

Training.  The network reads the two-stream input ``[xt ; x0]`` ``(B, 2L)`` with rotary
positions ``0..L-1`` for both halves and the 2L x 2L mask of :func:`block_diff_mask` (noisy block ``b``
sees its own noisy block and the clean blocks ``< b``; clean blocks are block-causal).  Only the
first ``L`` outputs (the noisy stream) are read: ``log p_theta(x0^b | xt^b, x0^{<b})`` under SUBS.
One ``t`` per block, antithetic over batch x blocks (laid out ``(B, n_blocks)`` as in the released
``_sample_t``, so every block index sees the whole range of ``t`` across a batch).  Per sequence,

    NELBO(x0) = sum_b w(t_b) * sum_{i in block b, xt_i = m} -log p_theta(x0_i | xt^b, x0^{<b}),

``w(t) = -alpha'_t / (1 - alpha_t)``.  The loss is its mean per token over the batch; ``nll`` returns
the per-sequence sum ``(B,)`` with ``t ~ U[t_eps, 1]`` (unclipped), exactly like :class:`~unie.methods.mdlm.MDLM`.

Choices (documented deviations from the released code):

* **Schedule.** The released code masks with probability ``t`` (linear ``alpha_t = 1 - t``).  We use
  OUR MDLM's log-linear schedule ``alpha_t = 1 - (1 - eps) t`` (weight exactly ``1/t``) by default,
  so that MDLM and BD3-LM differ only in the block structure: with ``block_size = L`` this method *is*
  our MDLM (same ``t``, same masks, same loss; tested).  ``schedule: linear`` gives the released one.
* **Clipped ("data-driven") schedule.** ``train_t = [beta_min, beta_max]`` draws the training ``t``
  from that interval (antithetic); the variance-minimising interval *search* of
  ``_clipped_schedule_search`` is not implemented, and ``nll`` always uses ``[t_eps, 1]``.
* **``ignore_bos``** (option, default off; on in the paper profile, as the released ``configs/algo/bd3lm.yaml``):
  position 0 is never masked (``xt[:, 0] = x0[:, 0]`` in ``_forward_pass_diffusion``), so it adds nothing to the
  loss, and Table 1 does not count it (``_loss`` sets its ``attention_mask`` to 0 outside training):
  :meth:`BD3LM.scored_tokens` is ``L - 1``; the sampler starts every sequence with BOS at position 0 as
  ``_semi_ar_sampler`` does (``x_accum[:, 0] = bos_token_id``).  Off in the toy profile: our corpora have no
  chunk-leading BOS there, and our MDLM scores every position too (same token counts in Table 1).
* **The evaluation interval.** Upstream's Table 1 NELBO is the one of ``validation_step`` at the bounds
  ``(sampling_eps, 1) = (1e-3, 1)``: ``t = u (1 - 1e-3) + 1e-3`` (``_sample_t``), which is our ``nll``'s
  ``t ~ U[t_eps, 1]``; the clipped interval stored with the checkpoint (``sampling_eps_min``/``_max``,
  ``var_min``) is used only by training's ``_loss`` and never by ``ppl_eval`` or the sampler, so it is recorded on
  import and not applied.

Sampling is the sampler below; :meth:`BD3LM.wrap` gives it a
:class:`BD3Denoiser` (exact: the same attention pattern with the prefix as the clean stream, either
as explicit keys or as a KV cache).

**Sampler.** BD3-LM's semi-autoregressive sampler with a fixed total number of denoising steps (``docs/baselines.md``).

Blocks of ``L'`` tokens are generated left to right; each block starts fully masked and is denoised by
MDLM ancestral updates (:func:`unie.methods.mdlm.mdlm_step`, float64 Gumbel-max, caching of
unchanged rows, noise removal at the end) conditioned on the clean earlier blocks, which live in a KV
cache (exact, see :class:`unie.methods.bd3lm.BD3Denoiser`).

**Step allocation: ``S`` is the total number of denoising steps for the whole sequence**, as for MDLM's
``S`` (the released sampler uses first-hitting, one token per call, and ignores ``S``: ``docs/baselines.md``).
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
``L' = L`` there is one unit and the sampler is :func:`~unie.methods.mdlm.sample_mdlm` bit for bit
(tested).  The forced BOS at position 0 is reproduced under ``ignore_bos``; not reproduced: nucleus filtering,
the entropy-based early stop.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.options import ConfigError, make_options
from ..core.registry import METHODS, register_sampler
from ..core.sampling import in_batches, time_grid
from ..core.schedule import Schedule, antithetic_t, make_schedule
from ..data.tokenizer import blocked_ids
from .mdlm import CachedDenoiser, block_logits, fill_remaining, mdlm_step, q_xt, subs_logp


# ---------------------------------------------------------------------- attention pattern (training's mask)
def bd3_attention(
    q_pos: torch.Tensor, q_noisy: torch.Tensor, k_pos: torch.Tensor, k_noisy: torch.Tensor, block_size: int
) -> torch.Tensor:
    """BD3-LM's attention rule for queries/keys given by position ``(Lq,)``/``(Lk,)`` and stream (noisy?).

    With ``blk = pos // block_size``, query ``q`` may attend to key ``k`` (True) iff
      * same stream and same block (block-diagonal: noisy<->noisy, clean<->clean within a block), or
      * ``q`` noisy, ``k`` clean and ``blk(k) < blk(q)`` (offset block-causal), or
      * ``q`` clean, ``k`` clean and ``blk(k) <= blk(q)`` (block-causal).
    Returns a bool ``(Lq, Lk)`` mask (True = may attend)."""
    qb, kb = (q_pos // block_size)[:, None], (k_pos // block_size)[None, :]
    qn, kn = q_noisy[:, None], k_noisy[None, :]
    diagonal = (qn == kn) & (qb == kb)
    offset = qn & ~kn & (kb < qb)
    causal = ~qn & ~kn & (kb <= qb)
    return diagonal | offset | causal


def two_stream_layout(L: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions ``(2L,)`` = ``[0..L-1, 0..L-1]`` and the noisy flag ``(2L,)`` of the input ``[xt ; x0]``."""
    pos = torch.arange(L, device=device).repeat(2)
    noisy = torch.arange(2 * L, device=device) < L
    return pos, noisy


def block_diff_mask(L: int, block_size: int, device=None) -> torch.Tensor:
    """The 2L x 2L training mask (upstream ``models/dit.py::block_diff_mask``) for ``[xt ; x0]``. Bool."""
    if L % block_size:
        raise ValueError(f"sequence length {L} is not a multiple of block_size {block_size}")
    pos, noisy = two_stream_layout(L, device)
    return bd3_attention(pos, noisy, pos, noisy, block_size)


def noisy_stream_logits(net, xt: torch.Tensor, x0: torch.Tensor, block_size: int) -> torch.Tensor:
    """Raw logits of the noisy stream ``(B, L, V)``: one pass over ``[xt ; x0]`` ``(B, 2L)`` with the
    block-diffusion mask and rotary positions ``0..L-1`` for both halves; the clean half is discarded."""
    L = x0.shape[1]
    pos, _ = two_stream_layout(L, x0.device)
    mask = block_diff_mask(L, block_size, x0.device)
    return net(torch.cat([xt, x0], dim=1), attn_mask=mask, positions=pos)[:, :L]


def block_times(n_seq: int, n_blocks: int, generator, t_eps: float, device=None, t_range=None) -> torch.Tensor:
    """One antithetic ``t`` per block over batch x blocks, laid out ``(n_seq, n_blocks)`` float32.

    ``t_range = (lo, hi)``: the clipped training interval (antithetic over ``[lo, hi]``)."""
    if t_range is None:
        return antithetic_t(n_seq * n_blocks, generator, t_eps, device).view(n_seq, n_blocks)
    lo, hi = float(t_range[0]), float(t_range[1])
    u = antithetic_t(n_seq * n_blocks, generator, 0.0, device).view(n_seq, n_blocks)
    return lo + (hi - lo) * u


def block_nelbo(
    logp_fn,
    x0: torch.Tensor,
    t: torch.Tensor,
    schedule: Schedule,
    mask_id: int,
    generator=None,
    keep_first: bool = False,
) -> torch.Tensor:
    """Single-sample block NELBO per sequence ``(B,)`` in nats (see the module docstring).

    Args:
        logp_fn: ``xt (B, L) -> (B, L, V)`` SUBS ``log p(x0_i | xt^b, x0^{<b})`` (a network's noisy stream
            or the toy world's block oracle; closes over ``x0``).
        x0: clean tokens ``(B, L)``.
        t: block times ``(B, n_blocks)``; the block size is ``L / n_blocks``.
        keep_first: position 0 is never masked (``ignore_bos``), so it adds nothing.
    """
    B, L = x0.shape
    nb = t.shape[1]
    bs = L // nb
    tt = t.double().repeat_interleave(bs, dim=1)  # (B, L)
    xt = q_xt(x0, schedule.mask_prob(tt), mask_id, generator)
    if keep_first:
        xt[:, 0] = x0[:, 0]
    logp = logp_fn(xt)
    lp = logp.double().gather(-1, x0.to(logp.device)[..., None]).squeeze(-1)
    nll = -torch.where(xt.to(logp.device) == mask_id, lp, torch.zeros_like(lp))  # (B, L)
    per_block = nll.view(B, nb, bs).sum(-1)
    return (schedule.weight(t.double()).to(per_block.device) * per_block).sum(-1)


# ---------------------------------------------------------------------- sampler-facing model
class BD3Denoiser:
    """A trained BD3-LM as a block denoiser: SUBS ``log p_theta(x0^b | xt^b, x^{<b})`` for the current
    block(s) given the clean prefix.  Two exact routes to the same numbers:

    * :meth:`logp_block` (reference): one pass over ``[xb ; prefix]`` with the training mask's rule, the prefix
      playing the clean stream (positions ``P..P+n-1`` for ``xb``, ``0..P-1`` for the prefix).
    * :meth:`evaluate` (sampling): the clean prefix lives in a KV cache (per layer ``(B, H, P, Dh)``);
      a clean block's keys only depend on clean blocks ``<=`` it, so caching them is exact (upstream's issue #26).
    Several blocks passed together as ``xb`` are each decoded given the clean prefix only (block-diagonal
    among themselves); ``joint=True`` lets them attend to each other as one larger noisy block.
    """

    def __init__(self, net, mask_id: int, block_size: int, blocked=(), first_token: int | None = None):
        self.net = net
        self.mask_id = mask_id
        self.block_size = int(block_size)
        self.blocked = tuple(blocked) or (mask_id,)
        self.vocab_size = net.cfg.vocab_size
        self.first_token = first_token  # ignore_bos: every sample starts with this token (BOS), never drawn

    def _mask(self, q_pos, q_noisy, k_pos, k_noisy, joint: bool):
        """The training mask's rule; ``joint`` merges all noisy queries/keys into one block. ``None`` when all True."""
        bs = self.block_size
        if joint:  # every noisy token gets the block id of the first noisy query
            first = int(q_pos[q_noisy].min()) // bs * bs if q_noisy.any() else 0
            q_pos = torch.where(q_noisy, torch.full_like(q_pos, first), q_pos)
            k_pos = torch.where(k_noisy, torch.full_like(k_pos, first), k_pos)
        m = bd3_attention(q_pos, q_noisy, k_pos, k_noisy, bs)
        return None if bool(m.all()) else m

    @torch.no_grad()
    def logp_block(self, prefix: torch.Tensor, xb: torch.Tensor, joint: bool = False) -> torch.Tensor:
        """``(B, n, V)`` for the noisy tokens ``xb`` ``(B, n)`` following the clean ``prefix`` ``(B, P)``
        (``P`` and ``n`` multiples of the block size).  No cache: the whole prefix is re-encoded."""
        dev = self.net.device
        prefix, xb = prefix.to(dev), xb.to(dev)
        P, n = prefix.shape[1], xb.shape[1]
        pos = torch.cat([torch.arange(P, P + n, device=dev), torch.arange(P, device=dev)])
        noisy = torch.arange(P + n, device=dev) < n
        mask = self._mask(pos, noisy, pos, noisy, joint)
        logits = self.net(torch.cat([xb, prefix], dim=1), attn_mask=mask, positions=pos)[:, :n]
        return subs_logp(logits, xb, self.mask_id, self.blocked)

    def new_cache(self) -> list:
        """An empty per-layer KV cache of the clean prefix."""
        return self.net.new_cache()

    @torch.no_grad()
    def evaluate(
        self,
        cache: list,
        commit: torch.Tensor | None,
        xb: torch.Tensor,
        rows: torch.Tensor | None = None,
        joint: bool = False,
    ) -> torch.Tensor:
        """SUBS log-probabilities ``(b, n, V)`` of the noisy tokens ``xb`` ``(b, n)`` that follow the cached prefix
        and the clean tokens ``commit`` ``(B, c)``, in ONE network pass.

        ``commit`` (the block(s) decoded last, now clean) is appended to ``cache`` in place: its queries
        attend block-causally to the cache and itself, and the noisy queries see cache + commit + their
        own block.  ``rows`` (bool ``(B,)``) evaluates a subset of the rows against the cache without
        modifying it (``commit`` must then be empty)."""
        dev = self.net.device
        xb = xb.to(dev)
        P = cache[0]["k"].shape[2] if "k" in cache[0] else 0
        c = 0 if commit is None else commit.shape[1]
        n = xb.shape[1]
        if rows is not None:
            if c:
                raise ValueError("commit the clean block with all rows before evaluating a subset")
            work = [{"k": d["k"][rows], "v": d["v"][rows]} if "k" in d else {} for d in cache]
            inp = xb
        else:
            work = cache
            inp = xb if not c else torch.cat([commit.to(dev), xb], dim=1)
        q_pos = torch.arange(P, P + c + n, device=dev)
        q_noisy = q_pos >= P + c
        k_pos = torch.arange(P + c + n, device=dev)
        k_noisy = k_pos >= P + c
        mask = self._mask(q_pos, q_noisy, k_pos, k_noisy, joint)
        logits = self.net(inp, attn_mask=mask, positions=q_pos, cache=work)[:, c:]
        if rows is None:  # keep the clean keys/values only (drop the noisy block's)
            for d in cache:
                d["k"], d["v"] = d["k"][:, :, : P + c], d["v"][:, :, : P + c]
        return subs_logp(logits, xb, self.mask_id, self.blocked)


# ---------------------------------------------------------------------- the method
@dataclass(frozen=True)
class BD3LMOptions:
    """``block_size`` (L'), the noise ``schedule`` and its ``eps``, the time floor ``t_eps``, the clipped
    training interval ``train_t = [beta_min, beta_max]`` (None: ``[t_eps, 1]``) and ``ignore_bos`` (position 0
    never masked nor counted, the sampler starts with BOS; module doc)."""

    block_size: int = 4
    schedule: str = "loglinear"
    eps: float = 1e-3
    t_eps: float = 1e-3
    train_t: tuple[float, ...] | None = None
    ignore_bos: bool = False

    def __post_init__(self):
        if self.block_size < 1:
            raise ConfigError(f"block_size must be >= 1, got {self.block_size}")
        t = self.train_t
        if t is not None and not (len(t) == 2 and 0.0 < float(t[0]) < float(t[1]) <= 1.0):
            raise ConfigError(f"train_t must be [beta_min, beta_max] with 0 < beta_min < beta_max <= 1, got {t}")


@METHODS.register("bd3lm")
class BD3LM:
    """Block diffusion (options: :class:`BD3LMOptions`)."""

    Options = BD3LMOptions
    causal = False
    time_conditioned = False
    has_likelihood = True
    stochastic_nll = True

    def __init__(self, tokenizer_info: dict, options: BD3LMOptions | dict | None = None, **kwargs):
        self.options = o = make_options(BD3LMOptions, options, "bd3lm options", **kwargs)
        self.mask_id = tokenizer_info["mask_id"]
        self.blocked = blocked_ids(tokenizer_info)
        self.block_size = int(o.block_size)
        self.schedule = make_schedule(o.schedule, o.eps)
        self.t_eps = o.t_eps
        self.train_t = None if o.train_t is None else (float(o.train_t[0]), float(o.train_t[1]))
        self.ignore_bos = bool(o.ignore_bos)
        self.bos_id = tokenizer_info["bos_id"]

    @staticmethod
    def kind(options: BD3LMOptions) -> str:
        return "bd3lm"

    def scored_tokens(self, L: int) -> int:
        """Tokens Table 1 counts per sequence: ``L``, or ``L - 1`` with ``ignore_bos``."""
        return L - 1 if self.ignore_bos else L

    def _n_blocks(self, L: int) -> int:
        if L % self.block_size:
            raise ValueError(f"sequence length {L} is not a multiple of block_size {self.block_size}")
        return L // self.block_size

    def loss(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """Mean per-token block NELBO over the batch (one antithetic ``t`` per block)."""
        B, L = x0.shape
        t = block_times(B, self._n_blocks(L), generator, self.t_eps, x0.device, self.train_t)
        tt = t.repeat_interleave(self.block_size, dim=1)  # (B, L)
        xt = q_xt(x0, self.schedule.mask_prob(tt), self.mask_id, generator)
        if self.ignore_bos:
            xt[:, 0] = x0[:, 0]
        logits = block_logits(noisy_stream_logits(net, xt, x0, self.block_size), self.blocked)
        nll_tok = F.cross_entropy(logits.transpose(1, 2), x0, reduction="none")  # (B, L)
        nll_tok = torch.where(xt == self.mask_id, nll_tok, torch.zeros_like(nll_tok))
        return (self.schedule.weight(tt) * nll_tok).sum() / x0.numel()

    @torch.no_grad()
    def nll(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """Per-sequence NELBO ``(B,)`` in nats, ``t ~ U[t_eps, 1]`` per block (antithetic)."""
        B, L = x0.shape
        t = block_times(B, self._n_blocks(L), generator, self.t_eps, x0.device)

        def logp_fn(xt):
            return subs_logp(noisy_stream_logits(net, xt, x0, self.block_size), xt, self.mask_id, self.blocked)

        return block_nelbo(logp_fn, x0, t, self.schedule, self.mask_id, generator, keep_first=self.ignore_bos)

    def wrap(self, net) -> BD3Denoiser:
        """The trained network as the block sampler's denoiser."""
        return BD3Denoiser(
            net, self.mask_id, self.block_size, self.blocked, first_token=self.bos_id if self.ignore_bos else None
        )


# -------------------------------------------------------------------------------------- sampler
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


@dataclass(frozen=True)
class BD3SamplerOptions:
    """``eps``: end of each unit's time grid; ``joint_blocks``: blocks decoded in one step attend to each other."""

    eps: float = 1e-5
    joint_blocks: bool = False


@torch.no_grad()
def sample_bd3(
    denoiser,
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
    """Block-by-block sampling of ``n`` sequences of length ``L`` in ``steps`` total denoising steps.

    ``denoiser`` is a :class:`BD3Denoiser`; options: :class:`BD3SamplerOptions`.  Returns
    ``(x (n, L) int64 cpu, stats)`` with ``nfe`` (network passes), ``rows_evaluated``, ``steps`` (ancestral
    steps taken per sequence, = ``steps``) and ``units`` (decode units per sequence)."""
    opts = make_options(BD3SamplerOptions, options, "bd3lm sampler options", **kwargs)
    eps, joint_blocks = opts.eps, opts.joint_blocks
    schedule = schedule or make_schedule("loglinear")
    mask_id, bs = denoiser.mask_id, denoiser.block_size
    if L % bs:
        raise ValueError(f"sequence length {L} is not a multiple of the block size {bs}")
    units = allocate_steps(L // bs, steps)

    first_token = getattr(denoiser, "first_token", None)

    def one_batch(b):
        x = torch.full((b, L), mask_id, dtype=torch.long, device=device)
        if first_token is not None:  # ignore_bos: BOS at position 0, as upstream's _semi_ar_sampler
            x[:, 0] = first_token
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


@register_sampler("bd3lm", BD3SamplerOptions, roles={"dlm": ("bd3lm",)})
def bd3lm_sampler(
    models: dict, n: int, L: int, steps: int, generator, options: BD3SamplerOptions, batch_size: int, device
):
    """Registry entry: ``models['dlm']`` is a :class:`BD3Denoiser` (block size from its checkpoint)."""
    return sample_bd3(models["dlm"], n, L, steps, generator, options, batch_size=batch_size, device=device)
