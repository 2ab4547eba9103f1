"""Networks (one transformer stack used as denoiser, AR and energy network) and checkpoints."""

from . import energy_net, transformer  # noqa: F401  (registration)
