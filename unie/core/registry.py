"""Registries for the swappable parts: backbones, noise schedules, energies, samplers, methods.

A registry is a dict plus a ``register(name)`` decorator.  Looking up an unknown name raises a
``KeyError`` that lists the valid names and suggests close matches, so a typo in a config fails
loudly and early instead of deep inside a job.
"""

from __future__ import annotations

import difflib
from typing import Callable, TypeVar


T = TypeVar("T")


class Registry(dict):
    """A named ``dict`` of components with a decorator to fill it."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self[name] = obj
            return obj

        return deco

    def __getitem__(self, name: str):
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


BACKBONES = Registry("backbone")
SCHEDULES = Registry("noise schedule")
ENERGIES = Registry("energy")
SAMPLERS = Registry("sampler")
METHODS = Registry("method")
TOKENIZERS = Registry("tokenizer")
