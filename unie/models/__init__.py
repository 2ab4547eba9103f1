"""Networks (one transformer stack used as denoiser, AR and energy network) and checkpoints."""

from . import dit, energy_net, transformer  # noqa: F401  (registration)
