"""Samplers, registered by name in :data:`unie.registry.SAMPLERS`."""

from . import (  # noqa: F401  (registration)
    ancestral,
    autoregressive,
    bd3_sampler,
    dcd,
    duo_sampler,
    energy_sampler,
    remdm,
    sedd_sampler,
)
