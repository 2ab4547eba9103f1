"""CoRe (unie.dllm.core_remask, our neighbour-stability reading): its defining properties on tiny models."""

from __future__ import annotations

import math

import pytest
import torch

from unie.core.registry import DLLM_SAMPLERS
from unie.data.dllm_format import dllm_prompt_rows
from unie.dllm.backbone import DecodeOptions, decode, normalise
from unie.dllm.core_remask import CoReOptions, core_decode, probe_state
from standins import Spy
from test_dllm import PROMPTS, backbone, word  # noqa: F401  (fixture)

P = 12  # prompt length of dllm_prompt_rows(word, PROMPTS, 12, 8)


def test_registered():
    assert DLLM_SAMPLERS["core"].fn is core_decode
    assert DLLM_SAMPLERS["core"].options_cls is CoReOptions and not DLLM_SAMPLERS["core"].needs_proxy


@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("conf", ["low_confidence", "entropy"])
@pytest.mark.parametrize("off", [CoReOptions(remask=0), CoReOptions(min_drop=math.inf)])
def test_zero_remasking_equals_the_backbone_bit_for_bit(word, shift, conf, off):
    b = backbone(word, shift=shift)
    x = dllm_prompt_rows(word, PROMPTS, P, 8)
    opts = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2, confidence=conf)
    out, stats = core_decode(b, x, opts, off)
    ref, ref_stats = decode(b, x, opts)
    assert torch.equal(out, ref)
    assert stats["nfe"] == ref_stats["nfe"] == 4 and stats["probes"] == stats["remasked"] == 0


def test_probe_state_masks_candidates_and_neighbours_never_the_prompt():
    x = torch.arange(20).reshape(1, 20) + 100
    cand = torch.zeros(1, 20, dtype=torch.bool)
    cand[0, [12, 17]] = True
    got = probe_state(x, cand, 1, P, mask_id=0)
    assert (got[0] == 0).nonzero().flatten().tolist() == [12, 13, 16, 17, 18]  # 11 is prompt
    got2 = probe_state(x, cand, 2, P, mask_id=0)
    assert (got2[0] == 0).nonzero().flatten().tolist() == [12, 13, 14, 15, 16, 17, 18, 19]


def test_one_revision_per_block_by_the_definition(word):
    """Replays the sampler's states: decode, probe the lowest-margin committed positions with their
    neighbourhoods masked, remask the largest drop, re-decode; each checked against its definition."""
    b = backbone(word, seed=1)  # a backbone whose revision changes one row's token (checked below)
    x = dllm_prompt_rows(word, PROMPTS, P, 8)
    opts = DecodeOptions(gen_length=8, block_length=8, tokens_per_step=4)
    o = CoReOptions(remask=1, candidates=2, radius=1, min_drop=-math.inf)  # always remask one
    spy = Spy(b)
    out, stats = core_decode(spy, x, opts, o)
    s = spy.seen
    # forwards: 2 decoding iterations, the probe, one re-decoding iteration (1 token <= m)
    assert len(s) == stats["nfe"] == 4 and stats["probes"] == 1 and stats["remasked"] == 2
    assert stats["changed"] == 1  # so re-prediction is told apart from putting the old token back
    revised_to_another = 0
    blocked = (b.mask_id, *b.blocked)
    lp = [normalise(b.logits(xt), blocked) for xt in s]
    done = decode(b, x, opts)[0]  # the backbone's block, before any revision
    for r in range(2):
        # commit-time probability and margin of each committed position
        p_commit, margin = {}, {}
        for n in (0, 1):
            new = (s[n][r] == b.mask_id) & ((s[n + 1][r] if n == 0 else done[r]) != b.mask_id)
            for i in new.nonzero().flatten().tolist():
                top = lp[n][r, i].exp().topk(2).values.double()
                p_commit[i], margin[i] = float(top[0]), float(top[0] - top[1])
        assert sorted(p_commit) == list(range(P, P + 8))
        cands = sorted(p_commit, key=lambda i: (margin[i], i))[:2]
        hood = {j for c in cands for j in (c - 1, c, c + 1) if P <= j < P + 8}
        assert set((s[2][r] == b.mask_id).nonzero().flatten().tolist()) == hood
        drop = {c: math.log(p_commit[c]) - float(lp[2][r, c, done[r, c]]) for c in cands}
        worst = max(cands, key=lambda c: (drop[c], -c))
        assert (s[3][r] == b.mask_id).nonzero().flatten().tolist() == [worst]  # remasked, the rest kept
        assert torch.equal(s[3][r][s[3][r] != b.mask_id], done[r][s[3][r] != b.mask_id])
        assert out[r, worst] == lp[3][r, worst].argmax()  # re-predicted with the whole block as context
        revised_to_another += int(out[r, worst] != done[r, worst])
        keep = torch.ones(out.shape[1], dtype=torch.bool)
        keep[worst] = False
        assert torch.equal(out[r][keep], done[r][keep])
    assert revised_to_another == stats["changed"]


def test_min_drop_gates_the_remask(word):
    b = backbone(word)
    x = dllm_prompt_rows(word, PROMPTS, P, 8)
    opts = DecodeOptions(gen_length=8, block_length=8, tokens_per_step=4)
    _, always = core_decode(b, x, opts, CoReOptions(min_drop=-math.inf))
    _, never = core_decode(b, x, opts, CoReOptions(min_drop=1e9))
    assert always["remasked"] == 2 and never["remasked"] == 0 and never["probes"] == 1 and never["nfe"] == 3


def test_rows_do_not_depend_on_the_batch(word):
    """Two rows whose revisions differ (3 and 1 tokens remasked, one of them changed): each row's output and counts
    are those of the row decoded alone."""
    b = backbone(word, seed=13)  # a seed where rows coupled through the choices would be caught (checked)
    x = dllm_prompt_rows(word, PROMPTS, P, 8)
    opts = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2)
    o = CoReOptions(remask=2, candidates=3, min_drop=0.0)
    both, stats = core_decode(b, x, opts, o)
    alone = [core_decode(b, x[r : r + 1], opts, o) for r in range(2)]
    for r in range(2):
        assert torch.equal(alone[r][0][0], both[r])
    assert [a[1]["remasked"] for a in alone] == [3, 1] and [a[1]["changed"] for a in alone] == [0, 1]
    assert stats["remasked"] == 4 and stats["changed"] == 1
    assert not torch.equal(both, decode(b, x, opts)[0])  # a revision that changes the output
    assert not (both == word.mask_id).any()


@pytest.mark.parametrize(
    "bad",
    [
        dict(remask=-1),
        dict(candidates=1.5),
        dict(remask=3, candidates=2),
        dict(min_drop=float("nan")),
        dict(radius=True),
    ],
)
def test_bad_options_are_named(bad):
    with pytest.raises(ValueError, match="CoRe option"):
        CoReOptions(**bad)
