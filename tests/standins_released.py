"""Tiny stand-ins of the released checkpoints, saved in the upstream formats, and an independent reference
forward pass of the upstream DiT (written from the upstream equations over the state dict, not with
:mod:`unie.models.dit`), so a test compares our loader + module against the upstream math.

Formats written (as the authors publish them; ``docs/released-checkpoints.md``):

* ``hf``: ``config.json`` with the upstream keys (MDLM/BD3-LM/Duo: ``hidden_dim``, ``n_blocks``, ``n_heads``,
  ``cond_dim``, ``vocab_size``, ``model_length``, ``time_conditioning``, ``auto_map``, ...) and
  ``model.safetensors`` with the keys under ``backbone.`` (BD3-LM adds ``sampling_eps_min``/``_max``).
* ``sedd_hub``: SEDD's ``PyTorchModelHubMixin`` folder: the hydra config as ``config.json`` and
  ``pytorch_model.bin`` with unprefixed keys.
* ``ckpt``: a Lightning checkpoint: ``state_dict`` (``backbone.*``), ``ema`` (``decay``, ``num_updates``,
  ``shadow_params``), ``hyper_parameters`` holding an object of a class the loader cannot import.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from unie.models.dit import DiT, DiTConfig

V = 51  # 50 real tokens + the mask (last id), like GPT-2 + mask
MASK = V - 1
BOS = 49  # bos = eos, a real token (GPT-2's convention)
TINY = dict(d_model=32, n_layers=2, n_heads=4, cond_dim=16)
TOKENIZER = {"vocab_size": V, "mask_id": MASK, "bos_id": BOS, "eos_id": BOS}

ARCH = {  # kind -> the DiT flags of the upstream network
    "mdlm": dict(adaln=True, time_conditioning=False, causal=False),
    "bd3lm": dict(adaln=True, time_conditioning=False, causal=False, block_size=4),
    "duo": dict(adaln=True, time_conditioning=True, causal=False),
    "sedd": dict(adaln=True, time_conditioning=True, causal=False),
    "ar": dict(adaln=False, time_conditioning=False, causal=True),
}


def random_state(kind: str, seed: int, scale: float = 1.0) -> tuple[dict, DiTConfig]:
    """Random weights with the upstream key names (every tensor non-trivial: adaLN, norms and biases too)."""
    vocab = V - 1 if kind == "duo" else V  # Duo has no mask token
    cfg = DiTConfig(vocab_size=vocab, **TINY, **ARCH[kind])
    g = torch.Generator().manual_seed(seed)
    state = {}
    for k, v in DiT(cfg).state_dict().items():
        if k.endswith("inv_freq"):
            state[k] = v.clone()
        elif k.endswith("norm1.weight") or k.endswith("norm2.weight") or k.endswith("norm_final.weight"):
            state[k] = 1.0 + 0.2 * torch.randn(v.shape, generator=g)
        else:
            state[k] = scale * torch.randn(v.shape, generator=g) / math.sqrt(max(v.shape[-1], 1))
    return state, cfg


# ---------------------------------------------------------------------- the upstream math, from the state dict
def _ln(x, w):
    return F.layer_norm(x.float(), [x.shape[-1]]) * w[None, None, :]


def _rotary(L_positions: torch.Tensor, inv_freq: torch.Tensor):
    freqs = torch.einsum("i,j->ij", L_positions.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _timestep_embedding(t, dim=256, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(0, half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def reference_logits(state: dict, cfg: DiTConfig, x: torch.Tensor, sigma=None, mask=None, positions=None):
    """Upstream ``DIT.forward`` / ``AR.forward`` (before any parameterisation): ``(B, L, V)`` raw outputs.

    ``sigma`` is zeroed when the model is not time-conditioned (``_process_sigma``); ``mask`` bool
    ``(L, L)`` (True = attend, BD3-LM's ``block_diff_mask``); ``positions`` the rotary positions."""
    B, L = x.shape
    H = cfg.n_heads
    h = state["vocab_embed.embedding"][x]
    c = None
    if cfg.adaln:
        s = sigma if cfg.time_conditioning else torch.zeros(B)
        t = _timestep_embedding(s)
        t = t @ state["sigma_map.mlp.0.weight"].T + state["sigma_map.mlp.0.bias"]
        t = F.silu(t) @ state["sigma_map.mlp.2.weight"].T + state["sigma_map.mlp.2.bias"]
        c = F.silu(t)
    pos = torch.arange(L) if positions is None else positions
    cos, sin = _rotary(pos, state["rotary_emb.inv_freq"])
    for i in range(cfg.n_layers):
        p = lambda n: state[f"blocks.{i}.{n}"]
        if c is not None:
            mod = (c @ p("adaLN_modulation.weight").T + p("adaLN_modulation.bias"))[:, None]
            sh1, sc1, g1, sh2, sc2, g2 = mod.chunk(6, dim=2)
        else:
            sh1 = sc1 = sh2 = sc2 = torch.zeros(())
            g1 = g2 = torch.ones(())
        a = _ln(h, p("norm1.weight")) * (1 + sc1) + sh1
        qkv = (a @ p("attn_qkv.weight").T).reshape(B, L, 3, H, -1)  # 'b s (three h d) -> b s three h d'
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # (B, L, H, Dh)
        q = q * cos[None, :, None] + _rotate_half(q) * sin[None, :, None]
        k = k * cos[None, :, None] + _rotate_half(k) * sin[None, :, None]
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        if cfg.causal:
            scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), -math.inf)
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        o = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(B, L, -1)
        h = h + g1 * (o @ p("attn_out.weight").T)
        m = _ln(h, p("norm2.weight")) * (1 + sc2) + sh2
        m = F.gelu(m @ p("mlp.0.weight").T + p("mlp.0.bias"), approximate="tanh")
        h = h + g2 * (m @ p("mlp.2.weight").T + p("mlp.2.bias"))
    out = _ln(h, state["output_layer.norm_final.weight"])
    if c is not None:
        mod = (c @ state["output_layer.adaLN_modulation.weight"].T + state["output_layer.adaLN_modulation.bias"])[:, None]
        shift, scale = mod.chunk(2, dim=2)
        out = out * (1 + scale) + shift
    return out @ state["output_layer.linear.weight"].T + state["output_layer.linear.bias"]


