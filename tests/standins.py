"""Stand-ins shared by the tests: a tiny transformers Llama to save with ``save_pretrained`` (the paper profile's
Hugging Face loading paths, offline) and a spy that records every state a DLLM sampler asks its backbone about."""

from __future__ import annotations

from unie.models.standins import tiny_llama  # noqa: F401  (the tests' tiny transformers Llama)


class Spy:
    """Wraps a DLLM backbone and records every state ``x`` (a copy) it is asked for logits of in ``seen``."""

    def __init__(self, b):
        self.b, self.seen = b, []
        self.mask_id, self.blocked = b.mask_id, b.blocked

    def logits(self, x):
        self.seen.append(x.clone())
        return self.b.logits(x)
