"""LLaDA's and Dream's remote code under the transformers range of the ``paper`` extra (docs/paper-profile.md), on
stand-ins written as their hub folders hold them (``tests/standins.py``: ``config.json`` with ``auto_map``, the
configuration and modeling files, written for transformers 4.x as theirs are): the models load through
``trust_remote_code`` and every generation path of a Table 3 row decodes them; outside the range the loader refuses
the checkpoint in one line before any weight is read, where transformers 5 itself fails inside ``from_pretrained``."""

from __future__ import annotations

import sys

import pytest
import torch

from conftest import skip_outside_remote_code_range
from standins import remote_logits, write_remote_dllm
from unie.data.tokenizer import word_tokenizer

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away"]
PROMPTS = ["the cat sat on", "a dog ran far away the"]

pytestmark = pytest.mark.usefixtures("hf_offline")  # no network, a throw-away HF cache


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """Remote code is copied into HF_MODULES_CACHE and imported: keep it (and sys.path, sys.modules) in this test."""
    import transformers.dynamic_module_utils as dmu

    monkeypatch.setattr(dmu, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name in [k for k in sys.modules if k.startswith("transformers_modules")]:
        del sys.modules[name]


@pytest.fixture
def folders(tmp_path):
    tok = word_tokenizer(WORDS)
    return {
        style: (tmp_path / style, write_remote_dllm(tmp_path / style, style, tok, seed=i), tok)
        for i, style in enumerate(("llada", "dream"))
    }


@pytest.mark.parametrize("style", ["llada", "dream"])
def test_remote_code_loads_and_decodes_under_the_pinned_transformers(style, folders, modules):
    """The model is the remote class (its modeling file ran), its logits are the stand-in's by hand (Dream's shifted
    back), and Table 3's decoders (plain, CoRe and, on LLaDA, DAWN through its blocks'
    `_scaled_dot_product_attention`) generate from it, the same completions from a fresh decoder."""
    skip_outside_remote_code_range()
    from unie.dllm.decoder import build_decoder
    from unie.models.hf import load_hf_dllm

    path, weights, tok = folders[style]
    m = load_hf_dllm(path, style=style, trust_remote_code=True)
    assert type(m.model).__name__ == {"llada": "LLaDAModelLM", "dream": "DreamModel"}[style]
    assert type(m.model).__module__.startswith("transformers_modules")
    x = torch.tensor([tok.encode("the cat sat on a mat")] * 2)
    x[1, 2] = tok.mask_id
    raw = remote_logits(style, weights, x)
    want = torch.cat([raw[:, :1], raw[:, :-1]], 1) if style == "dream" else raw  # aligned: position i -> token i
    torch.testing.assert_close(m.logits(x).float(), want, atol=1e-5, rtol=0)
    samplers = ["plain", "core"] + (["dawn"] if style == "llada" else [])
    for sampler in samplers:
        args = {
            "pretrained": str(path),
            "kind": "hf_dllm",
            "style": style,
            "trust_remote_code": True,
            "gen_length": 4,
            "block_length": 4,
            "tokens_per_step": 2,
            "sampler": sampler,
        }
        if sampler == "dawn":
            args["attn_layers"] = 1
        outs, stats = build_decoder(args).generate(PROMPTS, 4)
        assert len(outs) == 2 and all(isinstance(o, str) for o in outs) and stats["nfe"] > 0
        assert build_decoder(args).generate(PROMPTS, 4)[0] == outs


def test_outside_the_range_the_checkpoint_is_refused_before_its_weights(folders, modules, monkeypatch):
    """Under a transformers outside the paper extra's range the loader refuses LLaDA's and Dream's folders in one
    line naming the range and the extra, before from_pretrained reads a weight."""
    import transformers

    from unie.models import hf

    spec = hf.remote_code_transformers()
    monkeypatch.setattr(transformers, "__version__", "5.24.0")
    monkeypatch.setattr(hf, "_load_model", lambda *a, **k: pytest.fail("weights read"))
    for style, (path, _, _) in folders.items():
        with pytest.raises(hf.RemoteCodeVersionError) as e:
            hf.load_hf_dllm(path, style=style, trust_remote_code=True)
        msg = str(e.value)
        assert "\n" not in msg and str(path) in msg and "transformers 5.24.0" in msg and "'.[paper]'" in msg
        assert f"known to run under transformers {spec}" in msg


def test_transformers_5_fails_inside_from_pretrained_on_llada_style_code(folders, modules):
    """Why the range ends below 5: transformers 5 reads `all_tied_weights_keys`, which `post_init()` sets and
    LLaDA's wrapper (written for 4.x) never calls -- the AttributeError of LLaDA's issue #130, reproduced on the
    stand-in when transformers 5 is installed (skipped otherwise)."""
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip(f"transformers {transformers.__version__} (the paper extra's range): the failure needs 5.x")
    from transformers import AutoModel

    with pytest.raises(AttributeError, match="all_tied_weights_keys"):
        AutoModel.from_pretrained(str(folders["llada"][0]), local_files_only=True, trust_remote_code=True)
