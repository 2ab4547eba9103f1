"""One seed for every stream (unie.config.seeds): the top-level ``seed`` fills every sub-seed a config leaves unset,
and every model of both halves starts from weights that are a function of that seed."""

from __future__ import annotations

import pytest
import torch

from unie.config.profile import REPO, resolve_config
from unie.config.seeds import SUB_SEEDS, fill_seeds, sub_seeds
from unie.data.tokenizer import word_tokenizer
from unie.data.toy_world import word_list
from unie.pipeline.model_files import build_method, fresh_network, model_config

PROFILES = ["config.yaml", "smoke.yaml", "paper.yaml", "gpu-smoke.yaml"]


def _trained_models(cfg: dict) -> dict[str, dict]:
    """Every model the profile trains, both halves, by its dotted name."""
    out = {f"models.{m}": s for m, s in cfg["models"].items() if "train" in s}
    out.update({f"dllm.models.{m}": s for m, s in cfg.get("dllm", {}).get("models", {}).items() if "train" in s})
    return out


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_the_top_level_seed_reaches_every_sub_seed(profile, seed):
    cfg = resolve_config([REPO / "config" / profile], {"seed": seed})
    seeds = sub_seeds(cfg)
    models = _trained_models(cfg)
    assert models, "the profile trains no model?"
    for name in models:
        assert seeds[f"{name}.train.seed"] == seed, name
    if "dllm" in cfg:
        assert seeds["dllm.seed"] == seed and seeds["dllm.tasks.seed"] == seed
    assert set(seeds.values()) == {seed}, seeds


def test_no_profile_file_pins_a_sub_seed():
    """A sub-seed written in a profile would not follow ``--config seed=N``: none is."""
    for profile in PROFILES:
        cfg = resolve_config([REPO / "config" / profile], {"seed": 12345})
        assert set(sub_seeds(cfg).values()) == {12345}, profile


def test_an_explicit_sub_seed_is_kept():
    cfg = resolve_config(
        [REPO / "config" / "config.yaml"], {"seed": 1, "dllm": {"seed": 5}, "models": {"mdlm": {"train": {"seed": 9}}}}
    )
    seeds = sub_seeds(cfg)
    assert seeds["dllm.seed"] == 5 and seeds["models.mdlm.train.seed"] == 9
    assert seeds["dllm.tasks.seed"] == 1 and seeds["models.ar.train.seed"] == 1
    assert seeds["dllm.models.llada.train.seed"] == 1


def test_fill_seeds_on_a_hand_made_config():
    cfg = {
        "seed": 3,
        "models": {"a": {"train": {"steps": 1}}, "b": {"method": "x"}},
        "dllm": {"tasks": {}, "models": {"c": {"train": {"seed": 4}}}},
        "figures": {"case_studies": {"K": 2}},
    }
    fill_seeds(cfg)
    assert cfg["models"]["a"]["train"]["seed"] == 3 and "train" not in cfg["models"]["b"]
    assert cfg["dllm"]["seed"] == 3 and cfg["dllm"]["tasks"]["seed"] == 3
    assert cfg["dllm"]["models"]["c"]["train"]["seed"] == 4  # set: kept
    assert cfg["figures"]["case_studies"]["seed"] == 3
    assert len(SUB_SEEDS) == 5


def _initial_weights(spec: dict, seed: int, tok) -> dict[str, torch.Tensor]:
    method = build_method(spec["method"], tok.info(), spec.get("options", {}))
    cfg = model_config(spec["arch"], tok.vocab_size, 32, method)
    return {k: v.clone() for k, v in fresh_network(method, cfg, seed).state_dict().items()}


def test_two_seeds_give_every_model_other_initial_weights_and_one_seed_the_same():
    """Every model the default profile trains (DLM and DLLM halves) is built by the trainers' own
    :func:`fresh_network` from its resolved ``train.seed``: seeds 0 and 1 differ in every weight matrix, seed 0 twice
    is bit for bit the same (whatever ran in between)."""
    tok = word_tokenizer(word_list())
    by_seed = {s: _trained_models(resolve_config([REPO / "config" / "config.yaml"], {"seed": s})) for s in (0, 1)}
    assert set(by_seed[0]) == set(by_seed[1]) and len(by_seed[0]) >= 15
    for name, spec in by_seed[0].items():
        w0 = _initial_weights(spec, spec["train"]["seed"], tok)
        torch.rand(1000)  # the global RNG moved: the initial weights must not depend on it
        w0_again = _initial_weights(spec, spec["train"]["seed"], tok)
        w1 = _initial_weights(by_seed[1][name], by_seed[1][name]["train"]["seed"], tok)
        matrices = [k for k, v in w0.items() if v.dim() >= 2 and v.std() > 0]
        assert matrices, name
        assert all(torch.equal(w0[k], w0_again[k]) for k in w0), name
        assert all(not torch.equal(w0[k], w1[k]) for k in matrices), name
