"""APD (Adaptive Parallel Decoding) as a DLLM sampler: R = 1 and R = 0 against recomputed references, the
tokenizer-bridged candidate scores, per-row noise (batch safety), EOS, options (tiny random models)."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

from unie.core.options import ModelConfig
from unie.core.gumbel import gumbel_noise
from unie.core.registry import DLLM_SAMPLERS
from unie.data.dllm_format import dllm_prompt_rows
from unie.data.tokenizer import bpe_tokenizer, word_tokenizer
from unie.dllm.apd import (
    APDOptions,
    apd_decode,
    bridged_logp_ar,
    direct_logp_ar,
    row_generators,
    shared_vocabulary,
    word_tables,
)
from unie.dllm.backbone import DLLM, DecodeOptions, normalise
from unie.dllm.bridge import ProxyBridge
from unie.methods.ar import AR
from unie.models.transformer import Transformer

WORDS = [
    "question",
    ":",
    "the",
    "baker",
    "bakes",
    "onion",
    "pie",
    "answer",
    "[",
    "]",
    "1",
    "2",
    "3",
    "4",
    "5",
    "sort",
    "then",
    "A",
    "B",
]
TEXTS = [
    "question : the baker bakes the onion pie answer : 1 2",
    "question : sort [ 3 1 2 ] answer : [ 1 2 3 ]",
    "question : the pie answer : A",
    "question : the onion answer : B",
] * 20
PROMPTS = ["question : the baker bakes the pie answer :", "question : sort [ 3 1 ] answer :"]


@pytest.fixture(scope="module")
def word():
    return word_tokenizer(WORDS, unk=True)


@pytest.fixture(scope="module")
def bpe():
    tok = bpe_tokenizer(TEXTS, 40)  # splits "baker", "bakes", "onion" into pieces
    assert any(len(tok.encode(w)) > 1 for w in ("baker", "onion", "bakes"))
    return tok


def net_for(tok, causal=False, T=48, seed=0):
    torch.manual_seed(seed)
    return Transformer(
        ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=2, n_heads=2, max_len=T, causal=causal)
    ).eval()


def backbone(tok, shift=False, seed=0):
    b = DLLM(net_for(tok, seed=seed), tok.info(), shift=shift)
    b.tokenizer = tok
    return b


def proxy(tok, seed=1):
    m = AR(tok.info()).wrap(net_for(tok, causal=True, seed=seed))
    m.tokenizer = tok
    return m


class UnigramAR:
    """A proxy whose next-token distribution ignores the context: log p(word) is known exactly."""

    def __init__(self, tok):
        self.tokenizer, self.bos_id, self.eos_id = tok, tok.bos_id, tok.eos_id
        self.table = torch.randn(
            tok.vocab_size, generator=torch.Generator().manual_seed(0), dtype=torch.float64
        ).log_softmax(-1)

    def logits(self, x):
        return self.table.expand(x.shape[0], x.shape[1], -1).clone()


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def shared_setup(word):
    """Dream-like (shifted) DLLM and AR proxy on the same word-level vocabulary, B = 2 prompts."""
    return backbone(word, shift=True), ProxyBridge(proxy(word), word), dllm_prompt_rows(word, PROMPTS, 12, 8)


def bridged_setup(word, bpe):
    """LLaDA-like DLLM on the BPE tokenizer, AR proxy on the word-level one, B = 2 prompts."""
    return backbone(bpe), ProxyBridge(proxy(word), bpe), dllm_prompt_rows(bpe, PROMPTS, 30, 8)


def prefix_text(xt, curr, bos_id):
    """The ids after the row's <bos> and before ``curr`` (what the proxy reads before the window)."""
    row = xt.tolist()
    return row[row.index(bos_id) + 1 : curr]


# ---------------------------------------------------------------------- R = 1: the DLLM's own draft, m per step
@pytest.mark.parametrize("bridged", [False, True])
def test_r1_accepts_every_draft_token(word, bpe, bridged):
    """R = 1: every draft token of the window is accepted (m = tokens_per_step per iteration), no proxy call,
    and the output is the left-to-right Gumbel draft of the DLLM alone with the per-row noise replayed."""
    b, bridge, x = bridged_setup(word, bpe) if bridged else shared_setup(word)
    dec = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2)
    opts = APDOptions(R=1.0, temperature=1.0, stop_at_eos=False)
    trace = []
    out, stats = apd_decode(b, bridge, x, dec, opts, gen(3), trace=trace)
    assert stats["nfe"] == 4 and stats["proxy_forwards"] == 0 and stats["accepted"] == 2.0
    assert all(t["accepted"].tolist() == [2, 2] for t in trace)
    # reference: the DLLM alone, committing its Gumbel draft left to right, m = 2 per step, same noise
    gens = row_generators(x, gen(3))
    ref = x.clone()
    P, blocked = 30 if bridged else 12, (b.mask_id, *b.blocked)
    for n in range(4):
        logp = normalise(b.logits(ref), blocked).double()
        for r in range(2):
            g = gumbel_noise((2, logp.shape[-1]), gens[r])
            ref[r, P + 2 * n : P + 2 * n + 2] = (logp[r, P + 2 * n : P + 2 * n + 2] / 1.0 + g).argmax(-1)
    assert torch.equal(out, ref)
    assert not (out == b.mask_id).any()


