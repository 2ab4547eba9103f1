"""EDLM's energy network ``E_phi(x0, xt)`` (Xu et al.; ``docs/baselines.md``, EDLM).

A copy of the denoiser's backbone that reads both the noisy state and a clean candidate:
``[emb(xt) ; emb(x0)]`` ``(B, L, 2H)`` -> ``Linear(2H -> H)`` -> the transformer blocks and final LayerNorm ->
mean over positions -> ``Linear(H -> H)``, ReLU, ``Linear(H -> 1)``: one scalar energy per sequence.
(EDLM's backbone is MDLM's DiT with time conditioning; ours is our MDLM's, which has none: with SUBS the
mask fraction of ``xt`` carries the time.)  The backbone is the denoiser's class: our
:class:`~unie.models.transformer.Transformer` for a :class:`ModelConfig`, the released
:class:`~unie.models.dit.DiT` for a :class:`~unie.models.dit.DiTConfig` (an energy network fine-tuned from
the released MDLM, whose constant adaLN modulation it keeps); both give ``embed`` and ``hidden``.

Initialised from the denoiser (``init_from``): the backbone takes its weights; the input merge starts as
``[I | N(0, 0.02)]`` (reads ``xt`` as the denoiser did, plus a small random view of ``x0``) and the last
output layer at zero, so training starts from ``E = 0`` (NCE loss ``2 log 2``).  (Zeroing the ``x0`` half
as well would be a saddle: no gradient could ever reach it.)
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..core.options import ModelConfig
from ..core.registry import BACKBONES
from .dit import DiTConfig, backbone_for
from .transformer import Transformer


@BACKBONES.register("energy_net")
class EnergyNet(nn.Module):
    """``forward(xt (N, L), x0 (N, L)) -> (N,)`` energies (float32)."""

    registry_name = "energy_net"
    config_class = None  # the saved config says which: ModelConfig, or DiTConfig (checkpoint ``arch: dit``)

    def __init__(self, cfg: ModelConfig | DiTConfig):
        super().__init__()
        timed = cfg.time_conditioning if isinstance(cfg, DiTConfig) else cfg.cond_dim
        if cfg.causal or timed:
            raise ValueError("the energy network is a bidirectional backbone without time conditioning")
        self.cfg = cfg
        d = cfg.d_model
        self.backbone = backbone_for(cfg)
        self.merge = nn.Linear(2 * d, d, bias=False)
        self.out = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 1))
        with torch.no_grad():
            nn.init.normal_(self.merge.weight, std=0.02)
            self.merge.weight[:, :d] = torch.eye(d)
            self.out[2].weight.zero_()
            self.out[2].bias.zero_()

    @property
    def device(self):
        return self.merge.weight.device

    def load_backbone(self, denoiser_net: Transformer | nn.Module) -> None:
        """Start from a trained denoiser's weights (same :class:`ModelConfig`)."""
        self.backbone.load_state_dict(denoiser_net.state_dict())

    def forward(self, xt: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        emb = self.backbone.embed
        h = self.merge(torch.cat([emb(xt), emb(x0)], dim=-1))
        h = self.backbone.hidden(inputs_embeds=h).mean(1)
        return self.out(h).squeeze(-1).float()
