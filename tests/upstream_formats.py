"""Transcriptions of the upstream code that *writes* the released checkpoints, for tests/test_upstream_formats.py.

Written from the upstream repositories, not from :mod:`unie` (kuleshov-group/mdlm c112c52, s-sahoo/duo 7c9b498,
kuleshov-group/bd3lms 1c3e8f4, louaaron/Score-Entropy-Discrete-Diffusion 0605786):

* :class:`Backbone`: the module tree of upstream's ``DIT`` (``models/dit.py``: ``vocab_embed``, ``sigma_map``,
  ``rotary_emb``, ``blocks``, ``output_layer``, registered in that order) and of MDLM's causal ``DDIT``
  (``models/autoregressive.py``: no ``sigma_map``, no adaLN), so its ``state_dict`` has upstream's keys in
  upstream's order; its forward is ``standins_released.reference_logits`` (the upstream equations);
* :class:`EMA`: ``models/ema.py``'s ``ExponentialMovingAverage`` (shadow parameters, decay warm-up, ``state_dict``);
* :func:`train_steps`: a few AdamW steps with the EMA updated after each (``optimizer_step``), so that the EMA,
  the raw weights and the optimizer state all differ;
* :func:`lightning_checkpoint`: the dict Lightning 2.2's ``CheckpointConnector.dump_checkpoint`` writes, plus
  upstream's ``on_save_checkpoint`` (``ema``, the loops' counters, ``sampler``), with ``hyper_parameters`` holding
  the hydra config (a class of module ``omegaconf.dictconfig``, which the loader must not import) and the pickled
  tokenizer (``save_hyperparameters()`` keeps both ``__init__`` arguments);
* :func:`save_hf_folder`: the HF folder ``push_to_hub``/``save_pretrained`` writes for MDLM-style models
  (``BD3LMConfig``'s keys, ``auto_map``, ``return_dict: false``; BD3-LM's ``sampling_eps_min``/``_max`` buffers), by
  transformers' own ``save_pretrained``;
* :func:`save_sedd_hub`: SEDD's ``PyTorchModelHubMixin`` folder by huggingface_hub's own ``save_pretrained``
  (``model.safetensors``), and the legacy layout (``pytorch_model.bin``);
* :func:`duo_nll_per_token`, :func:`duo_posterior`: ``DUO_BASE.nll_per_token`` and ``_posterior_from_x0`` (algo.py);
* :func:`bd3_eval_nelbo`: BD3-LM's validation NELBO (``_forward_pass_diffusion`` + ``_loss`` outside training);
* :func:`mdlm_ar_nll`: MDLM's AR ``_loss`` (``_maybe_sub_sample``: ``x0[:, :-1]`` -> ``x0[:, 1:]``, ``AR.forward``);
* :func:`mdlm_ar_sampler`: MDLM's ``_ar_sampler`` (``diffusion.py``: BOS, then ``L - 1`` Gumbel-max draws);
* :func:`edlm_ar_energy`: EDLM's ``EBM.ebm_forward`` with ``ebm_backbone: ar`` (MinkaiXu/Energy-Diffusion-LLM
  97e3146, ``diffusion.py``: the AR reads ``x0[:, :-1]``, its carry-over reference is ``xt[:, 1:]``);
* :func:`sedd_analytic_probs`: MDLM's ``_analytic_update`` for SEDD (staggered score, transposed transition) on the
  raw score, its mask column of unmasked rows left as the network gives it.
"""

from __future__ import annotations

import copy
import math
import sys
import types
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

from standins_released import reference_logits


# ---------------------------------------------------------------------- the networks (module trees)
class _LayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones([dim]))


class _Rotary(nn.Module):
    def __init__(self, dim, base=10_000):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)))


class _Embedding(nn.Module):
    def __init__(self, dim, vocab):
        super().__init__()
        self.embedding = nn.Parameter(torch.empty((vocab, dim)))


class _Timestep(nn.Module):
    def __init__(self, hidden, freq=256):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(freq, hidden, bias=True), nn.SiLU(), nn.Linear(hidden, hidden, bias=True))


class _Block(nn.Module):
    def __init__(self, dim, cond_dim, adaln):
        super().__init__()
        self.norm1 = _LayerNorm(dim)
        self.attn_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.attn_out = nn.Linear(dim, dim, bias=False)
        self.dropout1 = nn.Dropout(0.0)
        self.norm2 = _LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim, bias=True), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim, bias=True)
        )
        self.dropout2 = nn.Dropout(0.0)
        if adaln:
            self.adaLN_modulation = nn.Linear(cond_dim, 6 * dim, bias=True)


