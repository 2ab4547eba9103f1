"""Algorithm 1: fine-tuning with noise-contrastive estimation (EDLM-NCE, Uni-EDLM-NCE).

Positives ``(x0, xs, xt)`` from data (``x0 -> xt`` by forward masking, ``xs ~ q(xs | xt, x0)``);
negatives ``x̂0 ~ p_theta(x0 | xt)`` and ``x̂s`` derived from ``x̂0`` and ``xt`` the same way.  Loss
(Eq. nce_loss): ``softplus(E_pos) + softplus(-E_neg)`` (log-sigmoid form, never ``log(sigmoid + 1e-8)``),
so data gets low energy.  Option ``train`` picks what is trained: ``dlm`` (the paper's text: the AR
proxy is frozen and the diffusion model is fine-tuned) or ``ar`` (the released code: the diffusion
model is frozen and the proxy is fine-tuned).  The energy (``uni`` or ``ind``) and its ``ar_context``
are options too.  The frozen partner model is named in the options (``proxy`` or ``dlm``) and loaded
by the training job.

``dev_metrics`` reports the energy separation on a held-out dev split (the train domain's ``valid``
split, disjoint from the ``test`` split Table 1 reports on); the training loop keeps the checkpoint
with the lowest dev NCE loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core.gumbel import gumbel_argmax, uniform
from ..core.config import ConfigError, make_options
from ..core.registry import ENERGIES, METHODS
from ..core.schedule import antithetic_t, make_schedule
from ..data.tokenizer import blocked_ids
from .energies import AR_CONTEXTS, energy as energy_fn
from ..methods.ar import ARModel
from ..methods.mdlm import MDLMDenoiser, q_xt, subs_logp, transition


@dataclass(frozen=True)
class NCEOptions:
    """What Algorithm 1 trains (``train``), for which ``energy`` and ``ar_context``; the frozen partner's model
    name (``proxy`` for ``train: dlm``, ``dlm`` for ``train: ar``); the forward process (``schedule``, ``eps``,
    ``t_eps``)."""

    energy: str = "uni"
    train: str = "dlm"
    ar_context: str = "masked"
    proxy: str | None = None
    dlm: str | None = None
    schedule: str = "loglinear"
    eps: float = 1e-3
    t_eps: float = 1e-3

    def __post_init__(self):
        if self.energy not in ENERGIES:
            raise ConfigError(ENERGIES.unknown_message(self.energy))
        if self.train not in ("dlm", "ar"):
            raise ConfigError(f"nce train must be 'dlm' or 'ar', got {self.train!r}")
        if self.ar_context not in AR_CONTEXTS or self.ar_context == "exact":
            raise ConfigError(f"NCE needs a learned proxy: ar_context teacher_forced or masked, got {self.ar_context!r}")
        if self.train == "dlm" and not self.proxy:
            raise ConfigError("nce with train: dlm needs the frozen proxy's model name (option proxy)")
        if self.train == "ar" and not self.dlm:
            raise ConfigError("nce with train: ar needs the frozen diffusion model's name (option dlm)")


@METHODS.register("nce")
class NCE:
    """NCE fine-tuning of a DLM (``train: dlm``) or of the AR proxy (``train: ar``) for an energy."""

    Options = NCEOptions
    time_conditioned = False
    has_likelihood = False  # Table 1 scores NCE models through config['likelihood'] estimators

    def __init__(self, tokenizer_info: dict, options: NCEOptions | dict | None = None, **kwargs):
        self.options = o = make_options(NCEOptions, options, "nce options", **kwargs)
        self.info = tokenizer_info
        self.mask_id, self.bos_id = tokenizer_info["mask_id"], tokenizer_info["bos_id"]
        self.blocked = blocked_ids(tokenizer_info)
        self.energy, self.train, self.ar_context = o.energy, o.train, o.ar_context
        self.partner_names = {"proxy": o.proxy} if o.train == "dlm" else {"dlm": o.dlm}
        self.schedule = make_schedule(o.schedule, o.eps)
        self.t_eps = o.t_eps
        self.causal = o.train == "ar"
        self.partner = None

    @staticmethod
    def kind(options: NCEOptions) -> str:
        return "ar" if options.train == "ar" else "absorbing"

    @staticmethod
    def partners(options: NCEOptions) -> dict:
        """Frozen models this method needs while training: role -> (model name, the model kinds it may be)."""
        return {"proxy": (options.proxy, ("ar",))} if options.train == "dlm" else {"dlm": (options.dlm, ("absorbing",))}

    # -- wiring ---------------------------------------------------------------------------------
    def wrap(self, net):
        """The fine-tuned network as a sampler-facing object (a denoiser or an AR proxy)."""
        return ARModel(net, self.bos_id, self.mask_id, self.blocked) if self.train == "ar" else MDLMDenoiser(net, self.mask_id, self.blocked)

    def prepare(self, net, models: dict, device="cpu", log=print):
        """Attach the frozen partner (``models['proxy']`` or ``models['dlm']``, already wrapped)."""
        role = "proxy" if self.train == "dlm" else "dlm"
        if role not in models:
            raise ValueError(f"nce (train: {self.train}) needs the frozen {role} model {self.partner_names[role]!r}")
        self.partner = models[role]
        for p in self.partner.net.parameters():
            p.requires_grad_(False)
        self.partner.net.eval()
        log(f"NCE: training the {self.train}, frozen {role} = {self.partner_names[role]}, energy {self.energy}, "
            f"ar_context {self.ar_context}")

    def parameters(self, net):
        return list(net.parameters())

    # -- Algorithm 1 ------------------------------------------------------------------------------
    def _energies(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """Energies ``(B, 2)`` of the positive (column 0) and the negative (column 1) of each row."""
        B, L = x0.shape
        t = antithetic_t(B, generator, self.t_eps, x0.device)  # l.3: t ~ U(0, 1)
        xt = q_xt(x0, self.schedule.mask_prob(t), self.mask_id, generator)  # l.4: xt ~ q(xt | x0)
        if self.train == "dlm":
            logp = subs_logp(net(xt), xt, self.mask_id, self.blocked)  # differentiable p_theta
            proxy = self.partner
        else:
            with torch.no_grad():
                logp = self.partner.logp_x0(xt)
            proxy = ARModel(net, self.bos_id, self.mask_id, self.blocked)  # differentiable p_AR
        with torch.no_grad():  # l.8: x̂0 ~ p_theta(x0 | xt) (one draw per masked position)
            neg = gumbel_argmax(logp.detach(), generator).to(x0.device)
            neg = torch.where(xt == self.mask_id, neg, xt)
        x0c = torch.stack([x0, neg], dim=1)  # (B, 2, L)
        s = uniform((B,), generator, x0.device) * t.double()  # l.5: s < t
        a_t, a_s = self.schedule.alpha(t.double()), self.schedule.alpha(s)
        xsc = transition(xt, x0c, a_t, a_s, self.mask_id, generator)  # l.5/l.9: xs, x̂s from their own x0
        return energy_fn(self.energy, xt, x0c, xsc, logp, proxy, self.ar_context, self.mask_id, check=False)

    def loss(self, net, x0: torch.Tensor, generator) -> torch.Tensor:
        """``softplus(E_pos) + softplus(-E_neg)`` averaged over the batch (l.11)."""
        E = self._energies(net, x0, generator)
        return (F.softplus(E[:, 0]) + F.softplus(-E[:, 1])).mean()

    @torch.no_grad()
    def dev_metrics(self, net, x0: torch.Tensor, generator, batch_size: int = 256) -> dict:
        """Energy separation on held-out sequences: mean ``E_pos``, ``E_neg``, ``E_neg - E_pos``, the fraction of
        rows with ``E_pos < E_neg`` and the NCE loss (``loss``, used for model selection)."""
        E = torch.cat([self._energies(net, x0[i:i + batch_size], generator) for i in range(0, len(x0), batch_size)])
        pos, neg = E[:, 0].double(), E[:, 1].double()
        return {"loss": (F.softplus(pos) + F.softplus(-neg)).mean().item(), "energy_pos": pos.mean().item(),
                "energy_neg": neg.mean().item(), "separation": (neg - pos).mean().item(),
                "accuracy": (pos < neg).double().mean().item(), "n": len(x0)}
