"""Fast-dLLM's threshold decoder (unie.dllm.fast_dllm): its defining properties on tiny random models."""

from __future__ import annotations

import pytest
import torch

from unie.core.registry import DLLM_SAMPLERS
from unie.data.dllm_format import dllm_prompt_rows
from unie.dllm.backbone import DecodeOptions, decode, normalise
from unie.dllm.fast_dllm import FastDLLMOptions, fast_dllm_decode
from standins import Spy
from test_dllm import PROMPTS, backbone, word  # noqa: F401  (fixture)


def test_registered():
    assert DLLM_SAMPLERS["fast_dllm"].fn is fast_dllm_decode
    assert DLLM_SAMPLERS["fast_dllm"].options_cls is FastDLLMOptions


@pytest.mark.parametrize("shift", [False, True])
def test_threshold_above_one_commits_one_token_per_step_as_llada_m1(word, shift):
    b = backbone(word, shift=shift)
    x = dllm_prompt_rows(word, PROMPTS, 12, 8)
    opts = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=4)
    out, stats = fast_dllm_decode(b, x, opts, FastDLLMOptions(threshold=1.5))
    m1, _ = decode(b, x, DecodeOptions(gen_length=8, block_length=4, tokens_per_step=1))
    assert torch.equal(out, m1) and stats["nfe"] == 8


def test_commits_top1_plus_every_position_above_threshold(word):
    b = backbone(word)
    x = dllm_prompt_rows(word, PROMPTS, 12, 8)
    opts = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=4)
    spy = Spy(b)
    # a threshold that some positions pass: the median confidence of the first step's block
    logp = normalise(b.logits(x), (b.mask_id, *b.blocked))
    c = logp.max(-1).values.exp()[:, 12:16]
    tau = float(c.median())
    out, stats = fast_dllm_decode(spy, x, opts, FastDLLMOptions(threshold=tau))
    assert not (out == word.mask_id).any() and torch.equal(out[:, :12], x[:, :12])
    states = spy.seen + [out]
    assert len(spy.seen) == stats["nfe"] < 8  # some step committed more than one token
    for n in range(len(spy.seen)):
        xt, xs = states[n], states[n + 1]
        logp = normalise(b.logits(xt), (b.mask_id, *b.blocked))
        p, x0_hat = logp.max(-1)
        p = p.exp()
        for r in range(2):
            masked = (xt[r] == word.mask_id).nonzero().flatten()
            if len(masked) == 0:
                assert torch.equal(xs[r], xt[r])
                continue
            start = 12 + ((int(masked[0]) - 12) // 4) * 4
            block = [i for i in masked.tolist() if start <= i < start + 4]
            top = max(block, key=lambda i: (float(p[r, i]), -i))
            expect = {top} | {i for i in block if float(p[r, i]) >= tau}
            new = set(((xt[r] == word.mask_id) & (xs[r] != word.mask_id)).nonzero().flatten().tolist())
            assert new == expect
            for i in new:
                assert xs[r, i] == x0_hat[r, i]
            keep = xt[r] != word.mask_id
            assert torch.equal(xs[r][keep], xt[r][keep])  # never revised


def test_rows_do_not_depend_on_the_batch(word):
    b = backbone(word)
    x = dllm_prompt_rows(word, PROMPTS, 12, 8)
    opts = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=4)
    both, _ = fast_dllm_decode(b, x, opts, FastDLLMOptions(threshold=0.2))
    for r in range(2):
        alone, _ = fast_dllm_decode(b, x[r : r + 1], opts, FastDLLMOptions(threshold=0.2))
        assert torch.equal(alone[0], both[r])


def test_bad_threshold_is_named():
    with pytest.raises(ValueError, match="threshold"):
        FastDLLMOptions(threshold=0.0)