class _Final(nn.Module):
    def __init__(self, dim, vocab, cond_dim, adaln):
        super().__init__()
        self.norm_final = _LayerNorm(dim)
        self.linear = nn.Linear(dim, vocab)
        if adaln:
            self.adaLN_modulation = nn.Linear(cond_dim, 2 * dim, bias=True)


class Backbone(nn.Module):
    """Upstream's ``DIT`` (``adaln``) or MDLM's causal ``DDIT`` (``ar``): the module tree, randomly initialised
    (every tensor non-trivial, as after training); ``forward`` = the upstream equations."""

    def __init__(self, vocab, dim=32, n_blocks=2, n_heads=4, cond_dim=16, ar=False, time_conditioning=False, seed=0):
        super().__init__()
        self.spec = SimpleNamespace(
            n_heads=n_heads, n_layers=n_blocks, adaln=not ar, causal=ar, time_conditioning=time_conditioning and not ar
        )
        self.vocab_embed = _Embedding(dim, vocab)
        if not ar:
            self.sigma_map = _Timestep(cond_dim)
        self.rotary_emb = _Rotary(dim // n_heads)
        self.blocks = nn.ModuleList([_Block(dim, cond_dim, not ar) for _ in range(n_blocks)])
        self.output_layer = _Final(dim, vocab, cond_dim, not ar)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                base = (
                    1.0
                    if name.endswith("norm1.weight") or name.endswith("norm2.weight") or "norm_final" in name
                    else 0.0
                )
                p.copy_(base + torch.randn(p.shape, generator=g) / math.sqrt(max(p.shape[-1], 1)))

    def forward(self, x, sigma=None, mask=None, positions=None):
        state = {**dict(self.named_parameters()), **dict(self.named_buffers())}
        return reference_logits(state, self.spec, x, sigma, mask=mask, positions=positions)


class EMA:
    """``models/ema.py``'s ExponentialMovingAverage (mdlm, duo, bd3lms: the same file)."""

    def __init__(self, parameters, decay):
        self.decay = decay
        self.num_updates = 0
        self.shadow_params = [p.clone().detach() for p in parameters if p.requires_grad]
        self.collected_params = []

    def update(self, parameters):
        self.num_updates += 1
        decay = min(self.decay, (1 + self.num_updates) / (10 + self.num_updates))
        with torch.no_grad():
            for s, p in zip(self.shadow_params, [p for p in parameters if p.requires_grad]):
                s.sub_((1.0 - decay) * (s - p))

    def copy_to(self, parameters):
        for s, p in zip(self.shadow_params, [p for p in parameters if p.requires_grad]):
            p.data.copy_(s.data)

    def state_dict(self):
        return dict(decay=self.decay, num_updates=self.num_updates, shadow_params=self.shadow_params)


def train_steps(net: Backbone, steps: int = 3, seed: int = 0, sigma=None):
    """``steps`` AdamW steps on a cross-entropy to random targets, the EMA updated after each; returns
    ``(optimizer, ema)``."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-2)
    ema = EMA(net.parameters(), decay=0.9999)
    V = net.vocab_embed.embedding.shape[0]
    for _ in range(steps):
        x = torch.randint(0, V, (2, 8), generator=g)
        s = None if sigma is None else torch.full((2,), float(sigma))
        loss = F.cross_entropy(net(x, s).flatten(0, 1), torch.randint(0, V, (16,), generator=g))
        opt.zero_grad()
        loss.backward()
        opt.step()
        ema.update(net.parameters())
    return opt, ema


# ---------------------------------------------------------------------- Lightning's checkpoint
def _fake_module(name: str, **attrs):
    """A module ``name`` in sys.modules (so pickle can name its classes, as a real omegaconf/transformers would)."""
    mod = sys.modules.get(name) or types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    sys.modules[name] = mod
    return mod


class DictConfig:
    """Stands for omegaconf's DictConfig (pickled by name: ``omegaconf.dictconfig.DictConfig``)."""

    def __init__(self, content):
        self._content = content


DictConfig.__module__ = "omegaconf.dictconfig"


def lightning_checkpoint(
    path, module, ema: EMA, opt, tokenizer, extra_state: dict | None = None, hparams_extra: dict | None = None
) -> dict:
    """``torch.save`` of the dict Lightning 2.2 writes for a LightningModule whose ``backbone`` is ``module``
    (``state_dict``: ``backbone.*`` plus ``extra_state``, e.g. BD3-LM's ``sampling_eps_min``/``_max`` buffers),
    then upstream's ``on_save_checkpoint`` additions.  Returns the dict."""
    _fake_module("omegaconf")
    _fake_module("omegaconf.dictconfig", DictConfig=DictConfig)
    state = {f"backbone.{k}": v.detach().clone() for k, v in module.state_dict().items()}
    state.update(extra_state or {})
    progress = {"total": {"ready": 3, "completed": 3}, "current": {"ready": 3, "completed": 3}}
    ckpt = {
        "epoch": 0,
        "global_step": 3,
        "pytorch-lightning_version": "2.2.1",
        "state_dict": state,
        "loops": {
            "fit_loop": {
                "state_dict": {},
                "epoch_loop.state_dict": {"_batches_that_stepped": 3},
                "epoch_loop.batch_progress": {**progress, "is_last_batch": False},
                "epoch_loop.automatic_optimization.optim_progress": {
                    "optimizer": {"step": progress, "zero_grad": progress}
                },
                "epoch_progress": {"total": {"completed": 0}, "current": {"completed": 0}},
            }
        },
        "callbacks": {
            "ModelCheckpoint{'monitor': 'val/nll', 'mode': 'min', 'every_n_train_steps': None}": {
                "best_model_score": torch.tensor(4.2),
                "best_model_path": "checkpoints/best.ckpt",
            }
        },
        "optimizer_states": [opt.state_dict()],
        "lr_schedulers": [{"last_epoch": 3, "_step_count": 4, "base_lrs": [3e-2]}],
        "hparams_name": "kwargs",
        "hyper_parameters": {
            "config": DictConfig({"model": {"hidden_size": 32}}),
            "tokenizer": tokenizer,
            **(hparams_extra or {}),
        },
    }
    ckpt["ema"] = ema.state_dict()  # on_save_checkpoint
    ckpt["sampler"] = {"random_state": None}
    torch.save(ckpt, path)
    return ckpt


# ---------------------------------------------------------------------- Hugging Face folders
def save_hf_folder(
    folder,
    kind: str,
    module: Backbone,
    ema: EMA | None = None,
    block_size=None,
    eps=(0.35, 0.8),
    time_conditioning=False,
):
    """The HF folder of an MDLM-style model (``push_to_hf.py``: the EMA copied into the model's parameters, then
    ``push_to_hub`` = ``save_pretrained``), by transformers' own saving code; returns the model's state dict."""
    import transformers

    class Config(transformers.PretrainedConfig):  # BD3LMConfig's keys (MDLM's HF config is its ancestor)
        model_type = kind

        def __init__(
            self,
            block_size=1,
            vocab_size=50258,
            model_length=1024,
            cross_attn=True,
            adaln=True,
            attn_backend="sdpa",
            causal=False,
            hidden_dim=768,
            cond_dim=128,
            n_blocks=12,
            n_heads=12,
            dropout=0.1,
            time_conditioning=False,
            var_min=True,
            sampling_eps_min=1e-3,
            sampling_eps_max=0.999,
            **kwargs,
        ):
            super().__init__(**kwargs)
            self.block_size, self.vocab_size, self.model_length = block_size, vocab_size, model_length
            self.cross_attn, self.adaln, self.attn_backend, self.causal = cross_attn, adaln, attn_backend, causal
            self.hidden_dim, self.cond_dim, self.n_blocks, self.n_heads = hidden_dim, cond_dim, n_blocks, n_heads
            self.dropout, self.time_conditioning, self.var_min = dropout, time_conditioning, var_min
            self.sampling_eps_min, self.sampling_eps_max = sampling_eps_min, sampling_eps_max

    class Model(transformers.PreTrainedModel):
        config_class = Config
        base_model_prefix = kind

        def __init__(self, config):
            super().__init__(config)
            self.backbone = copy.deepcopy(module)
            if kind == "bd3lm" and config.var_min:
                self.register_buffer("sampling_eps_min", torch.tensor(config.sampling_eps_min))
                self.register_buffer("sampling_eps_max", torch.tensor(config.sampling_eps_max))

        def _init_weights(self, m):  # the weights are the module's (loaded below, as push_to_hf.py does)
            pass

    spec = module.spec
    cfg = Config(
        block_size=block_size or 1,
        vocab_size=module.vocab_embed.embedding.shape[0],
        model_length=1024,
        hidden_dim=module.vocab_embed.embedding.shape[1],
        cond_dim=module.sigma_map.mlp[0].out_features,
        n_blocks=spec.n_layers,
        n_heads=spec.n_heads,
        dropout=0.1,
        time_conditioning=time_conditioning,
        var_min=kind == "bd3lm",
        sampling_eps_min=eps[0],
        sampling_eps_max=eps[1],
        return_dict=False,
    )
    model = Model(cfg)  # a copy of the module: the caller's keeps its raw weights
    if ema is not None:
        ema.copy_to(model.parameters())
    model.config.auto_map = {
        "AutoConfig": f"kuleshov-group/{kind}--configuration_{kind}.{kind.upper()}Config",
        "AutoModelForMaskedLM": f"kuleshov-group/{kind}--modeling_{kind}.{kind.upper()}",
    }
    model.save_pretrained(folder)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def save_sedd_hub(folder, module: Backbone, config: dict, legacy: bool = False):
    """SEDD's ``PyTorchModelHubMixin`` folder, by huggingface_hub's own ``save_pretrained`` (``config.json`` = the
    config argument, ``model.safetensors``); ``legacy``: the earlier layout, ``pytorch_model.bin`` (``torch.save``
    of the state dict)."""
    import json
    from pathlib import Path

    from huggingface_hub import PyTorchModelHubMixin

    class SEDD(nn.Module, PyTorchModelHubMixin):
        def __init__(self, config: dict):
            super().__init__()
            self.vocab_embed, self.sigma_map, self.rotary_emb = module.vocab_embed, module.sigma_map, module.rotary_emb
            self.blocks, self.output_layer = module.blocks, module.output_layer

    model = SEDD(config)
    folder = Path(folder)
    if legacy:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config))
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    else:
        model.save_pretrained(folder)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ---------------------------------------------------------------------- upstream computations
