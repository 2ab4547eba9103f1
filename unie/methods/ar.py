"""Autoregressive model: training loss, teacher-forced log-likelihood, and sampling with a KV cache.

The network is the shared transformer with causal attention.  A ``<bos>`` token is prepended
internally, so every position of a length-``L`` sequence is predicted:
``logp_next(ctx)[b, i] = log p_AR(x_i = . | ctx_<i)``.

``mask_inputs`` trains a *mask-aware* proxy: the context is a randomly masked copy of ``x0`` (mask
rate ``t ~ U(0, 1)`` per sequence) while the targets stay clean, so conditioning on a partially masked
state (``ar_context: masked``) is in distribution.  On the DLLM half's SFT rows ``(B, 2, L)`` only the answer
(the loss-mask positions) is masked: the prompt is never masked when a DLLM decodes.

Ids the model never predicts (``blocked``) are the tokenizer's :func:`~unie.data.tokenizer.blocked_ids`:
the mask, and ``<bos>`` only when it is an input-only token.  GPT-2's BOS is its EOS, a real data token
that the AR must be able to emit (it ends documents).

**Sampler** (``ar``): left to right with a preallocated KV cache (on a GPU the one-token forward replayed as a
CUDA graph), float64 Gumbel-max, always ``L`` steps.

**Chunks that begin with their own BOS** (``chunk_bos``, the released AR of MDLM's repository): the network was
trained on ``[BOS] + ... + [EOS]`` chunks reading ``x[:, :-1]`` and predicting ``x[:, 1:]``, so position 0 is the
chunk's BOS, context and never a prediction.  The same convention holds wherever such a model runs
(:class:`ARModel` with ``chunk_bos``): its likelihood scores positions ``1..L-1`` from the chunk's own prefix
(upstream's ``_loss``), as a proxy its per-position conditionals of position 0 are 0 (upstream's energies take
the AR's ``(B, L - 1)`` log-probabilities of positions ``1..L-1`` only), and as a sampler it writes BOS followed by
``L - 1`` drawn tokens (upstream's ``_ar_sampler``), never a second BOS in front."""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.gumbel import gumbel_argmax, uniform
from ..core.options import make_options
from ..core.registry import METHODS, register_sampler
from ..data.dllm_format import split_rows
from ..data.tokenizer import blocked_ids