# ---------------------------------------------------------------------- R = 0: the proxy's coupled choice
def test_r0_accepts_the_proxy_gumbel_choice(word):
    """R = 0, shared vocabulary: the draft is the DLLM's Gumbel choice, the target y the proxy's
    ``argmax(logp_ar / temp + g)`` with the same noise (recomputed from the text, one proxy call per token),
    the accepted prefix is the longest agreeing one (the first always), and the commits rebuild the output."""
    b, bridge, x = shared_setup(word)
    dec = DecodeOptions(gen_length=8, block_length=8, tokens_per_step=4)
    opts = APDOptions(R=0.0, temperature=0.7, stop_at_eos=False)
    trace = []
    out, stats = apd_decode(b, bridge, x, dec, opts, gen(5), trace=trace)
    assert stats["nfe"] == len(trace) and stats["proxy_forwards"] == len(trace)
    assert not (out == word.mask_id).any()
    gens = row_generators(x, gen(5))
    rebuilt, blocked, ar = x.clone(), (b.mask_id, *b.blocked), bridge.model
    disagreed = agreed_later = 0
    for t in trace:
        for i, r in enumerate(t["rows"].tolist()):
            xt, curr, w = t["xt"][i], int(t["curr"][i]), int(t["width"][i])
            assert torch.equal(xt, rebuilt[r])
            g = gumbel_noise((4, word.vocab_size), gens[r])  # the row's own stream, replayed
            assert torch.equal(t["noise"][i], g)
            logp_dlm = normalise(b.logits(xt[None]), blocked)[0, curr : curr + w].double()
            draft = (logp_dlm / 0.7 + g[:w]).argmax(-1)
            assert torch.equal(t["draft"][i, :w], draft)
            y = []
            for k in range(w):
                seq = torch.tensor([[ar.bos_id] + prefix_text(xt, curr, word.bos_id) + draft[:k].tolist()])
                logp_ar = ar.logits(seq)[0, -1].double().log_softmax(-1)
                y.append(int((logp_ar / 0.7 + g[k]).argmax()))
            assert t["y"][i, :w].tolist() == y
            n = 1
            while n < w and draft[n] == y[n]:
                n += 1
            assert int(t["accepted"][i]) == n
            assert all(int(draft[k]) == y[k] for k in range(1, n))  # accepted tokens are the proxy's choice
            disagreed += int(n < w)
            agreed_later += n - 1
            rebuilt[r, curr : curr + n] = draft[:n]
    assert torch.equal(rebuilt, out)
    assert disagreed > 0 and agreed_later > 0  # both branches of the acceptance were exercised


def test_uncoupled_target_is_the_greedy_mixture(word):
    """``coupled = False`` (the released code): y = argmax ℓ*, without noise."""
    b, bridge, x = shared_setup(word)
    trace = []
    apd_decode(
        b,
        bridge,
        x,
        DecodeOptions(gen_length=8, block_length=8, tokens_per_step=4),
        APDOptions(R=0.5, temperature=1.0, coupled=False),
        gen(0),
        trace=trace,
    )
    for t in trace:
        target = 0.5 * t["logp_dlm"] + 0.5 * t["logp_ar"]
        assert torch.equal(t["y"], target.argmax(-1))


