"""Registries for the swappable parts: backbones, noise schedules, energies, samplers, methods.

A registry is a dict plus a ``register(name)`` decorator.  Looking up an unknown name raises a
``KeyError`` that lists the valid names and suggests close matches, so a typo in a config fails
loudly and early instead of deep inside a job.

The registries fill themselves at their first read (:func:`fill`): the package (``unie/__init__.py``) names the
function that imports the registering modules (:func:`set_filler`), which import torch and the networks.  So ``import
unie``, the configuration modules and the Snakefile import no torch until something reads a registry (a configuration
error is reported, a no-op rerun plans nothing, a table job writes its table, without it), and whoever reads one finds
every entry, whichever modules it imported itself.

Samplers register more than a function (:func:`register_sampler`): the frozen dataclass of their
options (the single source of their defaults) and the model roles they take, each with the model
kinds it accepts.  The workflow's config checks are derived from these records, not from a hand-kept
table.
"""

from __future__ import annotations

import dataclasses
import difflib
import threading
from typing import Callable, TypeVar

from .options import ConfigError, make_options

T = TypeVar("T")

# What a trained checkpoint is, as a sampler role sees it (a method's ``kind(options)``):
MODEL_KINDS = {
    "absorbing": "masked diffusion denoiser with SUBS (logp_x0)",
    "ar": "autoregressive model (token_logp, logp_next, sample)",
    "dllm": "diffusion LLM mask predictor with aligned logits (Table 3's LLaDA-like and Dream-like)",
    "sedd": "SEDD score model (log_score)",
    "duo": "uniform-state denoiser (x_theta)",
    "bd3lm": "block diffusion denoiser (evaluate, logp_block)",
    "ebm": "EDLM energy network E_phi(x0, xt)",
}


_FILL = {"fn": None, "state": "empty"}  # the function that imports the registering modules; empty, filling, full
_FILL_LOCK = threading.RLock()  # one thread fills; another that reads meanwhile waits for every entry


def set_filler(fn: Callable[[], None]) -> None:
    """Name the function that fills every registry (it imports the modules that register); it runs at the first read
    of any registry (:func:`fill`)."""
    _FILL["fn"] = fn


def fill() -> None:
    """Fill the registries now, once.  A read made while they are being filled (a registering module that reads a
    registry as it is imported) sees what is registered so far, as it did when the package imported its modules in
    order; a filling that fails is tried again at the next read."""
    if _FILL["state"] == "full":
        return
    with _FILL_LOCK:
        if _FILL["state"] != "empty" or _FILL["fn"] is None:
            return
        _FILL["state"] = "filling"
        try:
            _FILL["fn"]()
            _FILL["state"] = "full"
        except BaseException:
            _FILL["state"] = "empty"
            raise


def _filled(name: str):
    """``dict``'s method ``name``, run after :func:`fill`."""
    method = getattr(dict, name)

    def read(self, *args, **kwargs):
        fill()
        return method(self, *args, **kwargs)

    read.__name__ = read.__qualname__ = name
    read.__doc__ = f"``dict.{name}`` of the filled registry."
    return read


class Registry(dict):
    """A named ``dict`` of components with a decorator to fill it.  Every read fills the registries first
    (:func:`fill`): the ``dict`` methods that read are wrapped (:data:`READS`), and ``dict(registry)``,
    ``{**registry}``, ``sorted(registry)`` and ``copy`` go through them (a subclass that overrides ``__iter__`` is
    copied through its ``keys()``).  Only ``json.dumps`` of a registry nothing has read yet calls no method (its
    encoder writes an empty dict as ``{}`` directly): dump ``dict(registry)``."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj) -> None:
        if dict.__contains__(self, name):  # registering is not reading: no filling here
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        super().__setitem__(name, obj)

    def __getitem__(self, name: str):
        fill()
        try:
            return super().__getitem__(name)
        except KeyError:
            raise KeyError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        known = sorted(self.keys())
        msg = f"unknown {self.kind} {name!r}; known: {', '.join(known)}"
        close = difflib.get_close_matches(str(name), known, n=1)
        if close:
            msg += f". Did you mean {close[0]!r}?"
        return msg


# every method of dict that reads (or changes what a reader would see): each fills first
READS = (
    "__contains__",
    "__iter__",
    "__len__",
    "__repr__",
    "__eq__",
    "__ne__",
    "__reversed__",
    "__or__",
    "__ror__",
    "get",
    "keys",
    "values",
    "items",
    "copy",
    "pop",
    "popitem",
    "setdefault",
)
for _name in READS:
    setattr(Registry, _name, _filled(_name))


@dataclasses.dataclass(frozen=True)
class SamplerEntry:
    """A registered sampler.

    ``fn(models, n, L, steps, generator, options, batch_size, device) -> (x (n, L) int64, stats dict)``;
    ``options`` is an instance of ``options_cls``; ``roles`` maps each model role (``dlm``, ``proxy``, ...)
    to the model kinds (:data:`MODEL_KINDS`) it accepts; ``needs(options)`` gives the roles a run with
    these options requires (default: all); ``fixed_steps`` samplers always take ``L`` steps."""

    name: str
    fn: Callable
    options_cls: type
    roles: dict
    needs: Callable | None = None
    fixed_steps: bool = False

    def options(self, options=None, where: str | None = None, **kwargs):
        """This sampler's options object (strictly checked) from an object, a mapping or keywords."""
        return make_options(self.options_cls, options, where or f"sampler {self.name!r} options", **kwargs)

    def required_roles(self, options) -> tuple[str, ...]:
        return tuple(self.needs(options)) if self.needs else tuple(self.roles)

    def __call__(
        self,
        models: dict,
        n: int,
        L: int,
        steps: int,
        generator,
        options=None,
        batch_size: int = 256,
        device="cpu",
        **kwargs,
    ):
        opts = self.options(options, **kwargs)
        missing = [r for r in self.required_roles(opts) if r not in models]
        if missing:
            raise ConfigError(f"sampler {self.name!r} needs the model role(s) {missing}; got {sorted(models)}")
        return self.fn(models, n, L, steps, generator, opts, batch_size=batch_size, device=device)


