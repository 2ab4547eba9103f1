"""init_from between architectures that differ only in time conditioning (an MDLM's weights for SEDD/Duo)."""

from __future__ import annotations

import pytest
import torch

from unie.core.options import ModelConfig
from unie.methods.mdlm import MDLM
from unie.methods.sedd import SEDD
from unie.models.checkpoint import CheckpointError
from unie.models.transformer import Transformer
from unie.pipeline.model_files import warm_start


def test_warm_start_copies_the_shared_backbone_and_keeps_conditioning_fresh(tok_info):
    torch.manual_seed(0)
    mdlm = Transformer(ModelConfig(vocab_size=tok_info["vocab_size"], d_model=16, n_layers=2, n_heads=2, max_len=8))
    cfg = ModelConfig(vocab_size=tok_info["vocab_size"], d_model=16, n_layers=2, n_heads=2, max_len=8, cond_dim=8)
    sedd = Transformer(cfg)
    fresh_ada = sedd.blocks[0].ada.weight.clone()
    logs = []
    warm_start(sedd, mdlm, {"model": mdlm.cfg.__dict__}, cfg, SEDD(tok_info), "mdlm", logs.append)
    assert torch.equal(sedd.embed.weight, mdlm.embed.weight)
    assert torch.equal(sedd.blocks[1].attn.qkv.weight, mdlm.blocks[1].attn.qkv.weight)
    assert torch.equal(sedd.head.weight, mdlm.head.weight)
    assert torch.equal(sedd.blocks[0].ada.weight, fresh_ada) and not sedd.blocks[0].ada.weight.any()
    assert "blocks.0.ada.weight" in logs[0] and "blocks.0.ln1.weight" in logs[0]  # fresh / not used
    other = ModelConfig(vocab_size=tok_info["vocab_size"], d_model=32, n_layers=2, n_heads=2, max_len=8, cond_dim=8)
    with pytest.raises(CheckpointError, match="cond_dim"):
        warm_start(Transformer(other), mdlm, {"model": mdlm.cfg.__dict__}, other, MDLM(tok_info), "mdlm", print)


def test_retrained_init_model_is_not_resumed_from_a_stale_checkpoint(tmp_path):
    """A checkpoint left by a run that started from other initial weights must not be resumed: the resume
    signature holds a hash of the init_from weights (a retrained init model retrains what starts from it)."""
    import torch
    from safetensors.torch import save_file

    from unie.pipeline.model_files import init_fingerprint

    d = tmp_path / "init"
    d.mkdir()
    save_file({"w": torch.zeros(3)}, str(d / "model.safetensors"))
    a = init_fingerprint(d)
    save_file({"w": torch.ones(3)}, str(d / "model.safetensors"))
    assert init_fingerprint(d) != a and init_fingerprint(None) is None
