"""DAWN's dependency-aware decoder (unie.dllm.dawn) and the transformer's opt-in attention probabilities,
on tiny random models."""

from __future__ import annotations

import math

import pytest
import torch
from test_dllm import PROMPTS, backbone, word  # noqa: F401  (fixture)

from unie.core.options import ModelConfig
from unie.core.registry import DLLM_SAMPLERS
from unie.data.dllm_format import dllm_prompt_rows
from unie.dllm.backbone import DecodeOptions, decode, normalise
from unie.dllm.dawn import DAWNOptions, dawn_decode, dependency_graph, greedy_mis
from unie.models.transformer import Transformer, apply_rotary, rotary_tables

P, G = 12, 12  # prompt and generation lengths
DEC = DecodeOptions(gen_length=G, block_length=4, tokens_per_step=1)  # tokens_per_step is not read by DAWN


def peaky(tok, shift=False, seed=0):
    """A tiny random backbone with scaled-up weights: spread confidences (0.4-1.0), peaked attention rows and a
    few heavy key columns, so that every DAWN rule has something to select (a plain random init is uniform)."""
    b = backbone(tok, shift=shift, seed=seed)
    with torch.no_grad():
        for blk in b.net.blocks:
            blk.attn.qkv.weight.mul_(20)
            blk.mlp[0].weight.mul_(10)
        b.net.head.weight.mul_(40)
    return b


# options under which all four rules (conf, anchor, conflict, fallback) fire on `peaky` models
ACTIVE = DAWNOptions(tau_high=0.85, tau_low=0.6, tau_induce=0.5, tau_sink=0.2, tau_edge=0.15)


class Spy:
    """Records every state and attention map the sampler is given."""

    def __init__(self, b):
        self.b, self.seen = b, []
        self.mask_id, self.blocked = b.mask_id, b.blocked

    def logits(self, x):
        return self.b.logits(x)

    def logits_and_attention(self, x, n):
        logits, A = self.b.logits_and_attention(x, n)
        self.seen.append((x.clone(), logits, A))
        return logits, A


def prompts(tok):
    return dllm_prompt_rows(tok, PROMPTS, P, G)


def block_of(x_row, mask_id, block_length=DEC.block_length):
    first = int((x_row[P:] == mask_id).nonzero()[0])
    start = P + first // block_length * block_length
    return start, start + block_length


def reference_commit(x_row, logits_row, A_row, mask_id, blocked, o: DAWNOptions) -> set[int]:
    """DAWN's selection for one row, written plainly with Python sets (the paper's §4 and Algorithm 1)."""
    logp = normalise(logits_row[None], blocked)[0]
    c = logp.max(-1).values.exp().tolist()
    A = A_row.clone()
    A[:, A.mean(0) > o.tau_sink] = 0.0
    A.fill_diagonal_(0.0)
    edge = (A >= o.tau_edge).tolist()  # edge[i][j]: j -> i
    start, end = block_of(x_row, mask_id)
    masked = [int(v) == mask_id for v in x_row]
    M = [i for i in range(start, end) if masked[i]]
    u_conf = {i for i in M if c[i] >= o.tau_high}
    anchors = [j for j in range(end) if not masked[j] and c[j] >= o.tau_high]
    u_a = {i for i in M if c[i] >= o.tau_induce and any(edge[i][j] for j in anchors)}
    chosen = u_conf | u_a

    def conflict(i, j):
        return edge[i][j] or edge[j][i]

    R = [i for i in M if c[i] >= o.tau_low and i not in chosen and not any(conflict(i, j) for j in chosen)]
    u_c = []
    for i in sorted(R, key=lambda i: (-c[i], i)):  # greedy: most confident first, skip conflicting ones
        if not any(conflict(i, j) for j in u_c):
            u_c.append(i)
    commit = chosen | set(u_c)
    return commit or {max(M, key=lambda i: (c[i], -i))}


def transitions(spy, out):
    states = [s[0] for s in spy.seen] + [out]
    return [(states[n], states[n + 1]) for n in range(len(spy.seen))]


