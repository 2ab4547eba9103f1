"""Strict configuration dataclasses, the registries, and the word tokenizer."""

from __future__ import annotations

import pytest

from unie.core.options import ConfigError, ModelConfig, TrainConfig, from_dict, to_dict
from unie.core.registry import METHODS, SAMPLERS, Registry
from unie.data.tokenizer import load_tokenizer, word_tokenizer
from unie.data.toy_world import word_list


# ---------------------------------------------------------------------- config
def test_from_dict_builds_and_converts():
    cfg = from_dict(TrainConfig, {"steps": 10, "lr": 1, "betas": [0.8, 0.9]})
    assert cfg.steps == 10 and cfg.lr == 1.0 and isinstance(cfg.lr, float)
    assert cfg.betas == (0.8, 0.9) and isinstance(cfg.betas, tuple)
    assert cfg.batch_size == TrainConfig().batch_size  # defaults kept
    assert from_dict(TrainConfig, None) == TrainConfig()
    assert from_dict(TrainConfig, to_dict(cfg)) == cfg


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match="'stepz'"):
        from_dict(TrainConfig, {"steps": 1, "stepz": 2})


@pytest.mark.parametrize(
    "key,value",
    [
        ("steps", "10"),
        ("steps", True),
        ("steps", 1.5),
        ("lr", True),
        ("lr", "1e-3"),
        ("batch_size", None),
        ("betas", 0.9),
        ("seed", False),
    ],
)
def test_wrong_type_is_named(key, value):
    with pytest.raises(ConfigError, match=rf"TrainConfig\.{key}"):
        from_dict(TrainConfig, {key: value})


def test_wrong_type_inside_a_list_is_named():
    with pytest.raises(ConfigError, match=r"betas\[1\]"):
        from_dict(TrainConfig, {"betas": [0.9, "x"]})


def test_custom_location_in_message():
    with pytest.raises(ConfigError, match=r"models\.ar\.train\.lr"):
        from_dict(TrainConfig, {"lr": "fast"}, "models.ar.train")


def test_model_config_validation():
    with pytest.raises(ConfigError, match="divisible"):
        ModelConfig(vocab_size=10, d_model=30, n_heads=4)
    with pytest.raises(ConfigError, match="divisible"):
        from_dict(ModelConfig, {"vocab_size": 10, "d_model": 30, "n_heads": 4})
    with pytest.raises(ConfigError, match="even"):
        ModelConfig(vocab_size=10, d_model=12, n_heads=4)  # head dim 3: no rotary pairs
    with pytest.raises(ConfigError, match="vocab_size"):
        from_dict(ModelConfig, {"d_model": 16})  # the required key is missing
    with pytest.raises(ConfigError, match="ModelConfig.causal"):
        from_dict(ModelConfig, {"vocab_size": 10, "causal": 1})
    cfg = from_dict(ModelConfig, {"vocab_size": 10, "d_model": 16, "n_heads": 2})
    assert cfg.d_model == 16 and not cfg.causal


def test_configs_are_frozen():
    with pytest.raises(Exception):
        TrainConfig().steps = 3  # type: ignore[misc]


# ---------------------------------------------------------------------- registries
def test_registry_unknown_name_lists_and_suggests():
    with pytest.raises(KeyError, match="Did you mean 'ancestral'"):
        SAMPLERS["ancestrall"]
    with pytest.raises(KeyError, match="known: .*mdlm"):
        METHODS["nothing-like-it"]


def test_registry_rejects_double_registration():
    reg = Registry("thing")
    reg.register("a")(int)
    assert reg["a"] is int
    with pytest.raises(ValueError, match="twice"):
        reg.register("a")(float)


# ---------------------------------------------------------------------- tokenizer
def test_word_tokenizer_round_trip_and_specials(tmp_path):
    tok = word_tokenizer(word_list())
    assert tok.vocab_size == len(word_list()) + 3
    assert (tok.eos_id, tok.bos_id, tok.mask_id) == (len(word_list()), len(word_list()) + 1, len(word_list()) + 2)
    text = "the cat chases the mouse . <eos> a dog"
    assert tok.decode(tok.encode(text)) == text
    with pytest.raises(ValueError, match="'unicorn'"):
        tok.encode("the unicorn")
    tok.save(tmp_path)
    back = load_tokenizer(tmp_path)
    assert back.kind == "word" and back.tokens == tok.tokens and back.info() == tok.info()
    # one class and one loading path for both profiles: a PreTrainedTokenizerFast over a WordLevel model
    from transformers import PreTrainedTokenizerFast

    assert isinstance(back.hf, PreTrainedTokenizerFast) and back.hf.mask_token == "<mask>"
    # the Rust fast path and the PreTrainedTokenizerFast give the same ids and the same text
    texts = [text, "a dog . <eos> <eos> the", "the  cat\tsees"]
    assert back.encode_batch(texts) == back.hf(texts, add_special_tokens=False)["input_ids"]
    assert [back.decode(i) for i in back.encode_batch(texts)] == [back.hf.decode(i) for i in back.encode_batch(texts)]
    assert (back.hf.eos_token_id, back.hf.bos_token_id, back.hf.mask_token_id) == (tok.eos_id, tok.bos_id, tok.mask_id)
    other = word_tokenizer(word_list()[::-1])
    assert other.info()["fingerprint"] != tok.info()["fingerprint"]
    with pytest.raises(ValueError):
        word_tokenizer(["a", "a"])
    with pytest.raises(ValueError):
        word_tokenizer(["a", "<mask>"])
