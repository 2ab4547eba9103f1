"""Small frozen dataclasses for configuration, built strictly from plain dicts.

``from_dict(cls, d)`` rejects unknown keys and wrong types with an error that names the key, so a
library user gets the same early failure the workflow's JSON schema gives a Snakemake user.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass
from typing import Any, get_args, get_origin, get_type_hints

from .errors import InputError


class ConfigError(InputError, ValueError):
    """A configuration value is invalid; the message names the key."""


def key_error(key: str, msg: str):
    """Raise a :class:`ConfigError` that names config key ``key`` (dotted) and what is wrong with it."""
    raise ConfigError(f"config key '{key}': {msg}")


def _check_type(value: Any, tp: Any, where: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arg in get_args(tp):
            try:
                return _check_type(value, arg, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{where}: {value!r} does not match {tp}")
    if tp is type(None):
        if value is None:
            return None
        raise ConfigError(f"{where}: expected null, got {value!r}")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return from_dict(tp, value, where)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__} {value!r}")
        (arg, *_rest) = get_args(tp) or (Any,)
        return tuple(_check_type(v, arg, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        _, vt = get_args(tp) or (Any, Any)
        return {k: _check_type(v, vt, f"{where}.{k}") for k, v in value.items()}
    if origin is typing.Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{where}: {value!r} is not one of {list(get_args(tp))}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {type(value).__name__} {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {type(value).__name__} {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {type(value).__name__} {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {type(value).__name__} {value!r}")
        return value
    return value


def from_dict(cls, d: dict | None, where: str | None = None):
    """Build dataclass ``cls`` from ``d``; unknown keys and wrong types raise :class:`ConfigError`."""
    where = where or cls.__name__
    d = dict(d or {})
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(d) - names)
    if unknown:
        close = [m for k in unknown for m in difflib.get_close_matches(str(k), sorted(names), n=1, cutoff=0.6)]
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}{hint}; allowed: {', '.join(sorted(names))}"
        )
    kwargs = {}
    for f in dataclasses.fields(cls):
        if not f.init or f.name not in d:
            continue
        kwargs[f.name] = _check_type(d[f.name], hints[f.name], f"{where}.{f.name}")
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field is missing
        raise ConfigError(f"{where}: {e}") from None
    except ConfigError as e:
        if getattr(e, "field", None) is None:
            raise
        key_error(f"{where}.{e.field}", e.problem)  # a bound of the dataclass (_at_least), with its config key


def to_dict(obj) -> dict:
    return dataclasses.asdict(obj)


def make_options(cls, options=None, where: str | None = None, **kwargs):
    """The frozen options dataclass ``cls`` of a method or sampler, from exactly one of: an instance, a
    mapping (checked strictly by :func:`from_dict`: unknown keys and wrong types name the key) or
    keywords.  ``cls`` is the single source of the defaults; a misspelled keyword is a
    :class:`ConfigError` naming it."""
    if options is not None and kwargs:
        raise ConfigError(f"{where or cls.__name__}: give options either as an object or as keywords, not both")
    if isinstance(options, cls):
        return options
    return from_dict(cls, options if options is not None else kwargs, where or cls.__name__)


def _at_least(obj, **minimum) -> None:
    """The fields named have at least the given values (the dataclass is the one home of these bounds)."""
    for name, low in minimum.items():
        if getattr(obj, name) < low:
            e = ConfigError(f"{type(obj).__name__}: {name}={getattr(obj, name)} must be >= {low}")
            e.field, e.problem = name, f"{getattr(obj, name)!r} must be >= {low}"  # from_dict names the config key
            raise e


@dataclass(frozen=True)
class ModelConfig:
    """Transformer size.  ``causal`` picks the AR use; ``cond_dim > 0`` adds adaLN time conditioning."""

    vocab_size: int
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    mlp_ratio: int = 4
    max_len: int = 1024
    dropout: float = 0.0
    causal: bool = False
    cond_dim: int = 0

    def __post_init__(self):
        _at_least(self, d_model=8, n_layers=1, n_heads=1, mlp_ratio=1, cond_dim=0, max_len=1, vocab_size=1)
        if not 0 <= self.dropout <= 1:
            raise ConfigError(f"ModelConfig: dropout={self.dropout} is not in [0, 1]")
        if self.d_model % self.n_heads:
            raise ConfigError(f"ModelConfig: d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if (self.d_model // self.n_heads) % 2:
            raise ConfigError("ModelConfig: head dimension must be even (rotary embeddings)")


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation schedule: AdamW + linear warm-up then constant LR + grad clip + EMA (MDLM recipe)."""

    steps: int = 1000
    batch_size: int = 64
    lr: float = 3e-4
    warmup: int = 100
    weight_decay: float = 0.0
    betas: tuple[float, ...] = (0.9, 0.999)
    grad_clip: float = 1.0
    ema: float = 0.999
    ckpt_every: int = 200
    log_every: int = 50
    seed: int = 0
    # > 1: rows are split by content length into this many equal buckets; each batch comes from one bucket
    # (chosen with probability proportional to its size) and loses the columns that are padding in all its rows
    length_buckets: int = 1
    # the global batch is cut into this many equal consecutive micro-batches, each with its own loss randomness
    # (loss stream 1 + s); the gradient is their mean.  Pins the batches and random streams for any world size
    # dividing it (a rank processes shards rank, rank + world, ...): the same run up to the order in which the
    # gradients are summed (bit for bit when each rank holds one shard).  None = the world size (1 in one process)
    shards: int | None = None

    def __post_init__(self):
        _at_least(self, steps=1, batch_size=1, warmup=0, ckpt_every=1, log_every=1)
        if not (self.lr > 0 and self.grad_clip > 0 and self.weight_decay >= 0 and 0 <= self.ema <= 1):
            raise ValueError(
                f"TrainConfig: lr={self.lr} and grad_clip={self.grad_clip} must be > 0, weight_decay="
                f"{self.weight_decay} >= 0 and ema={self.ema} in [0, 1]"
            )
        if len(self.betas) != 2:
            raise ValueError(f"TrainConfig: betas={list(self.betas)} must be two numbers")
        if self.length_buckets < 1:
            raise ValueError(f"length_buckets must be >= 1, got {self.length_buckets}")
        if self.shards is not None and self.shards < 1:
            raise ValueError(f"shards must be >= 1, got {self.shards}")
        if self.shards is not None and self.batch_size % self.shards:
            raise ValueError(
                f"batch_size={self.batch_size} is not divisible by shards={self.shards} "
                "(the global batch is cut into shards equal micro-batches)"
            )


__all__ = [
    "ConfigError",
    "ModelConfig",
    "TrainConfig",
    "from_dict",
    "make_options",
    "to_dict",
]
