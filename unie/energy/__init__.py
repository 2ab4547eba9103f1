"""The paper itself: energies (Ind-E, Inv-E, Uni-E), Algorithm 2 (sampler), Algorithm 1 (NCE), the
energy-corrected likelihood and the brute-force partition check."""

from . import energies, nce, sampler  # noqa: F401  (registration)