# ---------------------------------------------------------------------- options and registration
def test_registered_and_options_validated():
    entry = DLLM_SAMPLERS["dawn"]
    assert entry.fn is dawn_decode and entry.options_cls is DAWNOptions and not entry.needs_proxy
    o = DAWNOptions()
    assert (o.tau_high, o.tau_low, o.tau_induce, o.attn_layers) == (0.9, 0.7, 0.7, 1)
    for bad in (
        {"tau_high": 0.0},
        {"tau_low": -1.0},
        {"tau_induce": math.nan},
        {"tau_sink": 0},
        {"tau_edge": "0.1"},
        {"attn_layers": 0},
        {"attn_layers": 1.5},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            DAWNOptions(**bad)


# ---------------------------------------------------------------------- the transformer's attention probabilities
@pytest.mark.parametrize("causal", [False, True])
def test_attention_probabilities_match_a_hand_softmax(word, causal):
    torch.manual_seed(0)
    net = Transformer(
        ModelConfig(vocab_size=word.vocab_size, d_model=32, n_layers=3, n_heads=2, max_len=24, causal=causal)
    ).eval()
    with torch.no_grad():
        for blk in net.blocks:
            blk.attn.qkv.weight.mul_(10)
    x = torch.randint(0, word.vocab_size, (2, 20))
    inputs = {}
    hooks = [
        blk.attn.register_forward_pre_hook(lambda m, a, i=i: inputs.__setitem__(i, a[0]))
        for i, blk in enumerate(net.blocks)
    ]
    with torch.no_grad():
        plain = net(x)
        logits, probs = net(x, return_attn=2)
    for h in hooks:
        h.remove()
    assert torch.equal(logits, plain)  # the default path is untouched
    assert len(probs) == 2 and probs[0].shape == (2, 2, 20, 20)
    cos, sin = rotary_tables(torch.arange(20), 16)
    for p, layer in zip(probs, (1, 2)):
        attn = net.blocks[layer].attn
        q, k, _ = attn.qkv(inputs[layer]).view(2, 20, 3, 2, 16).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        s = q @ k.transpose(-2, -1) / math.sqrt(16)
        if causal:
            s = s.masked_fill(~torch.ones(20, 20, dtype=torch.bool).tril(), -math.inf)
        torch.testing.assert_close(p, torch.softmax(s, -1), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(p.sum(-1), torch.ones(2, 2, 20))
        assert p.max() > 0.2  # not a uniform map: the comparison is not vacuous
    with torch.no_grad():
        assert len(net(x, return_attn=7)[1]) == 3  # more than n_layers: all of them
        assert torch.equal(net.hidden(x, return_attn=0), net.hidden(x))


def test_dllm_logits_and_attention(word):
    for shift in (False, True):
        b = peaky(word, shift=shift)
        x = prompts(word)
        logits, A = b.logits_and_attention(x, 2)
        assert torch.equal(logits, b.logits(x)) and A.shape == (2, P + G, P + G)
        _, probs = b.net(x, return_attn=2)
        torch.testing.assert_close(A, (probs[0].mean(1) + probs[1].mean(1)) / 2)
        torch.testing.assert_close(A.sum(-1), torch.ones(2, P + G))


# ---------------------------------------------------------------------- graph pieces
def test_greedy_mis_is_independent_and_maximal_on_a_hand_built_graph():
    # row 0: the path 0-1-2-3-4 plus the edge 5-6, position 7 isolated, 8 not a candidate (conflicts with 7)
    # row 1: a triangle 0-1-2 with a tail 2-3, candidates everywhere but 4
    T = 9
    conflict = torch.zeros(2, T, T, dtype=torch.bool)
    for r, edges in ((0, [(0, 1), (1, 2), (2, 3), (3, 4), (5, 6), (7, 8)]), (1, [(0, 1), (1, 2), (0, 2), (2, 3)])):
        for i, j in edges:
            conflict[r, i, j] = conflict[r, j, i] = True
    cand = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 1, 1, 1, 1]], dtype=torch.bool)
    score = torch.tensor(
        [[0.5, 0.9, 0.4, 0.8, 0.3, 0.6, 0.6, 0.1, 0.99], [0.7, 0.2, 0.95, 0.9, 0.1, 0.3, 0.3, 0.3, 0.3]]
    )
    chosen = greedy_mis(conflict, cand, score)
    # greedy by score: row 0 takes 1 (drops 0, 2), 3 (drops 4), 5 (tie with 6: lowest position; drops 6), 7
    assert chosen[0].nonzero().flatten().tolist() == [1, 3, 5, 7]
    # row 1 takes 2 (drops 0, 1, 3), then the isolated 5, 6, 7, 8
    assert chosen[1].nonzero().flatten().tolist() == [2, 5, 6, 7, 8]
    for r in range(2):
        S = chosen[r]
        assert not (S & cand[r]).logical_not().logical_and(S).any()  # only candidates
        assert not (conflict[r] & S[:, None] & S[None, :]).any()  # independent
        covered = (conflict[r] & S[None, :]).any(-1) | S
        assert covered[cand[r]].all()  # maximal: every other candidate conflicts with a chosen one


def test_dependency_graph_filters_sinks_and_the_diagonal():
    A = torch.tensor(
        [[[0.50, 0.30, 0.20, 0.00], [0.60, 0.10, 0.25, 0.05], [0.70, 0.05, 0.05, 0.20], [0.80, 0.00, 0.15, 0.05]]]
    )
    E = dependency_graph(A, tau_sink=0.5, tau_edge=0.2)  # column 0 (mean 0.65) is a sink
    assert E[0].nonzero().tolist() == [[0, 1], [0, 2], [1, 2], [2, 3]]
    assert dependency_graph(A, tau_sink=1.0, tau_edge=0.2)[0, :, 0].tolist() == [False, True, True, True]


