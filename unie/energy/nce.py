"""Algorithm 1: fine-tuning with noise-contrastive estimation (EDLM-NCE, Uni-EDLM-NCE).

Positives ``(x0, xs, xt)`` from data (``x0 -> xt`` by forward masking, ``xs ~ q(xs | xt, x0)``);
negatives ``x̂0 ~ p_theta(x0 | xt)`` (one draw per masked position) and ``x̂s`` derived from ``x̂0`` and
``xt`` the same way.  Loss (Eq. nce_loss): ``softplus(E_pos) + softplus(-E_neg)`` (log-sigmoid form, never
``log(sigmoid + 1e-8)``), so data gets low energy.  What is trained is the option ``train``:

* ``energy_net`` (EDLM's own NCE, the EDLM-NCE rows; ``docs/baselines.md``): a separate energy
  network ``E_phi(x0, xt)`` (:class:`unie.models.energy_net.EnergyNet`, a copy of the denoiser's backbone
  reading ``xt`` and ``x0``), with ``p_theta`` frozen (option ``dlm``) and no AR at all.  Its energy is
  the ``ebm`` energy; its likelihood is EDLM's plug-in (:mod:`unie.energy.corrected_nelbo`).
* ``dlm`` (the Uni-E paper's text, Uni-EDLM-NCE): fine-tune ``p_theta`` with the AR proxy frozen (option
  ``proxy``), for the energy ``energy`` read with ``ar_context``.  Beware: for Ind-E,
  ``p_theta · e^{-E_ind} = p_AR`` does not depend on theta, so this objective can only move the proposal,
  and it is minimised by collapsing it.  Hence the selection guard below.
* ``ar`` (the released code): fine-tune the AR proxy with ``p_theta`` frozen (option ``dlm``).

**Checkpoint selection** on a held-out dev split (the train domain's ``valid``, disjoint from Table 1's
``test``): the lowest dev NCE loss among the admissible checkpoints.  For ``train: dlm`` a checkpoint is
admissible only if ``p_theta``'s dev NELBO per token (``guard``, the same masks and times at every
evaluation, so the comparison is paired) is not above the initial model's: a lower NCE loss bought by
making ``p_theta`` a worse model of the data, which is what a collapsing proposal does, cannot be
selected.  The initial checkpoint is always admissible.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.gumbel import gumbel_argmax, uniform
from ..core.options import ConfigError, make_options
from ..core.registry import ENERGIES, METHODS
from ..core.schedule import antithetic_t, make_schedule
from ..data.tokenizer import blocked_ids
from ..methods.ar import ARModel
from ..methods.mdlm import MDLMDenoiser, nelbo, q_xt, subs_logp, transition
from ..models.dit import backbone_for
from ..models.energy_net import EnergyNet
from .energies import AR_CONTEXTS
from .energies import energy as energy_fn

TRAINS = ("energy_net", "dlm", "ar")


@dataclass(frozen=True)
class NCEOptions:
    """What Algorithm 1 trains (``train``), for which ``energy`` and ``ar_context`` (``train: dlm|ar``); the
    frozen partners' model names (``proxy`` for ``train: dlm``; ``dlm`` for ``train: ar|energy_net``); the
    forward process (``schedule``, ``eps``, ``t_eps``)."""

    train: str = "dlm"
    energy: str = "uni"
    ar_context: str | None = "teacher_forced"
    proxy: str | None = None
    dlm: str | None = None
    schedule: str = "loglinear"
    eps: float = 1e-3
    t_eps: float = 1e-3

    def __post_init__(self):
        if self.train not in TRAINS:
            raise ConfigError(f"nce train must be one of {', '.join(TRAINS)}, got {self.train!r}")
        if self.train == "energy_net":
            if self.energy != "ebm" or self.ar_context is not None or self.proxy is not None:
                raise ConfigError(
                    "nce with train: energy_net learns E_phi(x0, xt) itself: set energy: ebm, "
                    "ar_context: null and no proxy"
                )
            if not self.dlm:
                raise ConfigError("nce with train: energy_net needs the frozen diffusion model's name (option dlm)")
            return
        if self.energy not in ENERGIES or ENERGIES[self.energy].scorer != "proxy":
            raise ConfigError(
                f"nce train: {self.train} fine-tunes a model inside a proxy energy (ind, inv, uni), got {self.energy!r}"
            )
        if self.ar_context not in AR_CONTEXTS or self.ar_context == "exact":
            raise ConfigError(
                f"NCE needs a learned proxy: ar_context teacher_forced, teacher_forced_carry_over or "
                f"masked, got {self.ar_context!r}"
            )
        if self.train == "dlm" and not self.proxy:
            raise ConfigError("nce with train: dlm needs the frozen proxy's model name (option proxy)")
        if self.train == "ar" and not self.dlm:
            raise ConfigError("nce with train: ar needs the frozen diffusion model's name (option dlm)")


class EBMScorer:
    """A trained :class:`EnergyNet` as the ``ebm`` energy's scorer: ``energy(xt (B, L), x0 (B, K, L)) -> (B, K)``."""

    def __init__(self, net: EnergyNet):
        self.net = net

    @torch.no_grad()
    def energy(self, xt: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        B, K, L = x0.shape
        dev = self.net.device
        xt_k = xt[:, None, :].expand(B, K, L).reshape(B * K, L).to(dev)
        return self.net(xt_k, x0.reshape(B * K, L).to(dev)).view(B, K).to(x0.device)


@METHODS.register("nce")
class NCE:
    """Algorithm 1 (options: :class:`NCEOptions`): trains an energy network, a DLM or the AR proxy."""

    Options = NCEOptions
    time_conditioned = False
    has_likelihood = False  # Table 1 scores NCE models through config['likelihood'] estimators

    def __init__(self, tokenizer_info: dict, options: NCEOptions | dict | None = None, **kwargs):
        self.options = o = make_options(NCEOptions, options, "nce options", **kwargs)
        self.info = tokenizer_info
        self.mask_id, self.bos_id = tokenizer_info["mask_id"], tokenizer_info["bos_id"]
        self.blocked = blocked_ids(tokenizer_info)
        self.energy, self.train, self.ar_context = o.energy, o.train, o.ar_context
        self.schedule = make_schedule(o.schedule, o.eps)
        self.t_eps = o.t_eps
        self.causal = o.train == "ar"
        self.partner = None

    @staticmethod
    def kind(options: NCEOptions) -> str:
        return {"ar": "ar", "dlm": "absorbing", "energy_net": "ebm"}[options.train]

    @staticmethod
    def partners(options: NCEOptions) -> dict:
        """Frozen models this method needs while training: role -> (model name, the model kinds it may be)."""
        if options.train == "dlm":
            return {"proxy": (options.proxy, ("ar",))}
        return {"dlm": (options.dlm, ("absorbing",))}

    # -- wiring ---------------------------------------------------------------------------------
    def build_net(self, cfg):
        """The network this method trains: :class:`EnergyNet` for ``train: energy_net``, else the backbone the
        config describes (our transformer, or the released DiT it is fine-tuned from)."""
        return EnergyNet(cfg) if self.train == "energy_net" else backbone_for(cfg)

    def init_from(self, net, init_net) -> None:
        """Start from ``init_net`` (``init_from``): the energy network takes the denoiser as its backbone."""
        if self.train == "energy_net":
            net.load_backbone(init_net)
        else:
            net.load_state_dict(init_net.state_dict())

    def wrap(self, net):
        """The trained network as a sampler-facing object (an energy scorer, a denoiser or an AR proxy)."""
        if self.train == "energy_net":
            return EBMScorer(net)
        if self.train == "ar":
            return ARModel(net, self.bos_id, self.mask_id, self.blocked)
        return MDLMDenoiser(net, self.mask_id, self.blocked)

    def prepare(self, net, models: dict, device="cpu", log=print):
        """Attach the frozen partner (``models['proxy']`` or ``models['dlm']``, already wrapped)."""
        ((role, (name, _)),) = self.partners(self.options).items()
        if role not in models:
            raise ValueError(f"nce (train: {self.train}) needs the frozen {role} model {name!r}")
        self.partner = models[role]
        for p in self.partner.net.parameters():
            p.requires_grad_(False)
        self.partner.net.eval()
        log(
            f"NCE: training the {self.train}, frozen {role} = {name}, energy {self.energy}, ar_context {self.ar_context}"
        )

    # -- Algorithm 1 ------------------------------------------------------------------------------
    def _energies(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """Energies ``(B, 2)`` of the positive (column 0) and the negative (column 1) of each row."""
        B, L = x0.shape
        t = antithetic_t(B, generator, self.t_eps, x0.device)  # l.3: t ~ U(0, 1)
        xt = q_xt(x0, self.schedule.mask_prob(t), self.mask_id, generator)  # l.4: xt ~ q(xt | x0)
        if self.train == "dlm":
            logp = subs_logp(net(xt), xt, self.mask_id, self.blocked)  # differentiable p_theta
        else:
            with torch.no_grad():
                logp = self.partner.logp_x0(xt)
        with torch.no_grad():  # l.8: x̂0 ~ p_theta(x0 | xt) (one draw per masked position)
            neg = gumbel_argmax(logp.detach(), generator).to(x0.device)
            neg = torch.where(xt == self.mask_id, neg, xt)
        x0c = torch.stack([x0, neg], dim=1)  # (B, 2, L)
        if self.train == "energy_net":  # EDLM: E_phi(x0, xt), no xs
            return net(xt[:, None].expand(B, 2, L).reshape(2 * B, L), x0c.reshape(2 * B, L)).view(B, 2)
        s = uniform((B,), generator, x0.device) * t.double()  # l.5: s < t
        a_t, a_s = self.schedule.alpha(t.double()), self.schedule.alpha(s)
        xsc = transition(xt, x0c, a_t, a_s, self.mask_id, generator)  # l.5/l.9: xs, x̂s from their own x0
        proxy = self.partner if self.train == "dlm" else ARModel(net, self.bos_id, self.mask_id, self.blocked)
        return energy_fn(self.energy, xt, x0c, xsc, logp, proxy, self.ar_context, self.mask_id, check=False)

    def loss(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """``softplus(E_pos) + softplus(-E_neg)`` averaged over the batch (l.11)."""
        E = self._energies(net, x0, generator)
        return (F.softplus(E[:, 0]) + F.softplus(-E[:, 1])).mean()

    @torch.no_grad()
    def dev_metrics(self, net, x0: torch.Tensor, generator, batch_size: int = 256) -> dict:
        """On held-out sequences: the NCE ``loss`` (model selection), mean ``E_pos``, ``E_neg``, their
        ``separation`` ``E_neg - E_pos``, the ``accuracy`` ``P(E_pos < E_neg)``; for ``train: dlm`` also the
        ``guard``: ``p_theta``'s NELBO per token with fixed masks and times (module doc)."""
        E = torch.cat([self._energies(net, x0[i : i + batch_size], generator) for i in range(0, len(x0), batch_size)])
        pos, neg = E[:, 0].double(), E[:, 1].double()
        out = {
            "loss": (F.softplus(pos) + F.softplus(-neg)).mean().item(),
            "energy_pos": pos.mean().item(),
            "energy_neg": neg.mean().item(),
            "separation": (neg - pos).mean().item(),
            "accuracy": (pos < neg).double().mean().item(),
            "n": len(x0),
        }
        if self.train == "dlm":
            g = torch.Generator(device=x0.device).manual_seed(20240511)  # the same draws at every evaluation
            den = MDLMDenoiser(net, self.mask_id, self.blocked)
            total = sum(
                nelbo(den, xb, antithetic_t(len(xb), g, self.t_eps, x0.device), self.schedule, self.mask_id, g)
                .sum()
                .item()
                for xb in x0.split(batch_size)
            )
            out["guard"] = total / x0.numel()
        return out
