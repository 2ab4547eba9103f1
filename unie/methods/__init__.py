"""The baselines of Tables 1-2, one module per method (training loss, likelihood and sampler together)."""

from . import apd, ar, bd3lm, core_remask, dawn, dcd, dllm, duo, fast_dllm, heldout, mdlm, remdm, sedd  # noqa: F401  (registration)
