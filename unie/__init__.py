"""unie: Uni-E decoding for masked diffusion language models (energies, samplers, NCE) and the
baselines and metrics needed to regenerate the paper's tables.

Layers, lowest first (a module imports only from its own layer or lower ones; a test checks it):
``core`` (registries, options, schedules, Gumbel draws, the training loop) -> ``data`` (toy world,
corpora, tokenizers) and ``models`` (networks, checkpoints) -> ``methods`` (one module per baseline:
loss, likelihood, sampler) -> ``energy`` (the paper: energies, Algorithms 1-2, likelihood, partition
check) -> ``dllm`` (the DLLM half: LLaDA-/Dream-like backbones, Algorithm 3, the tokenizer bridge, the
DLLM baselines, the decoders and the adapter lm-eval drives) -> ``eval`` (metrics, Gen-PPL evaluators) ->
``report`` (tables, figures) -> ``config`` (profiles, validation, the runs a config expands to, settings, targets,
run directories) -> ``pipeline`` (the rules' jobs: all file I/O of the workflow) -> ``cli``.

Importing the package fills the registries (methods, samplers, energies, schedules, backbones, DLLM samplers).

``unie.load(path, device="cpu")`` loads a trained model folder (``results/models/NAME``: ``config.json`` +
``model.safetensors``, written by the workflow) as its bare network; these are not Hugging Face folders
(``AutoModel.from_pretrained`` cannot read them).  ``unie.load_for_sampling(path)`` loads it ready to sample: its
method's sampler-facing object (denoiser, AR proxy) with the run's tokenizer and the mask id.
"""

from . import dllm, energy, methods, models  # noqa: F401  (registration)
from .models.checkpoint import CheckpointError, load  # noqa: F401

__version__ = "0.1.0"


def load_for_sampling(path, tokenizer=None, device: str = "cpu"):
    """A trained model folder ready to sample: ``.model`` (the denoiser or AR a sampler takes), ``.tokenizer``,
    ``.mask_id``, ``.method`` (:func:`unie.pipeline.model_files.load_for_sampling`; the tokenizer defaults to the run's
    ``resources/tokenizer``)."""
    from .pipeline.model_files import load_for_sampling as _load

    return _load(path, tokenizer, device)
