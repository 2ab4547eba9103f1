"""The paper profile's Hugging Face loading paths (unie.models.hf), offline, with tiny stand-ins saved in
tmp_path: a 2-layer Llama (hidden 32) and a word-level tokenizer (it has ``<mask>``), or a BPE tokenizer
trained here (GPT-2 style, no mask token)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from unie.core.protocols import CausalLM, DLLMBackbone
from unie.data.tokenizer import hf_tokenizer, word_tokenizer
from unie.models.hf import (
    HFCausalLM,
    HFDiffusionLM,
    check_vocab,
    load_hf_causal,
    load_hf_dllm,
)
from standins import tiny_llama

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away"]


pytestmark = pytest.mark.usefixtures("hf_offline")  # no network, a throw-away HF cache


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """A directory with a word tokenizer (hf save_pretrained) and a tiny Llama of its vocabulary; the raw model."""
    d = tmp_path_factory.mktemp("standin")
    tok = word_tokenizer(WORDS)
    tok.hf.save_pretrained(d)
    model = tiny_llama(tok.vocab_size)
    model.save_pretrained(d)
    return d, model, tok


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _ids(tok, n=2):
    x = torch.tensor([tok.encode("the cat sat on a mat")] * n)
    x[1:, 2] = tok.mask_id  # a mask in the second row
    return x


def test_word_tokenizer_roundtrips_through_hf_tokenizer(standin):
    d, _, tok = standin
    back = hf_tokenizer(d)
    assert back.vocab_size == tok.vocab_size and back.mask_id == tok.mask_id and back.eos_id == tok.eos_id
    assert back.encode("the cat sat") == tok.encode("the cat sat")


def test_llada_style_logits_equal_raw(standin):
    d, raw, tok = standin
    m = load_hf_dllm(d, style="llada", trust_remote_code=False)
    assert isinstance(m, HFDiffusionLM) and isinstance(m, DLLMBackbone)
    assert (m.mask_id, m.eos_id, m.vocab_size) == (tok.mask_id, tok.eos_id, tok.vocab_size)
    assert m.tokenizer.mask_id == tok.mask_id
    x = _ids(tok)
    with torch.no_grad():
        ref = raw(x).logits
    out = m.logits(x)
    assert out.dtype == torch.float32 and out.shape == (2, x.shape[1], tok.vocab_size)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)


def test_dream_style_logits_are_shifted_right(standin):
    d, raw, tok = standin
    m = load_hf_dllm(d, style="dream", trust_remote_code=False)
    x = _ids(tok)
    with torch.no_grad():
        ref = raw(x).logits
    out = m.logits(x)
    torch.testing.assert_close(out[:, 0], ref[:, 0], rtol=0, atol=1e-6)  # position 0 keeps its own
    torch.testing.assert_close(out[:, 1:], ref[:, :-1], rtol=0, atol=1e-6)  # i takes raw i-1's (predicts i)


def test_causal_logits_equal_raw(standin):
    d, raw, tok = standin
    m = load_hf_causal(d, trust_remote_code=False)
    assert isinstance(m, HFCausalLM) and isinstance(m, CausalLM)
    assert (m.bos_id, m.eos_id) == (tok.bos_id, tok.eos_id)
    x = torch.tensor([tok.encode("<bos> the cat sat on a mat")])
    with torch.no_grad():
        ref = raw(x).logits
    torch.testing.assert_close(m.logits(x), ref, rtol=0, atol=1e-6)


def test_auto_map_without_trust_refused_before_weights(standin, tmp_path, monkeypatch):
    import transformers

    d = _copy(standin[0], tmp_path / "remote")
    cfg = json.loads((d / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "configuration_x.XConfig", "AutoModel": "modeling_x.XModel"}
    (d / "config.json").write_text(json.dumps(cfg))

    def _no_load(*a, **k):
        raise AssertionError("weights were loaded before the trust_remote_code check")

    for cls in ("AutoModel", "AutoModelForCausalLM"):
        monkeypatch.setattr(getattr(transformers, cls), "from_pretrained", _no_load)
    for load in (
        lambda: load_hf_dllm(d, style="llada", trust_remote_code=False),
        lambda: load_hf_causal(d, trust_remote_code=False),
    ):
        with pytest.raises(PermissionError, match=r"needs trust_remote_code.*auto_map.*config/paper.yaml") as e:
            load()
        assert str(d) in str(e.value)
    (d / "model.safetensors").unlink()  # even without weights, the grant is what is reported
    with pytest.raises(PermissionError, match="trust_remote_code"):
        load_hf_dllm(d, style="dream", trust_remote_code=False)


def test_remote_code_path_loads_offline_with_auto_model(standin, tmp_path, monkeypatch):
    """The LLaDA/Dream route: auto_map names AutoModel, its modeling file sits in the directory, trust granted."""
    import sys

    from conftest import skip_outside_remote_code_range

    skip_outside_remote_code_range()

    import transformers.dynamic_module_utils as dmu

    # remote code is copied into HF_MODULES_CACHE and imported: keep it (and sys.path) inside this test
    monkeypatch.setattr(dmu, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        _remote_code_roundtrip(standin, tmp_path)
    finally:
        for name in [k for k in sys.modules if k.startswith("transformers_modules")]:
            del sys.modules[name]


def _remote_code_roundtrip(standin, tmp_path):
    d = _copy(standin[0], tmp_path / "remote_ok")
    (d / "modeling_tiny.py").write_text(
        "from transformers import LlamaForCausalLM\n\n\nclass TinyDLLM(LlamaForCausalLM):\n    pass\n"
    )
    cfg = json.loads((d / "config.json").read_text())
    cfg["auto_map"] = {"AutoModel": "modeling_tiny.TinyDLLM"}
    (d / "config.json").write_text(json.dumps(cfg))
    m = load_hf_dllm(d, style="llada", trust_remote_code=True)
    assert type(m.model).__name__ == "TinyDLLM"
    x = _ids(standin[2])
    with torch.no_grad():
        ref = standin[1](x).logits
    torch.testing.assert_close(m.logits(x), ref, rtol=0, atol=1e-6)


def test_missing_directory_or_weights(standin, tmp_path):
    gone = tmp_path / "not_downloaded"
    for load in (
        lambda p: load_hf_dllm(p, style="llada", trust_remote_code=True),
        lambda p: load_hf_causal(p, trust_remote_code=True),
    ):
        with pytest.raises(FileNotFoundError, match="download rule") as e:
            load(gone)
        assert str(gone) in str(e.value)
    d = _copy(standin[0], tmp_path / "no_weights")
    (d / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"no weights.*download rule") as e:
        load_hf_dllm(d, style="llada", trust_remote_code=False)
    assert str(d) in str(e.value)


def test_tokenizer_larger_than_model_vocab(standin, tmp_path):
    d = tmp_path / "mismatch"
    tok = word_tokenizer(WORDS + ["extra", "words"])  # 2 more tokens than the model's vocabulary
    tok.hf.save_pretrained(d)
    tiny_llama(standin[2].vocab_size).save_pretrained(d)
    n, v = tok.vocab_size, standin[2].vocab_size
    for load in (
        lambda: load_hf_dllm(d, style="llada", trust_remote_code=False),
        lambda: load_hf_causal(d, trust_remote_code=False),
    ):
        with pytest.raises(ValueError, match=rf"tokenizer mismatch.*{n} tokens.*config.vocab_size.*only {v}"):
            load()


def _bpe_dir(tmp_path, specials):
    """A GPT-2-style byte-level BPE trained here (EOS ``<|endoftext|>``, no mask token) and a tiny Llama
    whose vocabulary is exactly the tokenizer's length."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rust = Tokenizer(models.BPE())
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rust.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    rust.train_from_iterator(["the cat sat on the mat", "a dog ran far away from the cat"] * 20, trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=rust, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    assert hf.mask_token_id is None
    d = tmp_path / "bpe"
    hf.save_pretrained(d)
    tiny_llama(len(hf)).save_pretrained(d)
    return d, len(hf), hf


def test_tokenizer_without_mask(tmp_path):
    d, n, _ = _bpe_dir(tmp_path, ["<|endoftext|>"])
    # a DLLM needs its mask: none in the tokenizer and none given -> refused, nothing appended
    with pytest.raises(ValueError, match="no mask token.*cannot be decoded"):
        load_hf_dllm(d, style="dream", trust_remote_code=False)
    # hf_tokenizer appends <|mask|> after the vocabulary, which the model (vocab = n) cannot embed:
    # check_vocab's mismatch error is the right answer, the mask would index past the embedding table
    tok = hf_tokenizer(d)
    assert tok.vocab_size == n + 1 and tok.mask_id == n
    model = tiny_llama(n)
    with pytest.raises(ValueError, match=rf"tokenizer mismatch.*{n + 1} tokens.*only {n}"):
        check_vocab(model, tok, d)
    # the causal loader appends the same mask for our Tokenizer class but checks only the real tokens
    m = load_hf_causal(d, trust_remote_code=False)
    assert m.vocab_size == n and m.tokenizer.mask_id == n and m.bos_id == m.eos_id
    assert m.logits(torch.tensor([m.tokenizer.encode("the cat sat")])).shape[-1] == n


def test_named_mask_token_in_vocab(tmp_path):
    """LLaDA's case: the mask (<|mdm_mask|>) is a vocabulary token the tokenizer does not declare as its mask."""
    d, n, hf = _bpe_dir(tmp_path, ["<|endoftext|>", "<|mdm_mask|>"])
    mid = hf.convert_tokens_to_ids("<|mdm_mask|>")
    m = load_hf_dllm(d, style="llada", trust_remote_code=False, mask_token="<|mdm_mask|>")
    assert m.mask_id == mid and m.tokenizer.mask_id == mid and m.tokenizer.vocab_size == n  # nothing appended
    assert m.eos_id == hf.eos_token_id
    with pytest.raises(ValueError, match="not in the vocabulary"):
        load_hf_dllm(d, style="llada", trust_remote_code=False, mask_token="<|not_there|>")
    # a mask_token_id declared in config.json must agree with the resolved mask
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "mask_token_id": mid}))
    assert load_hf_dllm(d, style="llada", trust_remote_code=False, mask_token="<|mdm_mask|>").mask_id == mid
    (d / "config.json").write_text(json.dumps({**cfg, "mask_token_id": mid - 1}))
    with pytest.raises(ValueError, match="disagrees with mask_token_id"):
        load_hf_dllm(d, style="llada", trust_remote_code=False, mask_token="<|mdm_mask|>")


def test_bad_style_and_dtype(standin):
    with pytest.raises(ValueError, match="style"):
        load_hf_dllm(standin[0], style="mdlm", trust_remote_code=False)
    with pytest.raises(ValueError, match="dtype"):
        load_hf_causal(standin[0], trust_remote_code=False, dtype="float8")
