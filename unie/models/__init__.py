"""Networks (one transformer stack used as denoiser, AR and energy network) and checkpoints.

Its modules register themselves (``BACKBONES``) when imported; the registries import them at their first read
(:data:`unie.REGISTERING`), so importing this package imports none of them.
"""