def upstream_block_diff_mask(n: int, block_size: int) -> torch.Tensor:
    """BD3-LM's ``block_diff_mask`` over ``[xt ; x0]`` (2n x 2n), transcribed from its three clauses."""
    q, kv = torch.arange(2 * n)[:, None], torch.arange(2 * n)[None, :]
    x0q, x0kv = q >= n, kv >= n
    bq = torch.where(x0q, (q - n) // block_size, q // block_size)
    bkv = torch.where(x0kv, (kv - n) // block_size, kv // block_size)
    return ((bq == bkv) & (x0q == x0kv)) | ((bq > bkv) & x0kv & ~x0q) | ((bq >= bkv) & x0kv & x0q)


# ---------------------------------------------------------------------- savers (upstream formats)
def save_hf(folder, kind: str, state: dict, cfg: DiTConfig, auto_map: bool = True, eps=(0.3, 0.8)) -> Path:
    """An MDLM/BD3-LM/Duo HF folder: ``config.json`` + ``model.safetensors`` (keys under ``backbone.``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    conf = {"model_type": kind, "architectures": [kind.upper()], "vocab_size": cfg.vocab_size,
            "model_length": 1024, "hidden_dim": cfg.d_model, "cond_dim": cfg.cond_dim, "n_blocks": cfg.n_layers,
            "n_heads": cfg.n_heads, "dropout": 0.1, "time_conditioning": cfg.time_conditioning,
            "return_dict": False, "torch_dtype": "float32"}
    if auto_map:
        conf["auto_map"] = {"AutoConfig": f"configuration_{kind}.{kind.upper()}Config",
                            "AutoModelForMaskedLM": f"modeling_{kind}.{kind.upper()}"}
    tensors = {f"backbone.{k}": v.contiguous() for k, v in state.items()}
    if kind == "bd3lm":
        conf.update(block_size=cfg.block_size, cross_attn=True, adaln=True, attn_backend="sdpa", causal=False,
                    var_min=True, sampling_eps_min=eps[0], sampling_eps_max=eps[1])
        tensors["sampling_eps_min"] = torch.tensor(eps[0])
        tensors["sampling_eps_max"] = torch.tensor(eps[1])
    (folder / "config.json").write_text(json.dumps(conf, indent=2))
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def save_sedd_hub(folder, state: dict, cfg: DiTConfig) -> Path:
    """SEDD's ``PyTorchModelHubMixin`` folder: hydra config + ``pytorch_model.bin``, unprefixed keys."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    conf = {"tokens": cfg.vocab_size - 1, "graph": {"type": "absorb", "file": "data", "report_all": False},
            "noise": {"type": "loglinear", "sigma_min": 1e-4, "sigma_max": 20},
            "model": {"name": "small", "type": "ddit", "hidden_size": cfg.d_model, "cond_dim": cfg.cond_dim,
                      "length": 1024, "n_blocks": cfg.n_layers, "n_heads": cfg.n_heads, "scale_by_sigma": True,
                      "dropout": 0.1}}
    (folder / "config.json").write_text(json.dumps(conf))
    torch.save({k: v.contiguous() for k, v in state.items()}, folder / "pytorch_model.bin")
    return folder


class HydraConfigStandIn:
    """Plays omegaconf's DictConfig in ``hyper_parameters``: a class the loader must not need to import."""

    def __init__(self, d):
        self.d = d


def save_lightning(path, raw: dict, ema: dict | None) -> Path:
    """A Lightning checkpoint: ``state_dict`` = the raw weights under ``backbone.``, ``ema.shadow_params`` =
    ``ema``'s parameters in ``backbone.parameters()`` order (buffers excluded)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ckpt = {"epoch": 3, "global_step": 1000, "pytorch-lightning_version": "2.2.1",
            "state_dict": {f"backbone.{k}": v for k, v in raw.items()},
            "loops": {"fit_loop": {}}, "hyper_parameters": {"config": HydraConfigStandIn({"model": "small"})}}
    if ema is not None:
        ckpt["ema"] = {"decay": 0.9999, "num_updates": 1000,
                       "shadow_params": [v for k, v in ema.items() if not k.endswith("inv_freq")]}
    torch.save(ckpt, path)
    return path
