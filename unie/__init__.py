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

The registries (methods, samplers, energies, schedules, backbones, Gen-PPL evaluators, DLLM samplers) fill
themselves at their first read: the package names :func:`register_all`, which imports :data:`REGISTERING`, as their
filler (:func:`unie.core.registry.fill`).  So ``import unie`` imports no torch, nor do the configuration modules a
rerun's start-up and the table jobs import (a configuration error is reported, a no-op rerun plans nothing, before
torch would have loaded), and every reader of a registry finds it complete.

``unie.load(path, device="cpu")`` loads a trained model folder (``results/models/NAME``: ``config.json`` +
``model.safetensors``, written by the workflow) as its bare network; these are not Hugging Face folders
(``AutoModel.from_pretrained`` cannot read them).  ``unie.load_for_sampling(path)`` loads it ready to sample: its
method's sampler-facing object (denoiser, AR proxy) with the run's tokenizer and the mask id.
"""

from .core import registry as _registry

__version__ = "0.1.0"

# every module that registers something (its decorators run when it is imported), layer by layer; a test holds this
# list to the modules that call a registry's decorator (tests/test_startup.py)
REGISTERING = (
    "core.schedule",
    "models.dit",
    "models.energy_net",
    "models.transformer",
    "methods.ar",
    "methods.bd3lm",
    "methods.dcd",
    "methods.duo",
    "methods.heldout",
    "methods.mdlm",
    "methods.remdm",
    "methods.sedd",
    "energy.energies",
    "energy.nce",
    "energy.sampler",
    "dllm.apd",
    "dllm.backbone",
    "dllm.core_remask",
    "dllm.dawn",
    "dllm.energy_decoding",
    "dllm.fast_dllm",
    "eval.genppl",
)


def register_all() -> None:
    """Import every module of :data:`REGISTERING` (the registries' filler; reading any registry calls it)."""
    import importlib

    for name in REGISTERING:
        importlib.import_module(f"{__name__}.{name}")


_registry.set_filler(register_all)


LAYERS = ("core", "data", "models", "methods", "energy", "dllm", "eval", "report", "config", "pipeline", "cli")


def __getattr__(name: str):
    """``unie.load`` and ``unie.CheckpointError`` (:mod:`unie.models.checkpoint`, which imports torch) and the
    subpackages (``unie.methods``), imported when first asked for, as ``import unie`` once made them available."""
    import importlib

    if name in ("load", "CheckpointError"):
        return getattr(importlib.import_module(f"{__name__}.models.checkpoint"), name)
    if name in LAYERS:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_for_sampling(path, tokenizer=None, device: str = "cpu"):
    """A trained model folder ready to sample: ``.model`` (the denoiser or AR a sampler takes), ``.tokenizer``,
    ``.mask_id``, ``.method`` (:func:`unie.pipeline.model_files.load_for_sampling`; the tokenizer defaults to the run's
    ``resources/tokenizer``)."""
    from .pipeline.model_files import load_for_sampling as _load

    return _load(path, tokenizer, device)
