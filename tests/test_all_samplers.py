"""Properties every registered sampler shares: valid sequences (no mask / <bos> left), the right shape,
determinism under one seed, and categorical draws through float64 Gumbel-max."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

import unie
import unie.core.gumbel as gumbel
from unie.pipeline.model_files import build_method, model_config
from unie.models.transformer import Transformer
from unie.core.registry import SAMPLERS
from unie.data.tokenizer import word_tokenizer, blocked_ids
from unie.data.toy_world import word_list

torch.set_num_threads(1)
L, N, STEPS = 8, 4, 4


@pytest.fixture(scope="module")
def tok():
    return word_tokenizer(word_list())


def wrapped(method, tok, seed, **options):
    m = build_method(method, tok.info(), options)
    arch = {"d_model": 16, "n_layers": 1, "n_heads": 2}
    torch.manual_seed(seed)
    return m.wrap(Transformer(model_config(arch, tok.vocab_size, L, m)).eval())


def models_for(sampler, tok):
    dlm_method = {"sedd": "sedd", "duo": "duo", "bd3lm": "bd3lm"}.get(sampler, "mdlm")
    models = {}
    roles = SAMPLERS[sampler].roles
    if "dlm" in roles:
        models["dlm"] = wrapped(dlm_method, tok, 0, **({"block_size": 4} if dlm_method == "bd3lm" else {}))
    if "proxy" in roles:
        models["proxy"] = wrapped("ar", tok, 1)
    if "ar" in roles:
        models["ar"] = wrapped("ar", tok, 1)
    if sampler == "data":
        models["data"] = torch.randint(0, tok.eos_id + 1, (10, L))
    return models


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_contract(name, tok, monkeypatch):
    entry = SAMPLERS[name]
    assert dataclasses.is_dataclass(entry.options_cls) and entry.options_cls.__dataclass_params__.frozen
    dtypes = []
    real = gumbel.gumbel_noise

    def spy(shape, generator, device=None):
        out = real(shape, generator, device)
        dtypes.append(out.dtype)
        return out

    monkeypatch.setattr(gumbel, "gumbel_noise", spy)
    models = models_for(name, tok)
    steps = L if name in ("ar", "data") else STEPS
    kw = {"energy": "uni", "K": 2, "w": 1.0} if name == "energy" else {}
    a, stats = SAMPLERS[name](models, N, L, steps, torch.Generator().manual_seed(3), batch_size=N, **kw)
    b, _ = SAMPLERS[name](models, N, L, steps, torch.Generator().manual_seed(3), batch_size=N, **kw)
    assert a.shape == (N, L) and a.dtype == torch.int64
    assert torch.equal(a, b)
    for bad in blocked_ids(tok.info()):
        assert not (a == bad).any(), f"{name} left id {bad} in its samples"
    assert ((a >= 0) & (a < tok.vocab_size)).all()
    assert isinstance(stats, dict) and "nfe" in stats
    if name != "data":
        assert dtypes and all(d == torch.float64 for d in dtypes), f"{name}: {set(dtypes)}"


def test_no_float32_categorical_sampling_anywhere():
    """No sampler draws categoricals with torch.multinomial / Categorical (float32 paths)."""
    banned = {"multinomial", "Categorical", "bernoulli"}
    for path in (Path(unie.__file__).parent).rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in banned:
                raise AssertionError(f"{path}:{node.lineno} uses {node.attr}")
