"""Autoregressive model: training loss, teacher-forced log-likelihood, and sampling with a KV cache.

The network is the shared transformer with causal attention.  A ``<bos>`` token is prepended
internally, so every position of a length-``L`` sequence is predicted:
``logp_next(ctx)[b, i] = log p_AR(x_i = . | ctx_<i)``.

``mask_inputs`` trains a *mask-aware* proxy: the context is a randomly masked copy of ``x0`` (mask
rate ``t ~ U(0, 1)`` per sequence) while the targets stay clean, so conditioning on a partially masked
state (``ar_context: masked``) is in distribution.

**Sampler.** Registry entries for the reference rows of Table 2: the AR model and the data itself."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..core.gumbel import gumbel_argmax, uniform
from ..core.registry import METHODS, SAMPLERS


class ARModel:
    """A trained causal network with the proxy/evaluator interface (``logp_next``, ``log_prob``, ``sample``)."""

    def __init__(self, net, bos_id: int, mask_id: int | None = None):
        self.net = net
        self.bos_id = bos_id
        self.mask_id = mask_id
        self.vocab_size = net.cfg.vocab_size

    def _inputs(self, ctx: torch.Tensor) -> torch.Tensor:
        bos = torch.full_like(ctx[:, :1], self.bos_id)
        return torch.cat([bos, ctx[:, :-1]], dim=1)

    def normalise(self, logits: torch.Tensor) -> torch.Tensor:
        """Log-probabilities from raw logits, with the mask and <bos> excluded (never predicted)."""
        logits = logits.float()
        specials = [i for i in (self.mask_id, self.bos_id) if i is not None]
        if specials:
            block = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
            block[specials] = True
            logits = logits.masked_fill(block, -math.inf)
        return F.log_softmax(logits, dim=-1)

    @torch.no_grad()
    def logp_next(self, ctx: torch.Tensor) -> torch.Tensor:
        """``(B, L, V)``: log-probabilities of position ``i`` given ``ctx_<i`` (``ctx`` may contain masks)."""
        ctx = ctx.to(self.net.device)
        return self.normalise(self.net(self._inputs(ctx)))

    def token_logp(self, ctx: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """``log p_AR(tokens[n, m, i] | ctx[n, :i])`` ``(N, M, L)`` for ``M`` token sets scored against one
        context each: one forward pass per context row.  Differentiable (NCE may train the proxy)."""
        ctx = ctx.to(self.net.device)
        logp = self.normalise(self.net(self._inputs(ctx)))  # (N, L, V)
        tokens = tokens.to(logp.device)
        return logp[:, None].expand(-1, tokens.shape[1], -1, -1).gather(-1, tokens[..., None]).squeeze(-1)

    @torch.no_grad()
    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Teacher-forced ``log p_AR(x)`` per sequence ``(B,)``."""
        x = x.to(self.net.device)
        return self.logp_next(x).gather(-1, x[..., None]).squeeze(-1).double().sum(-1)

    @torch.no_grad()
    def sample(self, n: int, L: int, generator=None, batch_size: int = 256) -> torch.Tensor:
        """Ancestral sampling with a KV cache (one new token per forward), float64 Gumbel-max. ``(n, L)``."""
        out = []
        dev = self.net.device
        for start in range(0, n, batch_size):
            b = min(batch_size, n - start)
            cache = self.net.new_cache()
            x = torch.full((b, 1), self.bos_id, dtype=torch.long, device=dev)
            toks = []
            for i in range(L):
                logp = self.normalise(self.net(x, cache=cache)[:, -1])
                nxt = gumbel_argmax(logp, generator).to(dev)
                toks.append(nxt)
                x = nxt[:, None]
            out.append(torch.stack(toks, dim=1).cpu())
        return torch.cat(out)


@METHODS.register("ar")
class AR:
    """Next-token cross-entropy; ``nll`` is the exact teacher-forced NLL.  Option ``mask_inputs`` (mask-aware proxy)."""

    causal = True
    time_conditioned = False
    has_likelihood = True
    stochastic_nll = False

    def __init__(self, tokenizer_info: dict, mask_inputs: bool = False):
        self.bos_id = tokenizer_info["bos_id"]
        self.mask_id = tokenizer_info["mask_id"]
        self.mask_inputs = mask_inputs

    def wrap(self, net) -> ARModel:
        """The trained network as a proxy/evaluator (``logp_next``, ``log_prob``, ``sample``)."""
        return ARModel(net, self.bos_id, self.mask_id)

    def loss(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        ctx = x0
        if self.mask_inputs:
            # half the batch keeps a clean context so the plain teacher-forced use stays in distribution
            t = uniform((x0.shape[0], 1), generator, x0.device)
            t = torch.where(torch.arange(x0.shape[0], device=x0.device)[:, None] % 2 == 0, torch.zeros_like(t), t)
            ctx = torch.where(uniform(x0.shape, generator, x0.device) < t, torch.full_like(x0, self.mask_id), x0)
        model = self.wrap(net)
        logp = model.normalise(net(model._inputs(ctx)))
        return F.nll_loss(logp.transpose(1, 2), x0)

    @torch.no_grad()
    def nll(self, net, x0: torch.Tensor, generator=None) -> torch.Tensor:
        return -self.wrap(net).log_prob(x0)


# -------------------------------------------------------------------------------------- sampler
@SAMPLERS.register("ar")
def ar_sampler(models: dict, n: int, L: int, steps: int, generator, batch_size: int = 256, **_):
    """Left-to-right sampling with a KV cache; always ``L`` steps (``steps`` must equal ``L``)."""
    if steps != L:
        raise ValueError(f"the AR sampler decodes one token per step: steps must be L={L}, got {steps}")
    x = models["ar"].sample(n, L, generator, batch_size=batch_size)
    return x, {"nfe": L * ((n + batch_size - 1) // batch_size)}


@SAMPLERS.register("data")
def data_sampler(models: dict, n: int, L: int, steps: int, generator, **_):
    """Real held-out sequences (the "Data" row): the first ``n`` rows of ``models['data']`` ``(N, L)``."""
    data = models["data"]
    if data.shape[0] < n:
        raise ValueError(f"the data split has {data.shape[0]} sequences, {n} requested")
    if data.shape[1] != L:
        raise ValueError(f"data sequences have length {data.shape[1]}, expected {L}")
    return data[:n].clone(), {"nfe": 0}
