"""The paper itself: energies (Ind-E, Inv-E, Uni-E), Algorithm 2 (sampler), Algorithm 1 (NCE), the
energy-corrected likelihood and the brute-force partition check.

Its modules register themselves (``ENERGIES``, ``SAMPLERS``, ``METHODS``) when imported; the registries import them at their first read
(:data:`unie.REGISTERING`), so importing this package imports none of them.
"""
