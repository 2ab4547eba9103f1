"""The released checkpoints the workflow can import (:mod:`unie.models.released` reads them): per kind, the unie method
whose parameterisation it is, where it is published, the formats read and what the network conditions on.  Here,
without torch, because the configuration's checks and the workflow's download plan (:func:`unie.pipeline.prefetch.plan`,
read as the rule files are) name them before any network is imported."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    kind: str
    method: str  # the unie method whose parameterisation the upstream one is
    identifier: str
    formats: tuple[str, ...]
    time_conditioning: bool
    causal: bool = False


SOURCES = {
    "mdlm": Source("mdlm", "mdlm", "kuleshov-group/mdlm-owt", ("hf", "ckpt"), False),
    "bd3lm": Source("bd3lm", "bd3lm", "kuleshov-group/bd3lm-owt-block_size4", ("hf", "ckpt"), False),
    "duo": Source(
        "duo",
        "duo",
        "s-sahoo/duo on Hugging Face (the distilled model: s-sahoo/duo-distilled), or the raw "
        "Lightning .ckpt from the Duo README's Google Drive",
        ("hf", "ckpt"),
        True,
    ),
    "sedd": Source("sedd", "sedd", "louaaron/sedd-small (or MDLM's Google-Drive sedd.ckpt)", ("hf", "ckpt"), True),
    "ar": Source("ar", "ar", "ar.ckpt from MDLM's Google Drive (README 'Baselines')", ("ckpt",), False, causal=True),
}
