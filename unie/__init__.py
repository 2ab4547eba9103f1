"""unie: Uni-E decoding for masked diffusion language models (energies, samplers, NCE) and the
baselines and metrics needed to regenerate the paper's tables.

Importing the package fills the registries (methods, samplers, schedules, backbones, tokenizers).
"""

from . import ar, bd3lm, duo, energy, mdlm, nce, schedule, sedd, tokenizer  # noqa: F401  (registration)
from .models import transformer  # noqa: F401
from . import samplers  # noqa: F401

__version__ = "0.1.0"
