"""Samplers, registered by name in :data:`unie.registry.SAMPLERS`."""

from . import ancestral, autoregressive  # noqa: F401  (registration)