def duo_nll_per_token(log_x_theta, xt, x0, alpha_t, dalpha_t, vocab_size):
    """``DUO_BASE.nll_per_token`` (algo.py), ``low_var=False``; ``alpha_t``, ``dalpha_t`` ``(B, 1)``."""
    x_reconst = log_x_theta.exp()
    x_bar_theta = vocab_size * alpha_t[:, :, None] * x_reconst + 1 - alpha_t[:, :, None]
    coeff = dalpha_t / (vocab_size * alpha_t)
    x_eq_xt = (x0 == xt).float()
    x_neq_xt = 1 - x_eq_xt
    xbar_xt = (1 - alpha_t) + vocab_size * alpha_t * x_eq_xt
    xbar_theta_xt = torch.gather(x_bar_theta, -1, xt.unsqueeze(-1)).squeeze(-1)
    xbar_theta_x = torch.gather(x_bar_theta, -1, x0.unsqueeze(-1)).squeeze(-1)
    term1 = vocab_size * (1 / xbar_xt - 1 / xbar_theta_xt)
    const = (1 - alpha_t) / (vocab_size * alpha_t + 1 - alpha_t)
    term2_coefs = x_eq_xt * const + x_neq_xt
    term2_offset = ((vocab_size - 1) * const * x_eq_xt - (1 / const) * x_neq_xt) * const.log()
    term2_theta = -term2_coefs * (x_bar_theta.log().sum(-1) - vocab_size * xbar_theta_xt.log())
    term2_theta = (
        term2_theta - vocab_size * alpha_t / (1 - alpha_t) * (xbar_theta_x.log() - xbar_theta_xt.log()) * x_neq_xt
    )
    return coeff * (term1 - (term2_theta + term2_offset))


