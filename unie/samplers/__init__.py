"""Samplers, registered by name in :data:`unie.registry.SAMPLERS`."""

from . import ancestral, autoregressive, energy_sampler  # noqa: F401  (registration)