# ---------------------------------------------------------------------- the bridged candidate scores
def test_bridged_decoding_runs_and_is_seeded(word, bpe):
    b, bridge, x = bridged_setup(word, bpe)
    assert not shared_vocabulary(bridge)
    dec = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2)
    opts = APDOptions(R=0.5, temperature=1.0)
    trace = []
    a, sa = apd_decode(b, bridge, x, dec, opts, gen(0), trace=trace)
    c, _ = apd_decode(b, ProxyBridge(bridge.model, bpe), x, dec, opts, gen(0))
    assert torch.equal(a, c) and not (a == bpe.mask_id).any()
    assert torch.equal(a[:, :30], x[:, :30])
    assert sa["proxy_forwards"] == sa["nfe"] == len(trace)  # one bridge call (one proxy forward) per iteration
    assert 1.0 <= sa["accepted"] <= 2.0
    for t in trace:  # ℓ* is -inf outside the candidate set, and the draft is in it
        assert t["support"].sum(-1).le(1 + opts.candidates).all()
        assert t["support"].gather(-1, t["draft"][..., None]).squeeze(-1)[t["width"][:, None] > torch.arange(2)].all()
    d, _ = apd_decode(b, bridge, x, dec, opts, gen(1))
    assert not torch.equal(a, d)


def test_bridged_scores_are_the_proxy_log_prob_of_the_text_up_to_the_word_end(word, bpe):
    """Each candidate's score is the bridge's position_logp of its row summed up to the end of the word that
    holds the candidate; with a context-free proxy that is Σ log p(word) over the words of the text up to that
    word (recomputed from the decoded text), plus log p(<eos>) for an <eos> candidate."""
    ar = UnigramAR(word)
    bridge = ProxyBridge(ar, bpe)
    x = dllm_prompt_rows(bpe, PROMPTS, 30, 8)
    P, V = 30, bpe.vocab_size
    surf = bpe.surfaces()
    sp, colon, an, qu, the, k_, er = (surf.index(p) for p in (" ", " :", " an", " qu", "the", "k", "er"))
    # state: the draft in the window [P, P + 3), masks after; fill: pieces that continue words, one word start
    state = x.clone()
    state[:, P : P + 3] = torch.tensor([[sp, the, an], [qu, an, er]])
    fill = torch.full_like(x, er)
    fill[:, P + 5] = colon
    curr = torch.tensor([P, P])
    cand = torch.tensor([colon, k_, bpe.eos_id, sp]).expand(2, 3, 4).clone()
    valid = torch.ones(2, 3, 4, dtype=torch.bool)
    valid[1, 2] = False
    scores, info = bridged_logp_ar(bridge, state, fill, curr, valid, cand, word_tables(bpe, V, "cpu"))
    assert scores.shape == (2, 3, 4) and torch.isinf(scores[1, 2]).all() and torch.isfinite(scores[valid]).all()
    rows, index, ends = info["rows"], info["index"], info["ends"]
    assert len(rows) == int(valid.sum()) and not (rows == bpe.mask_id).any()
    # (a) the scores are the bridge's position_logp of the corresponding rows, summed before the word end
    full = bridge.position_logp(rows)
    for n, (bb, k, c) in enumerate(index.tolist()):
        row = rows[n]
        assert int(row[P + k]) == int(cand[bb, k, c])
        assert torch.equal(row[: P + k], state[bb, : P + k]) and torch.equal(row[P + 3 :], fill[bb, P + 3 :])
        assert scores[bb, k, c] == pytest.approx(float(full[n, : int(ends[n])].sum()), abs=1e-9)
        # (b) independently from the text: every word that starts before the end of the candidate's text, the
        # next word too when that text ends on a space, and p(<eos>) when the candidate ends the text
        ids = row.tolist()
        body = ids[ids.index(bpe.bos_id) + 1 :]
        at = P + k - (len(ids) - len(body))
        eos = body.index(bpe.eos_id) if bpe.eos_id in body else len(body)
        text = bpe.decode(body[:eos])
        if eos <= at:
            starts_ = [mt.start() for mt in re.finditer(r"\S+", text)]
            want = float(ar.table[word.eos_id])
        else:
            upto = bpe.decode(body[: at + 1])
            assert text.startswith(upto)
            every = [mt.start() for mt in re.finditer(r"\S+", text)]
            starts_ = [i for i in every if i < len(upto)]
            if not upto or upto[-1].isspace():
                starts_ += [i for i in every if i >= len(upto)][:1]
            want = 0.0
        words = [re.match(r"\S+", text[i:]).group() for i in starts_]
        want += sum(float(ar.table[word.encode(w)[0]]) for w in words)
        assert float(scores[bb, k, c]) == pytest.approx(want, abs=1e-9), (bb, k, c)


