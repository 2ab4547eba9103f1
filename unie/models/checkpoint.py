"""Model checkpoints: ``model.safetensors`` + ``config.json`` in one directory.

``config.json`` holds the :class:`ModelConfig`, the method that trained the weights (``mdlm``, ``ar``,
...), the tokenizer fingerprint (so a mismatch is caught on load, not as garbage samples) and any
method-specific metadata.  Loading never unpickles: weights come from safetensors.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..core.config import ModelConfig, from_dict
from ..core.registry import BACKBONES


class CheckpointError(RuntimeError):
    pass


def save_model(net: torch.nn.Module, out_dir, method: str, tokenizer_info: dict, extra: dict | None = None) -> None:
    """Write ``out_dir/model.safetensors`` and ``out_dir/config.json`` (atomically, config last)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in net.state_dict().items()}
    tmp = out / "model.safetensors.tmp"
    save_file(state, str(tmp))
    os.replace(tmp, out / "model.safetensors")
    meta = {
        "backbone": getattr(net, "registry_name", "transformer"),
        "model": dataclasses.asdict(net.cfg),
        "method": method,
        "tokenizer": tokenizer_info,
        "extra": extra or {},
    }
    tmp = out / "config.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=True))
    os.replace(tmp, out / "config.json")


def read_meta(ckpt_dir) -> dict:
    p = Path(ckpt_dir) / "config.json"
    if not p.exists():
        raise CheckpointError(f"missing checkpoint: {p} does not exist (train the model first)")
    return json.loads(p.read_text())


def load_model(ckpt_dir, device="cpu", tokenizer_info: dict | None = None, expect_method: str | tuple | None = None):
    """Rebuild the network saved in ``ckpt_dir``; returns ``(net, meta)``.

    Raises :class:`CheckpointError` if the directory is incomplete, the method is not the one
    expected, or ``tokenizer_info`` disagrees with the tokenizer the weights were trained with.
    """
    meta = read_meta(ckpt_dir)
    wpath = Path(ckpt_dir) / "model.safetensors"
    if not wpath.exists():
        raise CheckpointError(f"missing checkpoint weights: {wpath}")
    if expect_method is not None:
        allowed = (expect_method,) if isinstance(expect_method, str) else tuple(expect_method)
        if meta["method"] not in allowed:
            raise CheckpointError(f"{ckpt_dir}: trained as {meta['method']!r}, expected one of {allowed}")
    if tokenizer_info is not None:
        check_tokenizer_match(meta["tokenizer"], tokenizer_info, str(ckpt_dir))
    cfg = from_dict(ModelConfig, meta["model"], "checkpoint model")
    net = BACKBONES[meta.get("backbone", "transformer")](cfg)
    state = load_file(str(wpath))
    missing, unexpected = net.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise CheckpointError(f"{wpath}: missing keys {missing}, unexpected keys {unexpected}")
    return net.to(device).eval(), meta


def check_tokenizer_match(saved: dict, current: dict, where: str) -> None:
    for key in ("vocab_size", "mask_id", "bos_id", "eos_id", "fingerprint"):
        if key in saved and key in current and saved[key] != current[key]:
            raise CheckpointError(
                f"tokenizer mismatch for {where}: {key} is {saved[key]!r} in the checkpoint but {current[key]!r} now"
            )