def duo_posterior(x0, xt, alpha_s, alpha_t, vocab_size):
    """``DUO_BASE._posterior_from_x0`` (algo.py) in float64; ``alpha_*`` scalars."""
    alpha_ts = alpha_t / alpha_s
    d_alpha = alpha_s - alpha_t
    xt_one_hot = F.one_hot(xt, vocab_size).to(torch.float64)
    return (
        alpha_t * vocab_size * x0 * xt_one_hot
        + (alpha_ts - alpha_t) * xt_one_hot
        + d_alpha * x0
        + (1 - alpha_ts) * (1 - alpha_s) / vocab_size
    ) / (alpha_t * vocab_size * torch.gather(x0, -1, xt[..., None]) + (1 - alpha_t))


def bd3_eval_nelbo(model_output, x0, xt, t, ignore_bos: bool):
    """BD3-LM's validation loss (diffusion.py): ``_forward_pass_diffusion`` with ``loss_scale = -1/t``
    (``compute_loss_scaling_and_move_chance``), ``xt[:, 0] = x0[:, 0]`` under ``ignore_bos``, then ``_loss`` outside
    training: ``attention_mask[:, 0] = 0``.  ``model_output``: SUBS log-probabilities ``(B, L, V)`` (0 at an
    unmasked position's own token); ``t``: ``(B, L)``.  Returns ``(nll summed per sequence, tokens counted)``."""
    if ignore_bos:
        xt = xt.clone()
        xt[:, 0] = x0[:, 0]
    log_p_theta = torch.gather(model_output, -1, x0[:, :, None]).squeeze(-1)
    loss = (-1 / t) * log_p_theta
    mask = torch.ones_like(x0, dtype=torch.float64)
    if ignore_bos:
        mask[:, 0] = 0
    return (loss * mask).sum(-1), mask.sum(-1)