def test_bridge_and_direct_readings_agree_on_a_shared_vocabulary(word):
    """One word-level vocabulary on both sides: the bridged candidate scores equal the direct next-token
    log-probabilities up to one constant per (row, window position)."""
    _, bridge, x = shared_setup(word)
    assert shared_vocabulary(bridge)
    P, m = 12, 3
    state = x.clone()
    state[:, P : P + m] = torch.tensor([[2, 3, 6], [15, 8, 10]])
    curr, width = torch.tensor([P, P]), torch.tensor([m, m])
    direct = direct_logp_ar(bridge, state, curr, width, m)  # (2, m, V)
    finite = [i for i in range(word.vocab_size) if i not in (word.bos_id, word.mask_id)]
    cand = torch.tensor(finite).expand(2, m, -1).clone()
    scores, _ = bridged_logp_ar(
        bridge,
        state,
        torch.full_like(x, 4),
        curr,
        torch.ones(cand.shape, dtype=torch.bool),
        cand,
        word_tables(word, word.vocab_size, "cpu"),
    )
    want = direct.gather(-1, cand)
    diff = scores - want
    assert torch.allclose(diff, diff[..., :1].expand_as(diff), atol=1e-4)


# ---------------------------------------------------------------------- batch safety and EOS
@pytest.mark.parametrize("bridged", [False, True])
def test_rows_of_a_batch_equal_the_rows_decoded_alone(word, bpe, bridged):
    """Per-row noise: each row of a B = 2 batch is what it is decoded alone (or in the other order)."""
    b, bridge, x = bridged_setup(word, bpe) if bridged else shared_setup(word)
    dec = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2)
    opts = APDOptions(R=0.5, temperature=1.0)
    both, _ = apd_decode(b, bridge, x, dec, opts, gen(7))
    for r in range(2):
        alone, _ = apd_decode(b, bridge, x[r : r + 1], dec, opts, gen(7))
        assert torch.equal(alone[0], both[r])
    swapped, _ = apd_decode(b, bridge, x.flip(0), dec, opts, gen(7))
    assert torch.equal(swapped.flip(0), both)
    twice, _ = apd_decode(b, bridge, x[[0, 0]], dec, opts, gen(7))
    assert torch.equal(twice[0], both[0])  # identical rows get their own noise (occurrence index)


class EOSDLLM:
    """A context-free mask predictor that prefers <eos> at every position."""

    def __init__(self, tok):
        self.mask_id, self.eos_id, self.blocked = tok.mask_id, tok.eos_id, (tok.bos_id,)
        self.V = tok.vocab_size

    def logits(self, x):
        q = torch.zeros(self.V)
        q[self.eos_id] = 20.0
        return q.expand(x.shape[0], x.shape[1], -1).clone()


def test_eos_ends_the_row(word):
    """A committed <eos> ends a row: the rest of its region is <eos> without further forwards."""
    _, bridge, x = shared_setup(word)
    dec = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2)
    out, stats = apd_decode(EOSDLLM(word), bridge, x, dec, APDOptions(R=1.0), gen(0))
    assert stats["nfe"] == 1 and stats["accepted"] == 1.0 and (out[:, 12:] == word.eos_id).all()
    out, stats = apd_decode(EOSDLLM(word), bridge, x, dec, APDOptions(R=1.0, stop_at_eos=False), gen(0))
    assert stats["nfe"] == 4 and (out[:, 12:] == word.eos_id).all()


# ---------------------------------------------------------------------- registration and options
def test_registered_and_greedy(word):
    entry = DLLM_SAMPLERS["apd"]
    assert entry.needs_proxy and entry.options_cls is APDOptions
    b, bridge, x = shared_setup(word)
    dec = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2)
    out, stats = entry.fn(b, x, dec, entry.options({"temperature": 0.0}), proxy=bridge, generator=gen(0))
    assert {"nfe", "proxy_forwards", "accepted"} <= set(stats) and not (out == word.mask_id).any()
    again, _ = entry.fn(b, x, dec, entry.options({"temperature": 0.0}), proxy=bridge, generator=gen(1))
    assert torch.equal(out, again)  # temperature 0: greedy, no noise
    with pytest.raises(ValueError, match="needs a proxy"):
        entry.fn(b, x, dec, APDOptions())


@pytest.mark.parametrize(
    "field, value",
    [
        ("R", 1.5),
        ("R", -0.1),
        ("R", math.nan),
        ("R", True),
        ("temperature", -1.0),
        ("lookahead", -1),
        ("lookahead", 1.5),
        ("candidates", 0),
        ("ar_scoring", "direct"),
        ("coupled", "yes"),
        ("stop_at_eos", 1),
    ],
)
def test_bad_options_name_the_option(field, value):
    with pytest.raises(ValueError, match=field):
        APDOptions(**{field: value})
    assert dataclasses.replace(APDOptions(), R=0.3).R == 0.3