# ---------------------------------------------------------------------- reductions
@pytest.mark.parametrize("shift", [False, True])
def test_without_low_and_induce_rules_dawn_is_the_high_confidence_rule(word, shift):
    b = peaky(word, shift=shift)
    x = prompts(word)
    blocked = (b.mask_id, *b.blocked)
    tau = 0.9
    out, stats = dawn_decode(b, x, DEC, DAWNOptions(tau_high=tau, tau_low=1.0, tau_induce=1.0))
    # direct implementation: commit {masked in-block c >= tau}, else the single most confident one
    ref, nfe, multi = x.clone(), 0, False
    while (ref[:, P:] == b.mask_id).any():
        logp = normalise(b.logits(ref), blocked)
        nfe += 1
        c, x0_hat = logp.max(-1)
        c = c.exp()
        assert c.max() < 1.0
        new = ref.clone()
        for r in range(2):
            if not (ref[r, P:] == b.mask_id).any():
                continue
            start, end = block_of(ref[r], b.mask_id)
            M = [i for i in range(start, end) if ref[r, i] == b.mask_id]
            pick = [i for i in M if c[r, i] >= tau] or [max(M, key=lambda i: (float(c[r, i]), -i))]
            multi |= len(pick) > 1
            new[r, pick] = x0_hat[r, pick]
        ref = new
    assert multi  # some step committed several tokens: the threshold rule was exercised
    assert torch.equal(out, ref) and stats["nfe"] == nfe
    assert stats["committed_anchor"] == stats["committed_conflict"] == 0


@pytest.mark.parametrize("shift", [False, True])
def test_with_every_threshold_above_one_dawn_is_llada_m1(word, shift):
    b = peaky(word, shift=shift)
    x = prompts(word)
    out, stats = dawn_decode(b, x, DEC, DAWNOptions(tau_high=1.5, tau_low=1.5, tau_induce=1.5))
    m1, m1_stats = decode(b, x, DecodeOptions(gen_length=G, block_length=4, tokens_per_step=1))
    assert torch.equal(out, m1) and stats["nfe"] == m1_stats["nfe"] == G and stats["tokens_per_step"] == 1.0
    assert stats["committed_fallback"] == 2 * G


# ---------------------------------------------------------------------- the full rule, step by step
@pytest.mark.parametrize("shift", [False, True])
def test_every_step_commits_the_reference_selection(word, shift):
    b = peaky(word, shift=shift)
    x = prompts(word)
    spy = Spy(b)
    out, stats = dawn_decode(spy, x, DEC, ACTIVE)
    assert len(spy.seen) == stats["nfe"]
    blocked = (b.mask_id, *b.blocked)
    for (xt, logits, A), (before, after) in zip(spy.seen, transitions(spy, out)):
        for r in range(2):
            new = ((before[r] == b.mask_id) & (after[r] != b.mask_id)).nonzero().flatten().tolist()
            if not (before[r, P:] == b.mask_id).any():
                assert new == []
                continue
            assert set(new) == reference_commit(xt[r], logits[r], A[r], b.mask_id, blocked, ACTIVE)
            keep = before[r] != b.mask_id
            assert torch.equal(after[r][keep], before[r][keep])  # never revised
            x0_hat = normalise(logits[r : r + 1], blocked)[0].argmax(-1)
            assert torch.equal(after[r, new], x0_hat[new])  # greedy tokens
    for key in ("committed_conf", "committed_anchor", "committed_conflict", "committed_fallback"):
        assert stats[key] > 0, key  # every rule was exercised


def test_fills_every_position_keeps_prompts_and_is_batch_safe(word):
    b = peaky(word, seed=3)
    x = prompts(word)
    out, stats = dawn_decode(b, x, DEC, ACTIVE)
    assert not (out[:, P:] == word.mask_id).any() and torch.equal(out[:, :P], x[:, :P])
    assert stats["nfe"] < G and stats["tokens_per_step"] == G / stats["nfe"]
    committed = sum(
        stats[k] for k in ("committed_conf", "committed_anchor", "committed_conflict", "committed_fallback")
    )
    assert committed == 2 * G
    alone = [dawn_decode(b, x[r : r + 1], DEC, ACTIVE) for r in range(2)]
    assert torch.equal(out, torch.cat([a[0] for a in alone]))
    assert stats["nfe"] == max(a[1]["nfe"] for a in alone)
    assert alone[0][1]["nfe"] != alone[1][1]["nfe"] or not torch.equal(out[0], out[1])


def test_default_options_run_and_need_attention(word):
    b = peaky(word)
    out, stats = DLLM_SAMPLERS["dawn"].fn(b, prompts(word), DEC, DLLM_SAMPLERS["dawn"].options())
    assert not (out == word.mask_id).any() and 1 <= stats["nfe"] <= G

    class NoAttention:
        mask_id, blocked = b.mask_id, b.blocked

        def logits(self, x):
            return b.logits(x)

    with pytest.raises(TypeError, match="logits_and_attention"):
        dawn_decode(NoAttention(), prompts(word), DEC, DAWNOptions())