def mdlm_ar_nll(logits, x0, mask_index):
    """MDLM's AR ``_loss``: ``logits`` are the backbone's outputs for ``x0[:, :-1]``; ``AR.forward`` sets the mask
    logit to -1000 and log-softmaxes; the loss is ``-log p(x0[:, 1:])`` over ``attention_mask[:, 1:]``.  Returns
    ``(nll summed per sequence, tokens counted)``."""
    logits = logits.clone()
    logits[:, :, mask_index] = -1000.0
    logprobs = logits.log_softmax(-1)
    loss = -logprobs.gather(-1, x0[:, 1:, None])[:, :, 0]
    return loss.double().sum(-1), torch.full((len(x0),), x0.shape[1] - 1.0, dtype=torch.float64)


def sedd_analytic_probs(log_score, x, dsigma, mask_index):
    """MDLM's ``_analytic_update`` for SEDD before the draw: ``score = exp(log_score)`` (its mask column of unmasked
    rows as the network gives it), ``_staggered_score`` (the sum over every column, the mask's included), times
    ``_transp_transition``; returns the per-position distribution (rows normalised), float64."""
    score = log_score.double().exp()
    dsigma = torch.as_tensor(dsigma, dtype=torch.float64).reshape(-1)
    extra_const = (1 - dsigma.exp())[:, None] * score.sum(dim=-1)
    stag = score * dsigma.exp()[:, None, None]
    stag[..., mask_index] += extra_const
    V = score.shape[-1]
    edge = torch.exp(-dsigma)[:, None, None] * F.one_hot(x, num_classes=V).double()
    edge += torch.where(x == mask_index, 1 - torch.exp(-dsigma)[:, None], torch.zeros((), dtype=torch.float64))[
        ..., None
    ]
    probs = (stag * edge).clamp(min=0)
    return probs / probs.sum(-1, keepdim=True)


def mdlm_ar_sampler(forward, bsz: int, length: int, bos: int, noise):
    """MDLM's ``_ar_sampler``: ``x[:, 0]`` = BOS, then for ``i < length - 1`` the argmax of the last output of
    ``forward(x[:, :i + 1])`` (``AR.forward``'s logits, the mask at -1000) plus the precomputed Gumbel noise
    ``noise[:, i]`` ``(bsz, length - 1, V)`` is written at ``i + 1``: BOS and ``length - 1`` drawn tokens."""
    x = torch.zeros((bsz, length), dtype=torch.long)
    x[:, 0] = bos
    for i in range(length - 1):
        next_logits = forward(x[:, : i + 1])[:, -1]
        x[:, i + 1] = (next_logits + noise[:, i]).argmax(-1)
    return x


def edlm_ar_energy(ar_output, xt, x0, log_p_x0, mask_index, carry_over: bool = True, neg_infinity: float = -1e6):
    """EDLM's AR energy (``ebm_forward``, ``ebm_backbone: ar``): ``ar_output`` is the AR backbone's output for
    ``x0[:, :-1]``; the mask column at ``neg_infinity``, normalised by ``logsumexp``; with ``carry_over`` every
    output position ``j`` whose ``xt[:, 1:]`` token is unmasked becomes a point mass on it; ``energy_ar`` sums the
    rows gathered at ``x0[:, 1:]``, ``energy_diffusion`` sums ``log_p_x0`` gathered at ``x0`` over all positions.
    Returns ``-energy_ar + energy_diffusion`` ``(B,)``."""
    output = ar_output.clone()
    output[:, :, mask_index] = neg_infinity
    logits = output - torch.logsumexp(output, dim=-1, keepdim=True)
    xt_out, x0_out = xt[:, 1:], x0[:, 1:]
    if carry_over:
        unmasked = xt_out != mask_index
        logits[unmasked] = neg_infinity
        logits[unmasked, xt_out[unmasked]] = 0
    energy_ar = logits.gather(-1, x0_out[:, :, None])[:, :, 0].sum(-1)
    energy_diffusion = log_p_x0.gather(-1, x0[:, :, None])[:, :, 0].sum(-1)
    return -energy_ar + energy_diffusion
