"""Every registered DLLM sampler decodes a Hugging Face backbone (the paper profile's `kind: hf_dllm`) through
`build_decoder`, with a Hugging Face proxy whose tokenizer differs from the DLLM's (LLaDA-8B + Qwen2.5-0.5B),
offline, on tiny stand-ins saved with `save_pretrained`."""

from __future__ import annotations

import pytest

from unie.core.registry import DLLM_SAMPLERS
from unie.data.tokenizer import bpe_tokenizer, word_tokenizer
from unie.dllm.decoder import build_decoder
from standins import tiny_llama

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away"]
PROMPTS = ["the cat sat on", "a dog ran far away the"]


pytestmark = pytest.mark.usefixtures("hf_offline")  # no network, a throw-away HF cache


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """A LLaDA-style stand-in (a transformers model with a word tokenizer that has a mask) and an AR proxy
    with a BPE tokenizer trained on the same words (another segmentation: the bridge is needed)."""
    root = tmp_path_factory.mktemp("hf_samplers")
    dllm, proxy = root / "dllm", root / "proxy"
    wtok = word_tokenizer(WORDS)
    wtok.hf.save_pretrained(dllm)
    tiny_llama(wtok.vocab_size, 0).save_pretrained(dllm)
    btok = bpe_tokenizer([" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))] * 20, vocab_size=40)
    btok.hf.save_pretrained(proxy)
    tiny_llama(btok.vocab_size, 1).save_pretrained(proxy)
    return dllm, proxy


def _args(dirs, sampler, **opts):
    dllm, proxy = dirs
    args = {
        "pretrained": str(dllm),
        "kind": "hf_dllm",
        "style": "llada",
        "gen_length": 4,
        "block_length": 4,
        "tokens_per_step": 2,
        "sampler": sampler,
        **opts,
    }
    if DLLM_SAMPLERS[sampler].needs_proxy:
        args["proxy"] = str(proxy)
    return args


@pytest.mark.parametrize("sampler", sorted(DLLM_SAMPLERS))
def test_every_sampler_decodes_an_hf_backbone_with_a_bridged_hf_proxy(dirs, sampler):
    opts = {"attn_layers": 1, "attn_implementation": "eager"} if sampler == "dawn" else {}
    dec = build_decoder(_args(dirs, sampler, **opts))
    outs, stats = dec.generate(PROMPTS, 4)
    assert len(outs) == len(PROMPTS) and all(isinstance(o, str) for o in outs)
    again, _ = build_decoder(_args(dirs, sampler, **opts)).generate(PROMPTS, 4)
    assert again == outs  # seeded: the same completions from a fresh decoder


def test_core_without_remasking_and_energy_with_k1_equal_plain(dirs):
    """CoRe without remasking, and Algorithm 3 with one candidate that is the greedy x0 (greedy_first), are the plain
    decoder."""
    plain, _ = build_decoder(_args(dirs, "plain")).generate(PROMPTS, 4)
    core, _ = build_decoder(_args(dirs, "core", remask=0)).generate(PROMPTS, 4)
    energy, _ = build_decoder(_args(dirs, "energy", energy="uni", K=1, greedy_first=True)).generate(PROMPTS, 4)
    assert core == plain and energy == plain


def test_dawn_on_sdpa_attention_names_the_model_arg(dirs):
    """A transformers model loaded with SDPA attention returns no probabilities: refused before any generation,
    naming the model_args key that fixes it."""
    from unie.core.options import ConfigError

    with pytest.raises(ConfigError, match="attn_implementation=eager"):
        build_decoder(_args(dirs, "dawn", attn_layers=1))


@pytest.mark.parametrize(
    "kind,key",
    [
        ("hf_ar", "attn_implementation"),
        ("hf_ar", "mask_token"),
        ("unie", "attn_implementation"),
        ("unie", "trust_remote_code"),
    ],
)
def test_a_loading_key_the_kind_never_reads_is_an_error(dirs, kind, key):
    """e.g. attn_implementation=eager for an AR row or one of our checkpoints would be silently ignored."""
    from unie.core.options import ConfigError

    with pytest.raises(ConfigError, match=rf"\['{key}'\] do not apply to kind='{kind}'"):
        build_decoder({"pretrained": str(dirs[1]), "kind": kind, key: "eager"})


def test_prompt_plus_gen_length_beyond_the_position_limit_is_refused_before_generation(dirs):
    """The stand-ins cover 64 positions (max_position_embeddings): a DLLM row whose gen_length does not fit next to
    the prompt, and an AR row, are refused in ``check`` (lm-eval calls it before any generation), naming the limit."""
    dec = build_decoder({**_args(dirs, "plain"), "gen_length": 62, "block_length": 62})
    with pytest.raises(
        ValueError,
        match=r"longest prompt \(\d+ positions\) \+ gen_length 62 = \d+ exceeds the 64 "
        r"positions.*lower gen_length",
    ):
        dec.check(PROMPTS)
    build_decoder(_args(dirs, "plain")).check(PROMPTS)  # 4 tokens fit
    ar = build_decoder({"pretrained": str(dirs[1]), "kind": "hf_ar", "gen_length": 64})
    with pytest.raises(ValueError, match="exceeds the 64 positions"):
        ar.check(PROMPTS)


def test_an_hf_ar_row_decodes_greedily_whatever_its_batch(dirs):
    """An AR row on a Hugging Face model (kind hf_ar) generates: its KV-cached greedy continuation equals argmax
    over full forwards, and a prompt's completion is the same alone or in a batch of other lengths."""
    import torch

    ar = build_decoder({"pretrained": str(dirs[1]), "kind": "hf_ar", "gen_length": 5})
    model, tok = ar.model, ar.tok
    prompts = [tok.encode(p) for p in PROMPTS + ["the cat"]]
    batched = model.greedy_continue(prompts, 5)
    for i, p in enumerate(prompts):
        x = torch.tensor([p])
        for _ in range(5):  # no cache: one full forward per token
            x = torch.cat([x, model.logits(x)[:, -1].argmax(-1, keepdim=True)], dim=1)
        ref = x[0, len(p) :]
        eos = (ref == model.eos_id).nonzero()
        if len(eos):  # after EOS the row is EOS
            ref[int(eos[0]) :] = model.eos_id
        assert torch.equal(batched[i], ref), i
        assert torch.equal(model.greedy_continue([p], 5)[0], batched[i])
    texts, counters = ar.generate(PROMPTS, 5)
    # tokens produced: per row up to and including its first EOS (not 5 x 2 positions)
    produced = [row.tolist().index(model.eos_id) + 1 if model.eos_id in row.tolist() else 5 for row in batched[:2]]
    assert len(texts) == 2 and counters["row_tokens"] == produced and counters["generated_tokens"] == sum(produced)
