"""Tiny stand-ins of the released MDLM-family checkpoints, written in the upstream formats
(``docs/released-checkpoints.md``), for the tests and for the ``gpu-smoke`` profile's rule ``released_standin``
(the whole DAG with no download: each released source is replaced by a stand-in of the same format, sized to
the project's tokenizer).

Formats written (as the authors publish them):

* ``hf``: ``config.json`` with the upstream keys (MDLM/BD3-LM/Duo: ``hidden_dim``, ``n_blocks``, ``n_heads``,
  ``cond_dim``, ``vocab_size``, ``model_length``, ``time_conditioning``, ``auto_map``, ...) and
  ``model.safetensors`` with the keys under ``backbone.`` (BD3-LM adds ``sampling_eps_min``/``_max``).
* ``sedd_hub``: SEDD's ``PyTorchModelHubMixin`` folder: the hydra config as ``config.json`` and
  ``pytorch_model.bin`` with unprefixed keys.
* ``ckpt``: a Lightning checkpoint: ``state_dict`` (``backbone.*``), ``ema`` (``decay``, ``num_updates``,
  ``shadow_params``), ``hyper_parameters`` holding an object of a class the loader cannot import.

The weights are random (every tensor non-trivial, adaLN, norms and biases included): a stand-in tests the
formats, the loaders and the workflow, not the quality of a model.  One exception, so that the workflow can run on a
Duo stand-in as on a trained Duo: its output bias for ``[PAD]`` (the last id, a state of upstream's process that never
occurs in the data) is :data:`DUO_PAD_BIAS`, so the state is (almost) never kept in a sample, as after training.  With
random weights it is kept in about one token in ``V``, written ``[PAD]`` in the Gen PPL text, and a word-level
evaluator (the toy world's) cannot read that word.

And for the paper profile's Hugging Face loading paths (:mod:`unie.models.hf`): :func:`tiny_llama`, a 2-layer
transformers Llama, and :func:`write_hf_standin`, a folder with it and a tokenizer saved with ``save_pretrained``:
it loads offline as a LLaDA-style backbone (``load_hf_dllm(style="llada")``, the tokenizer's own mask) and as a
causal proxy (``load_hf_causal``).  A causal Llama stays causal under the DLLM wrapper; it stands in for the
checkpoint's format and shapes, not for a bidirectional model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

from .dit import DiT, DiTConfig

TINY = dict(d_model=32, n_layers=2, n_heads=4, cond_dim=16)
DUO_PAD_BIAS = -30.0  # a Duo stand-in's output bias for [PAD]: probability ~e^-30 relative to the other states

ARCH = {  # kind -> the DiT flags of the upstream network
    "mdlm": dict(adaln=True, time_conditioning=False, causal=False),
    "bd3lm": dict(adaln=True, time_conditioning=False, causal=False, block_size=4),
    "duo": dict(adaln=True, time_conditioning=True, causal=False),
    "sedd": dict(adaln=True, time_conditioning=True, causal=False),
    "ar": dict(adaln=False, time_conditioning=False, causal=True),
}
# kind -> the formats a stand-in may be written in (those the authors publish it in)
FORMATS = {
    "mdlm": ("hf", "ckpt"),
    "bd3lm": ("hf",),
    "duo": ("hf", "ckpt"),
    "sedd": ("sedd_hub", "ckpt"),
    "ar": ("ckpt",),
}


def random_state(
    kind: str, seed: int, vocab: int, scale: float = 1.0, arch: dict | None = None, block_size: int | None = None
) -> tuple[dict, DiTConfig]:
    """Random weights with the upstream key names for a tokenizer of ``vocab`` ids whose last is the mask (Duo's
    network is as wide: upstream's GPT-2 + ``[PAD]``, ``[PAD]`` where the mask is; ``unie.methods.released_methods.DUO_PAD_ID``)."""
    flags = dict(ARCH[kind])
    if block_size is not None and kind == "bd3lm":
        flags["block_size"] = block_size
    cfg = DiTConfig(vocab_size=vocab, **(arch or TINY), **flags)
    g = torch.Generator().manual_seed(seed)
    state = {}
    for k, v in DiT(cfg).state_dict().items():
        if k.endswith("inv_freq"):
            state[k] = v.clone()
        elif k.endswith("norm1.weight") or k.endswith("norm2.weight") or k.endswith("norm_final.weight"):
            state[k] = 1.0 + 0.2 * torch.randn(v.shape, generator=g)
        else:
            state[k] = scale * torch.randn(v.shape, generator=g) / math.sqrt(max(v.shape[-1], 1))
    if kind == "duo":  # [PAD] (the last id) never in the data: a trained Duo gives it ~0 (module doc)
        state["output_layer.linear.bias"][-1] = DUO_PAD_BIAS
    return state, cfg


def save_hf(folder, kind: str, state: dict, cfg: DiTConfig, auto_map: bool = True, eps=(0.3, 0.8)) -> Path:
    """An MDLM/BD3-LM/Duo HF folder: ``config.json`` + ``model.safetensors`` (keys under ``backbone.``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    conf = {
        "model_type": kind,
        "architectures": [kind.upper()],
        "vocab_size": cfg.vocab_size,
        "model_length": cfg.max_len,
        "hidden_dim": cfg.d_model,
        "cond_dim": cfg.cond_dim,
        "n_blocks": cfg.n_layers,
        "n_heads": cfg.n_heads,
        "dropout": 0.1,
        "time_conditioning": cfg.time_conditioning,
        "return_dict": False,
        "torch_dtype": "float32",
    }
    if auto_map:
        conf["auto_map"] = {
            "AutoConfig": f"configuration_{kind}.{kind.upper()}Config",
            "AutoModelForMaskedLM": f"modeling_{kind}.{kind.upper()}",
        }
    tensors = {f"backbone.{k}": v.contiguous() for k, v in state.items()}
    if kind == "bd3lm":
        conf.update(
            block_size=cfg.block_size,
            cross_attn=True,
            adaln=True,
            attn_backend="sdpa",
            causal=False,
            var_min=True,
            sampling_eps_min=eps[0],
            sampling_eps_max=eps[1],
        )
        tensors["sampling_eps_min"] = torch.tensor(eps[0])
        tensors["sampling_eps_max"] = torch.tensor(eps[1])
    (folder / "config.json").write_text(json.dumps(conf, indent=2))
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def save_sedd_hub(folder, state: dict, cfg: DiTConfig) -> Path:
    """SEDD's ``PyTorchModelHubMixin`` folder: hydra config + ``pytorch_model.bin``, unprefixed keys."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    conf = {
        "tokens": cfg.vocab_size - 1,
        "graph": {"type": "absorb", "file": "data", "report_all": False},
        "noise": {"type": "loglinear", "sigma_min": 1e-4, "sigma_max": 20},
        "model": {
            "name": "small",
            "type": "ddit",
            "hidden_size": cfg.d_model,
            "cond_dim": cfg.cond_dim,
            "length": cfg.max_len,
            "n_blocks": cfg.n_layers,
            "n_heads": cfg.n_heads,
            "scale_by_sigma": True,
            "dropout": 0.1,
        },
    }
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
    ckpt = {
        "epoch": 3,
        "global_step": 1000,
        "pytorch-lightning_version": "2.2.1",
        "state_dict": {f"backbone.{k}": v for k, v in raw.items()},
        "loops": {"fit_loop": {}},
        "hyper_parameters": {"config": HydraConfigStandIn({"model": "small"})},
    }
    if ema is not None:
        ckpt["ema"] = {
            "decay": 0.9999,
            "num_updates": 1000,
            "shadow_params": [v for k, v in ema.items() if not k.endswith("inv_freq")],
        }
    torch.save(ckpt, path)
    return path