class ARModel:
    """A trained causal network with the proxy/evaluator interface (``logp_next``, ``log_prob``, ``sample``)."""

    def __init__(
        self,
        net,
        bos_id: int,
        mask_id: int | None = None,
        blocked=None,
        eos_id: int | None = None,
        chunk_bos: bool = False,
    ):
        """``blocked``: ids never predicted (default: the mask and ``bos_id``, for a tokenizer whose BOS is an
        input-only token; pass :func:`~unie.data.tokenizer.blocked_ids` of the tokenizer).  ``chunk_bos``: every
        sequence's position 0 is its own BOS, context only (module doc; :class:`AROptions`)."""
        self.net = net
        self.bos_id = bos_id
        self.chunk_bos = bool(chunk_bos)
        self.eos_id = eos_id
        self.mask_id = mask_id
        self.blocked = tuple(i for i in (mask_id, bos_id) if i is not None) if blocked is None else tuple(blocked)
        self.vocab_size = net.cfg.vocab_size
        self.decode_path, self.capture_seconds = None, 0.0  # how the last sample() decoded (see sample)

    def _inputs(self, ctx: torch.Tensor) -> torch.Tensor:
        """The network input whose output ``i`` predicts position ``i`` of ``ctx``: ``[bos, ctx_0..ctx_{L-2}]``;
        with ``chunk_bos`` ``ctx[:, :-1]`` (its output ``i`` predicts position ``i + 1``; position 0 is context)."""
        if self.chunk_bos:
            return ctx[:, :-1]
        bos = torch.full_like(ctx[:, :1], self.bos_id)
        return torch.cat([bos, ctx[:, :-1]], dim=1)

    def predicted(self, L: int) -> int:
        """Positions of a length-``L`` sequence the model predicts (and its sampler draws): ``L``, or ``L - 1`` with
        ``chunk_bos`` (position 0 is the chunk's BOS)."""
        return L - 1 if self.chunk_bos else L

    def _bos_row(self, like: torch.Tensor) -> torch.Tensor:
        """Position 0's row under ``chunk_bos`` ``(N, 1, V)``: the chunk's BOS with probability 1."""
        row = torch.full((like.shape[0], 1, like.shape[-1]), -math.inf, dtype=like.dtype, device=like.device)
        row[..., self.bos_id] = 0.0
        return row

    def normalise(self, logits: torch.Tensor) -> torch.Tensor:
        """Log-probabilities from raw logits, with the ``blocked`` ids excluded (never predicted)."""
        logits = logits.float()
        if self.blocked:
            block = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
            block[list(self.blocked)] = True
            logits = logits.masked_fill(block, -math.inf)
        return F.log_softmax(logits, dim=-1)

    @torch.no_grad()
    def logits(self, x: torch.Tensor, share_prefixes: bool = False) -> torch.Tensor:
        """Hugging Face's causal convention (:class:`~unie.core.protocols.CausalLM`): ``x`` ``(N, L)`` includes its
        own ``<bos>``; ``logits[:, i]`` scores token ``i + 1`` (blocked ids at -inf).  ``share_prefixes``: rows that
        start alike read their common prefix once (the network's ``forward_shared``, where it has one: the same
        numbers to float rounding)."""
        x = x.to(self.net.device)
        if share_prefixes and hasattr(self.net, "forward_shared"):
            return self.normalise(self.net.forward_shared(x))
        return self.normalise(self.net(x))

    @torch.no_grad()
    def greedy_continue(self, prompts: list[list[int]], gen_len: int) -> torch.Tensor:
        """Greedy continuations ``(B, gen_len)`` of token-id prompts of any lengths (an AR row of Table 3).

        Right-padded batch, one full forward per new token (a causal model's conditionals never see the
        padding to their right); ties are broken by the lowest id (``argmax``), no sampling.  Once every row has
        written ``<eos>`` the rest is ``<eos>`` without forwards (a completion ends at its first ``<eos>``)."""
        lengths = torch.tensor([len(p) for p in prompts])
        T = int(lengths.max()) + gen_len
        fill = self.eos_id if self.eos_id is not None else self.bos_id
        x = torch.full((len(prompts), T), fill, dtype=torch.long, device=self.net.device)
        for b, p in enumerate(prompts):
            x[b, : len(p)] = torch.tensor(p, dtype=torch.long)
        rows = torch.arange(len(prompts), device=x.device)
        pos = lengths.to(x.device)
        ended = torch.zeros(len(prompts), dtype=torch.bool, device=x.device)
        for g in range(gen_len):
            logp = self.logp_next(x[:, : int(pos.max()) + 1])
            x[rows, pos] = logp[rows, pos].argmax(-1)
            ended |= x[rows, pos] == self.eos_id
            pos = pos + 1
            if self.eos_id is not None and bool(ended.all()):
                break  # the positions after are <eos> already (fill)
        return torch.stack([x[b, lengths[b] : lengths[b] + gen_len] for b in range(len(prompts))]).cpu()

    @torch.no_grad()
    def logp_next(self, ctx: torch.Tensor) -> torch.Tensor:
        """``(B, L, V)``: log-probabilities of position ``i`` given ``ctx_<i`` (``ctx`` may contain masks); with
        ``chunk_bos`` position 0 is the chunk's BOS with probability 1."""
        ctx = ctx.to(self.net.device)
        logp = self.normalise(self.net(self._inputs(ctx)))
        return torch.cat([self._bos_row(logp), logp], dim=1) if self.chunk_bos else logp

    def token_logp(self, ctx: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """``log p_AR(tokens[n, m, i] | ctx[n, :i])`` ``(N, M, L)`` for ``M`` token sets scored against one
        context each: one forward pass per context row.  Differentiable (NCE may train the proxy).  With
        ``chunk_bos`` position 0 carries no AR term (0): it is the chunk's BOS, context for the rest, as upstream's
        energies read the AR's log-probabilities of positions ``1..L-1`` only."""
        ctx = ctx.to(self.net.device)
        logp = self.normalise(self.net(self._inputs(ctx)))  # (N, L, V), or (N, L - 1, V) for positions 1..L-1
        tokens = tokens.to(logp.device)
        scored = tokens[..., 1:] if self.chunk_bos else tokens
        out = logp[:, None].expand(-1, tokens.shape[1], -1, -1).gather(-1, scored[..., None]).squeeze(-1)
        return torch.cat([torch.zeros_like(out[..., :1]), out], dim=-1) if self.chunk_bos else out

    @torch.no_grad()
    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Teacher-forced ``log p_AR(x)`` per sequence ``(B,)`` (with ``chunk_bos``: of positions ``1..L-1`` given
        the chunk's BOS, upstream's ``_loss``)."""
        x = x.to(self.net.device)
        return self.token_logp(x, x[:, None])[:, 0].double().sum(-1)

    @torch.no_grad()
    def sample(self, n: int, L: int, generator=None, batch_size: int = 256, graphs: bool | None = None) -> torch.Tensor:
        """Ancestral sampling with a preallocated KV cache (one new token per forward), float64 Gumbel-max.
        ``(n, L)``.

        ``graphs``: replay the one-token forward as a CUDA graph (fixed-shape cache; no per-token launch
        overhead, the decode of a user's static-cache ``generate``); default: on for a CUDA model, never on a
        CPU.  A capture that fails falls back to the eager loop (``self.decode_path`` says which ran).  The
        eager loop draws the tokens of the concatenating dict cache exactly (a test); the graph attends over
        every slot with the future masked, the same distribution up to float rounding.  With ``chunk_bos`` a
        sample is the BOS followed by ``L - 1`` drawn tokens (upstream's ``_ar_sampler``): ``L - 1`` forwards."""
        out = []
        first = 1 if self.chunk_bos else 0  # position 0 under chunk_bos: the chunk's BOS, not drawn
        dev = self.net.device
        static = hasattr(self.net, "static_cache")  # our Transformer; a released DiT has the dict cache only
        use_graphs = static and dev.type == "cuda" and torch.cuda.is_available() if graphs is None else graphs
        if use_graphs and (dev.type != "cuda" or not static):
            raise ValueError("CUDA graphs need a CUDA model with a preallocated cache (unie's Transformer)")
        for start in range(0, n, batch_size):
            b = min(batch_size, n - start)
            self.capture_seconds = 0.0
            step = self._graph_step(b, L) if use_graphs else None
            self.decode_path = "cuda_graph" if step is not None else "eager"
            if step is None:
                cache = self.net.static_cache(L) if static else self.net.new_cache()
                step = lambda i, tok: self.net(tok, cache=cache)[:, -1]  # noqa: E731
            x = torch.full((b, 1), self.bos_id, dtype=torch.long, device=dev)
            toks = torch.empty(b, L, dtype=torch.long, device=dev)
            toks[:, :first] = self.bos_id
            for i in range(L - first):
                logp = self.normalise(step(i, x))
                toks[:, first + i] = gumbel_argmax(logp, generator).to(dev)
                x = toks[:, first + i : first + i + 1]
            out.append(toks.cpu())
        return torch.cat(out)

    def _graph_step(self, b: int, L: int):
        """``step(i, tok (b, 1)) -> logits (b, V)`` replaying one captured forward at position ``i``, or None
        when the capture fails (the caller falls back to the eager loop)."""
        dev = self.net.device
        tok = torch.full((b, 1), self.bos_id, dtype=torch.long, device=dev)
        pos = torch.zeros(1, dtype=torch.long, device=dev)
        cache = self.net.static_cache(L, pos=pos)
        autocast = torch.is_autocast_enabled("cuda")
        dtype = torch.get_autocast_dtype("cuda") if autocast else None

        def forward():
            # Under the caller's autocast the weights are cast once, by the warm-up, into autocast's cache (which
            # lives until the caller's outermost autocast region exits, after this sampler returns); the graph
            # then reads those copies instead of recording a float32 -> bf16 cast of every weight per token (that
            # would move ~3x the bytes of the bf16 weights and make bf16 slower than fp32).
            with torch.autocast("cuda", dtype=dtype, enabled=autocast, cache_enabled=True):
                return self.net(tok, cache=cache)[:, -1]

        t0 = time.perf_counter()
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):  # warm-up before the capture (allocator, kernel selection)
                    forward()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                logits = forward()
        except Exception as err:  # pragma: no cover - depends on the device and torch version
            warnings.warn(f"CUDA graph capture failed ({err}); decoding eagerly")
            return None
        cache.k.zero_()
        cache.v.zero_()
        torch.cuda.synchronize()
        self.capture_seconds = time.perf_counter() - t0  # warm-up + capture, part of every sample() call

        def step(i, x):
            pos.fill_(i)
            tok.copy_(x)
            graph.replay()
            return logits

        return step


@dataclass(frozen=True)
class AROptions:
    """``mask_inputs``: train a mask-aware proxy (contexts randomly masked, targets clean; on SFT rows the answer
    only, :meth:`AR.masked_context`).  ``chunk_bos``: the
    sequences are wrapped chunks that begin with their own BOS (``data.chunk_specials``: ``[BOS] + ... + [EOS]``),
    and the loss and ``nll`` read them as upstream's AR does (MDLM's ``_maybe_sub_sample``/``_loss`` with
    ``parameterization: ar``): the network reads ``x[:, :-1]`` and predicts ``x[:, 1:]``, so ``L - 1`` tokens are
    scored (:meth:`AR.scored_tokens`), each with the chunk's own prefix as context and no BOS prepended."""

    mask_inputs: bool = False
    chunk_bos: bool = False


@METHODS.register("ar")
class AR:
    """Next-token cross-entropy; ``nll`` is the exact teacher-forced NLL (options: :class:`AROptions`)."""

    Options = AROptions
    causal = True
    time_conditioned = False
    has_likelihood = True
    stochastic_nll = False

    def __init__(self, tokenizer_info: dict, options: AROptions | dict | None = None, **kwargs):
        self.options = make_options(AROptions, options, "ar options", **kwargs)
        self.bos_id = tokenizer_info["bos_id"]
        self.eos_id = tokenizer_info["eos_id"]
        self.mask_id = tokenizer_info["mask_id"]
        self.blocked = blocked_ids(tokenizer_info)
        self.mask_inputs = self.options.mask_inputs
        self.chunk_bos = self.options.chunk_bos

    @staticmethod
    def kind(options: AROptions) -> str:
        return "ar"

    def scored_tokens(self, L: int) -> int:
        """Tokens ``nll`` scores in a sequence of ``L`` (Table 1's token count): ``L``, or ``L - 1`` with
        ``chunk_bos`` (the chunk's BOS is context, not a prediction)."""
        return L - 1 if self.chunk_bos else L

    def _inputs_targets(self, x0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(network input, targets)``: ``([bos, x_0..x_{L-2}], x)``, or with ``chunk_bos`` upstream's
        ``(x[:, :-1], x[:, 1:])`` (every chunk must then begin with BOS: a ValueError otherwise)."""
        if not self.chunk_bos:
            return torch.cat([torch.full_like(x0[:, :1], self.bos_id), x0[:, :-1]], dim=1), x0
        if not bool((x0[:, 0] == self.bos_id).all()):
            raise ValueError(
                f"AR option chunk_bos: every sequence must begin with its BOS ({self.bos_id}); "
                f"{int((x0[:, 0] != self.bos_id).sum())} of {len(x0)} do not (data.chunk_specials?)"
            )
        return x0[:, :-1], x0[:, 1:]

    def masked_context(self, x0: torch.Tensor, generator, maskable: torch.Tensor | None = None) -> torch.Tensor:
        """The context ``(B, L)`` of a mask-aware proxy's step (``mask_inputs``): each position of ``x0`` (of
        ``maskable`` ``(B, L)`` bool when given: an SFT row's answer) masked with probability ``t ~ U(0, 1)``, one
        ``t`` per sequence; the even rows keep ``t = 0``, so half the batch keeps a clean context and the plain
        teacher-forced use stays in distribution."""
        t = uniform((x0.shape[0], 1), generator, x0.device)
        t = torch.where(torch.arange(x0.shape[0], device=x0.device)[:, None] % 2 == 0, torch.zeros_like(t), t)
        hit = uniform(x0.shape, generator, x0.device) < t
        if maskable is not None:
            hit &= maskable
        return torch.where(hit, torch.full_like(x0, self.mask_id), x0)

    def wrap(self, net) -> ARModel:
        """The trained network as a proxy/evaluator (``logp_next``, ``log_prob``, ``sample``), with this model's
        ``chunk_bos`` convention (module doc)."""
        return ARModel(net, self.bos_id, self.mask_id, self.blocked, eos_id=self.eos_id, chunk_bos=self.chunk_bos)

    def loss(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """Mean next-token NLL over the targets: every position of pretraining rows ``(B, L)``, the loss-mask
        positions of SFT rows ``(B, 2, L)`` (:mod:`unie.data.dllm_format`: the answer and its ``<eos>``)."""
        if x0.dim() == 3:
            if self.chunk_bos:
                raise ValueError("AR option chunk_bos reads pretraining chunks that begin with their BOS, not SFT rows")
            x0, target = split_rows(x0)
            model = self.wrap(net)
            ctx = self.masked_context(x0, generator, target) if self.mask_inputs else x0
            logp = model.normalise(net(model._inputs(ctx)))
            nll = -logp.gather(-1, x0[..., None]).squeeze(-1)
            return torch.where(target, nll, torch.zeros_like(nll)).sum() / target.sum().clamp(min=1)
        inp, target = self._inputs_targets(x0)
        if self.mask_inputs:
            ctx = self.masked_context(x0, generator)
            if self.chunk_bos:
                ctx[:, 0] = x0[:, 0]  # the chunk's BOS stays: it is the context every prediction starts from
            inp = ctx[:, :-1] if self.chunk_bos else self._inputs_targets(ctx)[0]
        logp = self.wrap(net).normalise(net(inp))
        return F.nll_loss(logp.transpose(1, 2), target)

    @torch.no_grad()
    def nll(self, net, x0: torch.Tensor, generator=None) -> torch.Tensor:
        """Teacher-forced NLL per sequence ``(B,)`` over :meth:`scored_tokens` tokens."""
        if not self.chunk_bos:
            return -self.wrap(net).log_prob(x0)
        inp, target = self._inputs_targets(x0.to(net.device))
        logp = self.wrap(net).normalise(net(inp))
        return -logp.gather(-1, target[..., None]).squeeze(-1).double().sum(-1)


# ---------------------------------------------------------------------- sampler
@dataclass(frozen=True)
class ARSamplerOptions:
    """The AR sampler has no options (it always decodes ``L`` tokens, one per step)."""


@register_sampler("ar", ARSamplerOptions, roles={"ar": ("ar",)}, fixed_steps=True)
def ar_sampler(models: dict, n: int, L: int, steps: int, generator, options: ARSamplerOptions, batch_size: int, device):
    """Left-to-right sampling with a KV cache; always ``L`` steps (``steps`` must equal ``L``); a model with
    ``chunk_bos`` writes its BOS and draws ``L - 1`` tokens (``L - 1`` forwards per batch)."""
    if steps != L:
        raise ValueError(f"the AR sampler decodes one token per step: steps must be L={L}, got {steps}")
    ar = models["ar"]
    x = ar.sample(n, L, generator, batch_size=batch_size)
    return x, {"nfe": ar.predicted(L) * ((n + batch_size - 1) // batch_size)}
