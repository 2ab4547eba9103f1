"""The baselines of Tables 1-2, one module per method (training loss, likelihood and sampler together)."""

from . import ar, bd3lm, dcd, duo, heldout, mdlm, remdm, sedd  # noqa: F401  (registration)