def standin_path(folder, kind: str, fmt: str) -> Path:
    """Where :func:`write_standin` puts a stand-in inside ``folder``: the folder itself (HF formats) or
    ``folder/<kind>.ckpt`` (a Lightning checkpoint)."""
    return Path(folder) / f"{kind}.ckpt" if fmt == "ckpt" else Path(folder)


def write_standin(
    folder,
    kind: str,
    fmt: str,
    tokenizer_info: dict,
    seed: int = 0,
    arch: dict | None = None,
    block_size: int | None = None,
) -> Path:
    """A tiny random ``kind`` checkpoint in format ``fmt`` (``hf``, ``sedd_hub`` or ``ckpt``; :data:`FORMATS`)
    for the tokenizer ``tokenizer_info`` (its mask must be its last id, as in GPT-2 + the appended mask),
    written under ``folder``; returns the path to give the loader (:func:`standin_path`)."""
    if kind not in FORMATS:
        raise ValueError(f"unknown released kind {kind!r} (one of {sorted(FORMATS)})")
    if fmt not in FORMATS[kind]:
        raise ValueError(f"a {kind} stand-in is written as {' or '.join(FORMATS[kind])} (as published), not {fmt!r}")
    V = int(tokenizer_info["vocab_size"])
    if tokenizer_info["mask_id"] != V - 1:
        raise ValueError(
            f"the released models append the mask as the last id; the tokenizer has mask "
            f"{tokenizer_info['mask_id']} of {V}"
        )
    state, cfg = random_state(kind, seed, V, arch=arch, block_size=block_size)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "hf":
        save_hf(folder, kind, state, cfg)
    elif fmt == "sedd_hub":
        save_sedd_hub(folder, state, cfg)
    else:
        raw, _ = random_state(kind, seed + 1, V, arch=arch, block_size=block_size)  # EMA differs from the raw weights
        save_lightning(standin_path(folder, kind, fmt), raw, ema=state)
    return standin_path(folder, kind, fmt)


def tiny_llama(vocab: int, seed: int = 0, max_positions: int = 64):
    """A 2-layer transformers Llama (hidden 32, 2 heads) with ``vocab`` rows, in eval mode, its weights drawn from
    ``seed``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
    )
    return LlamaForCausalLM(cfg).eval()


def write_hf_standin(folder, tokenizer, seed: int = 0, max_positions: int = 64) -> Path:
    """A tiny random Hugging Face checkpoint in ``folder`` for ``tokenizer`` (a :class:`unie.data.tokenizer.Tokenizer`
    with a mask token): the tokenizer's ``save_pretrained`` files and a :func:`tiny_llama` of its size (module doc).
    Returns ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.hf.save_pretrained(folder)
    tiny_llama(tokenizer.vocab_size, seed, max_positions).save_pretrained(folder)
    return folder