def register_sampler(name: str, options, roles: dict, needs: Callable | None = None, fixed_steps: bool = False):
    """Decorator: register ``fn`` as sampler ``name`` with its options dataclass and its model roles."""
    for role, kinds in roles.items():
        unknown = set(kinds) - set(MODEL_KINDS)
        if unknown:
            raise ValueError(f"sampler {name!r}, role {role!r}: unknown model kinds {sorted(unknown)}")

    def deco(fn):
        SAMPLERS.add(name, SamplerEntry(name, fn, options, {r: tuple(k) for r, k in roles.items()}, needs, fixed_steps))
        return fn

    return deco


@dataclasses.dataclass(frozen=True)
class DLLMSamplerEntry:
    """A registered DLLM decoder (Table 3's rows, Figure 4's curves): the backbone's own rule, Algorithm 3, or
    a baseline (APD, DAWN, CoRe, Fast-dLLM).

    ``fn(backbone, x, decoding, options, proxy=None, generator=None) -> (x (B, T) int64, stats)``: ``x`` holds
    the prompts in the DLLM layout followed by ``decoding.gen_length`` masks; ``decoding`` is the shared
    :class:`~unie.dllm.backbone.DecodeOptions`; ``options`` an instance of ``options_cls`` (the single source of
    the sampler's defaults); ``proxy`` a :class:`~unie.dllm.bridge.ProxyBridge` when ``needs_proxy``;
    ``stats`` has at least ``nfe`` (backbone forwards) and, with a proxy, ``proxy_forwards``.
    ``preflight(backbone, options, proxy)``, when given, raises if the backbone or the proxy (None for a sampler
    that reads none) cannot serve the sampler (DAWN: a model that returns no attention probabilities; Algorithm 3's
    masked reading: a proxy with another tokenizer); the decoder builder calls it before any generation."""

    name: str
    fn: Callable
    options_cls: type
    needs_proxy: bool = False
    preflight: Callable | None = None

    def options(self, options=None, where: str | None = None, **kwargs):
        return make_options(self.options_cls, options, where or f"DLLM sampler {self.name!r} options", **kwargs)

    def option_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.options_cls))


def register_dllm_sampler(name: str, options, needs_proxy: bool = False, preflight: Callable | None = None):
    """Decorator: register ``fn`` as DLLM sampler ``name`` with its options dataclass.

    ``fn(backbone, x, decoding, options, proxy=None, generator=None) -> (x, stats)``; ``generator`` is one
    ``torch.Generator`` or a list of one per row of ``x`` (the lm-eval decoder's per-request noise): draw per row,
    so a row's noise does not depend on its batch (docs/adding-a-dllm-sampler.md)."""

    def deco(fn):
        DLLM_SAMPLERS.add(name, DLLMSamplerEntry(name, fn, options, needs_proxy, preflight))
        return fn

    return deco


BACKBONES = Registry("backbone")
SCHEDULES = Registry("noise schedule")
ENERGIES = Registry("energy")
SAMPLERS = Registry("sampler")
METHODS = Registry("method")
EVALUATORS = Registry("Gen-PPL evaluator")
DLLM_SAMPLERS = Registry("DLLM sampler")
