"""The baselines of Tables 1-2, one module per method (training loss, likelihood and sampler together).

Its modules register themselves (``METHODS``, ``SAMPLERS``) when imported; the registries import them at their first read
(:data:`unie.REGISTERING`), so importing this package imports none of them.
"""
