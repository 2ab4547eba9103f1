"""Networks (one transformer stack used as denoiser, AR and energy network) and checkpoints."""

from . import transformer  # noqa: F401  (registration)
