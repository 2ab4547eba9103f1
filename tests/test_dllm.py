"""The DLLM half's pieces: layouts, LLaDA/Dream losses, the backbones' decoder, Algorithm 3, the tokenizer
bridge, LLaDA's MC-ELBO and the decoders lm-eval drives (tiny random models, no training)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from unie.core.options import ConfigError, ModelConfig
from unie.core.registry import DLLM_SAMPLERS
from unie.data.dllm_format import ar_sft_rows, dllm_prompt_rows, dllm_sft_rows, split_rows
from unie.data.tokenizer import bpe_tokenizer, word_tokenizer
from unie.dllm.backbone import DLLM, DecodeOptions, Dream, LLaDA, decode, mc_loglikelihood, normalise
from unie.dllm.bridge import BridgeError, ProxyBridge
from unie.dllm.energy_decoding import DLLMEnergyOptions, energy_decode, in_window
from unie.energy.energies import energy as energy_fn
from unie.energy.energies import selection_energy
from unie.methods.ar import AR
from unie.models.transformer import Transformer
from unie.config.profile import resolve_config

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


@pytest.fixture(scope="module")
def word():
    return word_tokenizer(WORDS, unk=True)


@pytest.fixture(scope="module")
def bpe():
    tok = bpe_tokenizer(TEXTS, 40)  # small: splits "baker", "bakes", "onion" into pieces
    assert any(len(tok.encode(w)) > 1 for w in ("baker", "onion", "bakes"))
    return tok


def net_for(tok, causal=False, T=32, seed=0):
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


PROMPTS = ["question : the baker bakes the pie answer :", "question : sort [ 3 1 ] answer :"]


# ---------------------------------------------------------------------- layouts and losses
def test_layouts(word):
    x = dllm_sft_rows(word, PROMPTS, ["1 2", "[ 1 3 ]"], prompt_len=12, gen_len=8)
    assert x.shape == (2, 2, 20)
    tokens, target = split_rows(x)
    assert (target[:, 12:]).all() and not target[:, :12].any()
    assert tokens[0, 12:].tolist() == word.encode("1 2") + [word.eos_id] * 6
    assert (tokens[:, :12] == word.bos_id).sum(-1).tolist() == [1, 1]  # one <bos> after the left pads
    r = ar_sft_rows(word, PROMPTS, ["1 2", "[ 1 3 ]"], 20)
    assert r[0, 1].tolist() == [0] * 9 + [1] * 3 + [0] * 8  # "1 2" and its <eos>
    with pytest.raises(ValueError, match="does not fit"):
        dllm_prompt_rows(word, PROMPTS, prompt_len=5, gen_len=8)


def test_sft_loss_ignores_prompt_and_dream_shift(word):
    net = net_for(word, T=20)
    x = dllm_sft_rows(word, PROMPTS, ["1 2", "[ 1 3 ]"], 12, 8)
    no_target = x.clone()
    no_target[:, 1] = 0
    g = torch.Generator().manual_seed(0)
    assert LLaDA(word.info()).loss(net, no_target, g).item() == 0.0
    assert LLaDA(word.info()).loss(net, x, torch.Generator().manual_seed(0)).item() > 0
    raw = net(x[:, 0])
    aligned = Dream(word.info()).wrap(net).logits(x[:, 0])
    assert torch.equal(aligned[:, 1:], raw[:, :-1]) and torch.equal(aligned[:, 0], raw[:, 0])


def _exact_loss(method, net, tokens, target) -> float:
    """LLaDA's loss of a batch in the limit ``eps -> 0``, by enumerating every mask set: per row
    ``sum_k g(k) / k`` with ``g(k)`` the mean over ``k``-subsets ``S`` of the row's targets of the summed
    cross-entropy on ``S``; divided by the row's ``n`` targets and averaged over rows for SFT rows
    (``target`` not all ones), divided by ``B * T`` for pretraining rows."""
    import itertools

    sft = not bool(target.all())
    mask_id, total = method.mask_id, []
    for b in range(tokens.shape[0]):
        pos = target[b].nonzero().squeeze(-1).tolist()
        row = 0.0
        for k in range(1, len(pos) + 1):
            sums = []
            for S in itertools.combinations(pos, k):
                xt = tokens[b : b + 1].clone()
                xt[0, list(S)] = mask_id
                logp = normalise(method.wrap(net).aligned(net(xt)), method.blocked)
                sums.append(-logp[0, list(S), tokens[b, list(S)]].sum().item())
            row += sum(sums) / len(sums) / k
        total.append(row / max(len(pos), 1) if sft else row)
    return sum(total) / len(total) if sft else sum(total) / tokens.numel()


@pytest.mark.parametrize("method_cls", [LLaDA, Dream])
def test_both_loss_estimators_estimate_the_same_objective(word, method_cls):
    """Exact oracle (:func:`_exact_loss`) for a batch of SFT rows with 4, 2 and 0 targets and for a batch of
    pretraining rows: both Monte-Carlo forms (``DLLMOptions.estimator``) must average to it; the ``count`` form
    must mask ``l ~ U{1..n}`` of a row's own targets, uniformly, never another row's count or a prompt
    position, and have the smaller variance."""
    torch.manual_seed(0)
    net = Transformer(ModelConfig(vocab_size=word.vocab_size, d_model=16, n_layers=1, n_heads=2, max_len=12)).eval()
    x = dllm_sft_rows(
        word,
        ["question : the pie answer :", "the baker bakes pie answer :", "question : the onion answer :"],
        ["1 2", "A", "B"],
        prompt_len=7,
        gen_len=4,
    )
    x[1, 1, 9:] = 0  # row 1: 2 targets; row 2: none (it must add 0 and change nothing else)
    x[2, 1] = 0
    tokens, target = split_rows(x)
    pre = tokens[:2, 6:]  # two pretraining rows of 5 tokens (every position a target)
    method = method_cls(word.info(), estimator="count")
    mask_id = method.mask_id
    with torch.no_grad():
        for rows, exact in (
            (x, _exact_loss(method, net, tokens, target)),
            (pre, _exact_loss(method, net, pre, torch.ones_like(pre, dtype=torch.bool))),
        ):
            # 2,000 draws of each estimator: 100 losses of the rows repeated 20 times (a batch's loss is the mean of
            # its rows' losses, each row's mask drawn on its own, so a loss here is the mean of 20 one-copy draws)
            tiled = rows.repeat(20, *([1] * (rows.dim() - 1)))
            variances = {}
            for est in ("time", "count"):
                m = method_cls(word.info(), estimator=est, eps=1e-6)
                gen = torch.Generator().manual_seed(1)
                vals = torch.tensor([m.loss(net, tiled, gen).item() for _ in range(100)])
                se = vals.std().item() / math.sqrt(len(vals))
                assert abs(vals.mean().item() - exact) < 4 * se, (est, vals.mean().item(), exact, se)
                variances[est] = vals.var().item()
            assert variances["count"] < variances["time"] / 2
    # the count form masks l of each row's own n targets, l uniform on 1..n, never a prompt position
    seen = []

    def spy(xt):
        seen.append(xt == mask_id)
        return net(xt)

    spy.cfg = net.cfg
    gen = torch.Generator().manual_seed(2)
    for _ in range(800):
        method.loss(spy, x, gen)
    masks = torch.stack(seen)  # (draws, B, T)
    assert not masks[:, ~target].any()
    for b, n in ((0, 4), (1, 2)):
        counts = masks[:, b].sum(-1)
        freq = torch.bincount(counts, minlength=n + 1)[1:].float() / len(seen)
        assert counts.min() >= 1 and counts.max() <= n
        assert torch.allclose(freq, torch.full_like(freq, 1 / n), atol=0.06), (b, freq)
    with pytest.raises(ValueError, match="unknown loss estimator"):
        method_cls(word.info(), estimator="stratified")


# ---------------------------------------------------------------------- the backbones' decoder
@pytest.mark.parametrize("rule", ["low_confidence", "entropy"])
def test_decode_commits_m_per_step_and_never_revises(word, rule):
    b = backbone(word)
    opts = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2, confidence=rule)
    x = dllm_prompt_rows(word, PROMPTS, 12, 8)
    out, stats = decode(b, x, opts)
    assert stats["nfe"] == 4 and not (out == word.mask_id).any()
    assert torch.equal(out[:, :12], x[:, :12])
    # the states the backbone saw: m new tokens per iteration, inside the current block, never revised
    seen = []

    class Spy:
        mask_id, blocked = b.mask_id, b.blocked

        def logits(self, x):
            seen.append(x.clone())
            return b.logits(x)

    again, _ = decode(Spy(), x, opts)
    assert torch.equal(again, out) and len(seen) == 4
    states = seen + [out]
    for n in range(4):
        new = (states[n] == word.mask_id) & (states[n + 1] != word.mask_id)
        assert new.sum(-1).tolist() == [2, 2]
        block = 12 + 4 * (n // 2)
        assert new[:, block : block + 4].sum().item() == 4
        keep = states[n] != word.mask_id
        assert torch.equal(states[n + 1][keep], states[n][keep])


def test_k1_and_w0_reproduce_the_backbone_bit_for_bit(word, bpe):
    """``w = 0`` is the backbone's decoder whatever the candidates; ``K = 1`` too when candidate 0 is the greedy
    ``x0`` (``greedy_first``), and not when it is drawn (the released code's default, at temperature 0.1)."""
    for tok, shift, rule in ((word, True, "entropy"), (bpe, False, "low_confidence")):
        b, p = backbone(tok, shift=shift), proxy(word)
        opts = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2, confidence=rule)
        x = dllm_prompt_rows(tok, PROMPTS * 4, 30, 8)
        plain, _ = decode(b, x, opts)
        for K, w in ((1, 1.0), (3, 0.0)):
            out, stats = energy_decode(
                b,
                ProxyBridge(p, tok),
                x,
                opts,
                DLLMEnergyOptions(energy="uni", K=K, w=w, greedy_first=True),
                torch.Generator().manual_seed(0),
            )
            assert torch.equal(out, plain), (K, w)
        assert stats["window_iterations"] == 0
        out, _ = energy_decode(
            b,
            ProxyBridge(p, tok),
            x,
            opts,
            DLLMEnergyOptions(energy="uni", K=1, w=0.0),
            torch.Generator().manual_seed(0),
        )
        assert torch.equal(out, plain)
        drawn, _ = energy_decode(
            b,
            ProxyBridge(p, tok),
            x,
            opts,
            DLLMEnergyOptions(energy="uni", K=1, w=1.0, temperature=5.0),
            torch.Generator().manual_seed(0),
        )
        assert not torch.equal(drawn, plain)  # a hot draw (a random tiny model) leaves the greedy path


def test_window_is_the_first_w_of_the_iterations():
    assert [in_window(n, 4, 0.2) for n in range(4)] == [True, False, False, False]
    assert [in_window(n, 4, 0.0) for n in range(4)] == [False] * 4
    assert [in_window(n, 10, 0.2) for n in range(10)] == [True, True] + [False] * 8


def test_algorithm3_changes_decoding_and_is_seeded(word, bpe):
    b, p = backbone(bpe), proxy(word)
    opts = DecodeOptions(gen_length=8, block_length=8, tokens_per_step=2)
    x = dllm_prompt_rows(bpe, PROMPTS * 4, 30, 8)
    e = DLLMEnergyOptions(energy="ind", K=3, w=1.0, temperature=1.0)  # hot candidates: they disagree
    a, sa = energy_decode(b, ProxyBridge(p, bpe), x, opts, e, torch.Generator().manual_seed(0))
    c, _ = energy_decode(b, ProxyBridge(p, bpe), x, opts, e, torch.Generator().manual_seed(0))
    plain, _ = decode(b, x, opts)
    assert torch.equal(a, c) and not (a == bpe.mask_id).any()
    assert not torch.equal(a, plain)
    assert sa["window_iterations"] == 4 and sa["proxy_forwards"] >= 4


def test_energies_b2_k3_match_row_by_row(word, bpe):
    """B=2, K=3: each row's energies equal those computed for that row alone (no mixing across B or K)."""
    b, p = backbone(bpe), proxy(word)
    x = dllm_prompt_rows(bpe, PROMPTS, 30, 8)
    logp = normalise(b.logits(x), (bpe.mask_id, *b.blocked))
    g = torch.Generator().manual_seed(3)
    from unie.core.gumbel import gumbel_argmax

    x0 = torch.stack([gumbel_argmax(logp, g) for _ in range(3)], 1)
    x0 = torch.where(x[:, None] == bpe.mask_id, x0, x[:, None])
    xs = torch.where(torch.arange(38) < 34, x0, x[:, None])
    bridge = ProxyBridge(p, bpe)
    for name in ("ind", "inv", "uni"):
        for ctx in ("teacher_forced", "teacher_forced_carry_over"):
            E = energy_fn(name, x, x0, xs, logp, bridge, ctx, bpe.mask_id)
            assert E.shape == (2, 3) and torch.isfinite(E).all()
            for r in range(2):
                Er = energy_fn(
                    name, x[r : r + 1], x0[r : r + 1], xs[r : r + 1], logp[r : r + 1], bridge, ctx, bpe.mask_id
                )
                assert torch.allclose(E[r : r + 1], Er, atol=1e-9), (name, ctx)


# ---------------------------------------------------------------------- the tokenizer bridge
class UnigramAR:
    """A proxy whose next-token distribution ignores the context: log p(word) is known exactly."""

    def __init__(self, tok):
        self.tokenizer, self.bos_id, self.eos_id = tok, tok.bos_id, tok.eos_id
        g = torch.Generator().manual_seed(0)
        self.table = torch.randn(tok.vocab_size, generator=g, dtype=torch.float64).log_softmax(-1)

    def logits(self, x):
        return self.table.expand(x.shape[0], x.shape[1], -1).clone()


def test_bridge_maps_word_scores_to_the_last_piece(word, bpe):
    ar = UnigramAR(word)
    text = "the baker bakes the onion pie"
    ids = [bpe.eos_id, bpe.bos_id] + bpe.encode(text) + [bpe.eos_id, bpe.eos_id]
    pieces = [bpe.surfaces()[i] for i in ids]
    lp = ProxyBridge(ar, bpe).position_logp(torch.tensor([ids]))[0]
    # expected: each word's log p at the DLLM position of its last piece, <eos> at the first <eos>
    expected = torch.zeros(len(ids), dtype=torch.float64)
    words = text.split()
    w = 0
    for i in range(2, len(ids) - 2):
        nxt = pieces[i + 1] if i + 1 < len(ids) - 2 else " "
        if nxt.startswith(" ") or i == len(ids) - 3:
            expected[i] = ar.table[word.encode(words[w])[0]]
            w += 1
    expected[len(ids) - 2] = ar.table[word.eos_id]
    assert w == len(words)
    assert torch.allclose(lp, expected)
    assert len(ids) - 4 > len(words)  # the two tokenizers really split differently
    # the same tokenizer on both sides: the identity map
    wid = [word.bos_id] + word.encode(text) + [word.eos_id]
    lpw = ProxyBridge(ar, word).position_logp(torch.tensor([wid]))[0]
    assert torch.allclose(lpw[1:], ar.table[torch.tensor(wid[1:])])
    # score_until cuts the scores (a word split by the cut is left to the block that completes it)
    br = ProxyBridge(ar, bpe)
    cut = br.position_logp(torch.tensor([ids]), score_until=5)[0]
    assert (cut[5:] == 0).all() and torch.equal(cut[:5], lp[:5])
    assert torch.equal(br.until(5).token_logp(torch.tensor([ids]), torch.tensor([[ids]]))[0, 0], cut)


def test_bridge_refuses_what_it_cannot_read(word, bpe):
    small = word_tokenizer([w for w in WORDS if w != "onion"], unk=True)
    br = ProxyBridge(UnigramAR(small), bpe)
    with pytest.raises(BridgeError, match="onion"):
        br.check(["question : the onion pie answer :"])
    with pytest.raises(BridgeError, match="teacher-forced"):
        br.token_logp(torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="cannot be read from a DLLM's candidates"):
        DLLMEnergyOptions(ar_context="exact")


# ---------------------------------------------------------------------- likelihood and AR decoding
class FixedDLLM:
    """Context-free mask predictor: every masked position has the same distribution q."""

    def __init__(self, V, mask_id):
        self.mask_id, self.blocked = mask_id, ()
        self.q = torch.randn(V, generator=torch.Generator().manual_seed(1)).log_softmax(-1)
        self.q[mask_id] = -30

    def logits(self, x):
        return self.q.expand(x.shape[0], x.shape[1], -1).clone()


def test_mc_elbo_is_exact_for_a_context_free_model():
    m = FixedDLLM(10, 9)
    q = normalise(m.logits(torch.zeros(1, 1, dtype=torch.long)), (9,))[0, 0]
    target = [1, 4, 4, 7, 2]
    exact = float(q[target].sum())
    est = mc_loglikelihood(m, [3, 3], target, mc_num=256, batch_size=32, generator=torch.Generator().manual_seed(0))
    assert abs(est - exact) < 0.05 * abs(exact)


def test_ar_greedy_batches_prompts_of_any_length(word):
    ar = proxy(word)
    prompts = [word.encode(p) for p in PROMPTS + ["the pie"]]
    batched = ar.greedy_continue(prompts, 5)
    for i, p in enumerate(prompts):
        assert torch.equal(batched[i], ar.greedy_continue([p], 5)[0])


# ---------------------------------------------------------------------- decoders and their errors
def test_build_decoder_errors(tmp_path):
    from unie.dllm.decoder import build_decoder

    with pytest.raises(ConfigError, match="unknown model_args.*Did you mean 'K'"):
        build_decoder({"pretrained": "x", "Kk": 3})
    with pytest.raises(ConfigError, match="unknown model_args.*Did you mean 'gen_length'"):
        build_decoder({"pretrained": "x", "gen_lenght": 8})
    with pytest.raises(Exception, match="missing checkpoint"):
        build_decoder({"pretrained": str(tmp_path / "nope")})
    with pytest.raises(ConfigError, match="unknown DLLM sampler 'fast_dlm'.*Did you mean 'fast_dllm'"):
        build_decoder({"pretrained": "x", "sampler": "fast_dlm"})
    with pytest.raises(ConfigError, match=r"\['K'\] are not options of DLLM sampler 'fast_dllm'"):
        build_decoder({"pretrained": "x", "sampler": "fast_dllm", "K": 3})


def test_model_args_parse_into_one_frozen_record():
    """lm-eval's model_args become one frozen ModelArgs: the sampler's options and the decoding options apart,
    every default in one place (the sampler from its options, the name from the directory)."""
    import dataclasses

    from unie.dllm.decoder import ModelArgs

    a = ModelArgs.parse(
        {
            "pretrained": "results/models/llada",
            "energy": "uni",
            "K": 2,
            "gen_length": 8,
            "proxy": "results/models/proxy",
            "seed": "3",
        }
    )
    assert a.sampler == "energy" and a.options == {"energy": "uni", "K": 2} and a.decoding == {"gen_length": 8}
    assert a.proxy == "results/models/proxy" and a.name == "llada" and a.seed == 3 and a.mc_num == 128
    assert ModelArgs.parse({"pretrained": "x"}).sampler == "plain"
    assert ModelArgs(pretrained="x/y") == ModelArgs.parse({"pretrained": "x/y"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.proxy = "other"
    with pytest.raises(ConfigError, match=r"\['style'\] do not apply to kind='unie'"):
        ModelArgs.parse({"pretrained": "x", "style": "dream"})


def test_the_sampler_and_its_proxy_are_decided_once():
    """default_sampler decides a decoder's sampler (from model_args, a row's options or an options object) and
    check_proxy whether it gets a proxy, for ModelArgs (before any model is loaded) and DLLMDecoder alike."""
    from unie.dllm.apd import APDOptions
    from unie.dllm.decoder import DLLMDecoder, ModelArgs, default_sampler
    from unie.dllm.energy_decoding import DLLMEnergyOptions

    assert [default_sampler(o) for o in (None, {}, {"energy": "uni"}, DLLMEnergyOptions(), APDOptions())] == [
        "plain",
        "plain",
        "energy",
        "energy",
        "apd",
    ]
    with pytest.raises(ConfigError, match="DecodeOptions is the options class of no single DLLM sampler"):
        default_sampler(DecodeOptions())
    with pytest.raises(ConfigError, match="'energy' needs a proxy"):
        ModelArgs(pretrained="x", options={"energy": "uni"})
    with pytest.raises(ConfigError, match="'plain' takes no proxy"):
        ModelArgs.parse({"pretrained": "x", "proxy": "results/models/proxy"})
    with pytest.raises(ConfigError, match="'energy' needs a proxy"):  # the options object names its sampler
        DLLMDecoder(None, None, 20, DecodeOptions(), DLLMEnergyOptions())
    with pytest.raises(ConfigError, match="'plain' takes no proxy"):
        DLLMDecoder(None, None, 20, DecodeOptions(), proxy=object())


def test_unie_list_shows_the_dllm_samplers_with_their_options(capsys):
    from unie.cli import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "DLLM samplers" in out and "fast_dllm: threshold=0.9" in out
    assert "energy: energy='uni', K=3, w=0.2" in out and "gen_length=16" in out
    assert main(["list", "--json"]) == 0
    reg = json.loads(capsys.readouterr().out)
    assert set(reg["dllm_samplers"]) == set(DLLM_SAMPLERS) and reg["dllm_samplers"]["apd"]["needs_proxy"]


def test_transfer_weights_by_token_string(word):
    from unie.pipeline.dllm_runs import transfer_weights

    small = word_tokenizer(WORDS[:10])
    old = net_for(small, causal=True)
    new = Transformer(
        ModelConfig(vocab_size=word.vocab_size, d_model=32, n_layers=2, n_heads=2, max_len=32, causal=False)
    )
    transfer_weights(new, old, word, small, log=lambda s: None)
    for t in ("baker", "<eos>", "<mask>"):
        assert torch.equal(new.embed.weight[word.tokens.index(t)], old.embed.weight[small.tokens.index(t)])
    assert torch.equal(new.blocks[0].attn.qkv.weight, old.blocks[0].attn.qkv.weight)
    with torch.no_grad():
        assert math.isfinite(float(new(torch.zeros(1, 4, dtype=torch.long)).sum()))


def test_transfer_weights_across_tokenizers_matches_the_text_a_token_adds(word, bpe):
    """A BPE model initialised from a word-level one: ``▁:`` takes ``:``'s row, pieces stay fresh."""
    from unie.pipeline.dllm_runs import transfer_weights

    old = net_for(word, causal=False)
    new = Transformer(
        ModelConfig(vocab_size=bpe.vocab_size, d_model=32, n_layers=2, n_heads=2, max_len=32, causal=False)
    )
    before = new.embed.weight.detach().clone()
    transfer_weights(new, old, bpe, word, log=lambda s: None)
    colon = bpe.tokens.index("▁:")
    assert torch.equal(new.embed.weight[colon], old.embed.weight[word.tokens.index(":")])
    assert torch.equal(new.head.weight[bpe.eos_id], old.head.weight[word.eos_id])
    piece = next(i for i, s in enumerate(bpe.surfaces()) if s and not s.startswith(" ") and s.isalpha())
    assert torch.equal(new.embed.weight[piece], before[piece])  # "k" of "ba k er" matches no word


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["tasks"]["names"].__setitem__(0, "toy_maths"), r"dllm.tasks.names\[0\]'.*toy_maths"),
        (lambda d: d["rows"]["llada_uni"].__setitem__("proxy", "nope"), r"dllm.rows.llada_uni.proxy'.*nope"),
        (lambda d: d["rows"]["llada_uni"].__setitem__("proxy", "llada"), "not an autoregressive model"),
        (lambda d: d["rows"]["llada"]["options"].__setitem__("energy", "uni"), "sampler 'energy' needs a proxy"),
        (lambda d: d["rows"]["llada"]["options"].__setitem__("sampler", "apd_"), "unknown DLLM sampler 'apd_'"),
        (lambda d: d["rows"]["llada"]["options"].update(sampler="fast_dllm", K=2), r"unknown option\(s\) \['K'\]"),
        (
            lambda d: d["rows"]["llada_uni"]["options"].__setitem__("ar_context", "masked"),
            r"llada_uni.options.ar_context'.*'masked'.*share its tokenizer: model 'llada' uses 'bpe'",
        ),
        (lambda d: d["energy"].__setitem__("ar_context", "masked"), r"dllm.energy.ar_context'.*dllm.rows.llada_uni\)"),
        (lambda d: d["rows"]["llada_uni"]["options"].__setitem__("K_", 3), "unknown option"),
        (lambda d: d["models"]["dream"].__setitem__("init_from", "nothing"), "init_from'.*nothing"),
        (lambda d: d["rows"]["llada_uni"].__setitem__("delta_to", "lladax"), r"llada_uni.delta_to'.*unknown row"),
        (lambda d: d["rows"]["llada_uni"].__setitem__("delta_to", "ar_large2"), "ar_large2' is appendix_only"),
        (
            lambda d: d["rows"]["llada"].__setitem__("attn_implementation", "eager"),
            r"dllm.rows.llada.attn_implementation'.*do not apply to kind='unie'",
        ),
        (
            lambda d: d["models"]["llada"]["options"].__setitem__("estimator", "antithetic"),
            r"dllm.models.llada.options.*unknown loss estimator 'antithetic'",
        ),
    ],
)
def test_bad_dllm_config_names_the_key(mutate, expected):
    import copy
    from pathlib import Path

    from unie.config.checks import check_dllm

    cfg = resolve_config([Path(__file__).parents[1] / "config" / "smoke.yaml"])
    check_dllm(cfg)
    bad = copy.deepcopy(cfg)
    mutate(bad["dllm"])
    with pytest.raises(ConfigError, match=expected):
        check_dllm(bad)


# ---------------------------------------------------------------------- Algorithm 3 against the toy world's exact pi
class ExactDLLM:
    """The toy world's exact denoiser (``pi(x0_i | visible tokens)``, :class:`OracleDenoiser`) as a DLLM backbone
    over rows ``[<bos>; words...]``; ``<eos>`` is blocked so every candidate is a sentence prefix of pi."""

    def __init__(self, hmm, tok):
        from unie.data.toy_world import OracleDenoiser

        self.den, self.tokenizer = OracleDenoiser(hmm, tok), tok
        self.mask_id, self.eos_id, self.bos_id = tok.mask_id, tok.eos_id, tok.bos_id
        self.blocked = (tok.bos_id, tok.eos_id)

    def logits(self, x):
        body = self.den.logp_x0(x[:, 1:])  # position 0 holds <bos>
        first = torch.full_like(body[:, :1], -math.inf)
        first[..., self.bos_id] = 0.0
        return torch.cat([first, body], dim=1)


class ExactAR:
    """The toy world's exact AR (:class:`OracleAR`) behind the proxy interface: ``logits(x)[:, k]`` scores
    ``x[:, k + 1]`` for rows that start with ``<bos>``."""

    def __init__(self, hmm, tok):
        from unie.data.toy_world import OracleAR

        self.ar, self.tokenizer, self.bos_id, self.eos_id = OracleAR(hmm, tok), tok, tok.bos_id, tok.eos_id

    def logits(self, x):
        lp = self.ar.logp_next(x[:, 1:]).double()
        return torch.cat([lp, torch.zeros_like(lp[:, :1])], dim=1)


def _pi_prefixes(hmm, n, L, seed):
    """``n`` word sequences of pi without ``<eos>`` (rejection), ``(n, L)``."""
    g, out = torch.Generator().manual_seed(seed), []
    while len(out) < n:
        out += [r for r in hmm.sample(4 * n, L, g) if not (r == hmm.eos_id).any()]
    return torch.stack(out[:n])


@pytest.mark.parametrize("name", ["ind", "inv", "uni"])
def test_algorithm3_energies_equal_the_exact_energies_of_pi(owt_hmm, tok, name, monkeypatch):
    """With the exact denoiser and the exact AR of the toy world, every energy Algorithm 3 computes (B=2, K=3,
    every window iteration, two blocks) equals the energy's definition evaluated with pi's exact marginals
    (forward algorithm) over the prompt and the current block, up to one constant per row, and picks the same
    candidate.  The oracle: ``log p_AR(a|b) = log pi(a_<end) - log pi(b_<end)`` with ``end`` the block's end."""
    import unie.dllm.energy_decoding as alg3

    hmm = owt_hmm
    dllm, proxy_ = ExactDLLM(hmm, tok), ExactAR(hmm, tok)
    prompts = _pi_prefixes(hmm, 2, 6, seed=5)
    x = torch.cat([torch.full((2, 1), tok.bos_id), prompts, torch.full((2, 8), tok.mask_id)], dim=1)
    calls = []

    def spy(selection, *args, **kw):  # selection_energy(selection, name, xt, x0, xs, logp, scorer, ctx, mask_id)
        assert selection == "argmin"
        E = selection_energy(selection, *args, **kw)
        calls.append((args, E, args[5].score_until))
        return E

    monkeypatch.setattr(alg3, "selection_energy", spy)
    bridge = ProxyBridge(proxy_, tok)
    opts = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2)
    out, stats = energy_decode(
        dllm,
        bridge,
        x,
        opts,
        DLLMEnergyOptions(energy=name, K=3, w=1.0, temperature=1.0),
        torch.Generator().manual_seed(0),
    )
    assert stats["window_iterations"] == 4 and len(calls) == 4

    def log_pi(y, visible):  # exact log pi of the visible words (position 0 is <bos>)
        return (
            hmm.log_marginal(
                y[..., 1:].clamp(max=hmm.V - 1).reshape(-1, y.shape[-1] - 1),
                visible[..., 1:].reshape(-1, y.shape[-1] - 1),
            )
            .view(y.shape[:-1])
            .double()
        )

    checked = 0
    for (_, xt, x0, xs, logp, _, ctx, mask_id), E, end in calls:
        assert ctx == "teacher_forced" and end in (11, 15)
        pos = torch.arange(x.shape[1])
        before = pos < end
        A0 = log_pi(x0, before.expand_as(x0))
        As = log_pi(xs, (xs != mask_id) & before)
        At = log_pi(xt, (xt != mask_id) & before)[:, None]
        M_t = (xt == mask_id)[:, None].expand_as(x0)
        D = M_t & (xs != mask_id)
        assert not M_t[..., end:].any()  # later positions are filled, not masked: only the block is scored
        lq = logp.double()[:, None].expand(-1, 3, -1, -1)
        lq_x0 = torch.where(M_t, lq.gather(-1, x0[..., None]).squeeze(-1), 0.0).sum(-1)
        lq_xs = torch.where(D, lq.gather(-1, xs[..., None]).squeeze(-1), 0.0).sum(-1)
        exact = {
            "ind": lq_x0 - (A0 - At),
            "inv": (lq_xs - (As - At)) + ((A0 - At) - (A0 - As)),
            "uni": (lq_xs - (As - At)) + (lq_x0 - (A0 - As)),
        }[name]
        diff = E.double() - exact  # (B, K): one constant per row (teacher forcing drops log pi(xt_<end))
        assert (diff.max(-1).values - diff.min(-1).values).abs().max() < 1e-3, (name, diff)
        distinct = (exact.max(-1).values - exact.min(-1).values) > 1e-2
        assert torch.equal(E.argmin(-1)[distinct], exact.argmin(-1)[distinct])
        checked += int(distinct.sum())
    assert checked >= 2  # the candidates really differed on some rows
    assert not (out == tok.mask_id).any()


def test_bridge_with_two_tokenizers_sums_to_exact_pi(owt_hmm, tok):
    """A BPE DLLM tokenizer that splits toy words into pieces, the exact AR of pi on the word tokenizer: for
    sentences of pi, the bridged per-position scores sum to ``log pi`` of the words completed before the cut
    ``score_until`` (forward algorithm), for every cut."""
    hmm, word_tok = owt_hmm, tok
    seqs = _pi_prefixes(hmm, 3, 10, seed=7)
    texts = [word_tok.decode(s.tolist()) for s in seqs]
    bpe_ = bpe_tokenizer(
        [word_tok.decode(s.tolist()) for s in hmm.sample(200, 12, torch.Generator().manual_seed(1))], 60
    )
    bridge = ProxyBridge(ExactAR(hmm, word_tok), bpe_)
    surf = bpe_.surfaces()
    split_some = False
    for text, s in zip(texts, seqs):
        pieces = bpe_.encode(text)
        split_some |= len(pieces) > len(s)
        ids = torch.tensor([[bpe_.bos_id] + pieces])
        # each word's last piece (the next piece starts with a space, or the row ends)
        ends = [i for i in range(1, ids.shape[1]) if i + 1 == ids.shape[1] or surf[int(ids[0, i + 1])].startswith(" ")]
        for cut in range(2, ids.shape[1] + 1):
            got = float(bridge.position_logp(ids, score_until=cut).sum())
            n_words = sum(e < cut for e in ends)
            visible = torch.arange(len(s)) < n_words
            want = float(hmm.log_marginal(s[None], visible[None])[0])
            assert abs(got - want) < 1e-3, (text, cut, got, want)
    assert split_some


def test_paired_delta_se_matches_its_formula_and_pairs_items_by_doc_id():
    """s.e. of mean(row - backbone) = sd(d, ddof=1) / sqrt(n) over the items both rows scored, paired by doc_id
    (effect.json's per-task ``se``, Table 3's ``delta_se``; x 100, points)."""
    from unie.eval.metrics import paired_effect

    def se(row, base):
        e = paired_effect(
            {"t": {i: (s, "") for i, s in row.items()}}, {"t": {i: (s, "") for i, s in base.items()}}, ["t"]
        )
        return e["tasks"]["t"]["se"] / 100

    base = {0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0, 4: 1.0}
    row = {4: 1.0, 3: 1.0, 2: 0.0, 1: 0.0, 0: 1.0, 9: 1.0}  # another order, one item the backbone lacks
    d = [0.0, 0.0, -1.0, 1.0, 0.0]
    mean = sum(d) / 5
    expected = (sum((x - mean) ** 2 for x in d) / 4) ** 0.5 / 5**0.5
    assert se(row, base) == pytest.approx(expected)
    assert se(base, base) == 0.0
    assert math.isnan(se({0: 1.0}, base))


def test_item_records_read_the_newest_run_and_a_group_through_its_subtasks(tmp_path):
    """Per-item scores for the paired s.e.: only the newest lm-eval run's samples, a group (MMLU) paired on
    (subtask, doc_id), the metric's filter only; a task without samples is left out."""
    import json
    import os

    from unie.pipeline.tables_figures import item_records

    d = tmp_path / "row" / "model"
    d.mkdir(parents=True)

    def run(stamp, value, mtime):
        res = d / f"results_{stamp}.json"
        res.write_text(json.dumps({"group_subtasks": {"mmlu": ["mmlu_a", "mmlu_b"], "mmlu_a": [], "mmlu_b": []}}))
        os.utime(res, (mtime, mtime))
        for sub in ("mmlu_a", "mmlu_b", "gsm8k"):
            recs = [
                {"doc_id": i, "filter": f, "acc": value, "exact_match": value}
                for i in range(2)
                for f in ("none", "strict-match")
            ]
            (d / f"samples_{sub}_{stamp}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))

    run("old", 0.0, 1_000)
    run("new", 1.0, 2_000)
    got = {
        t: {k: score for k, (score, _) in recs.items()}
        for t, recs in item_records(
            tmp_path / "row",
            ["mmlu", "gsm8k", "hellaswag"],
            {"mmlu": "acc,none", "gsm8k": "exact_match,strict-match", "hellaswag": "acc,none"},
        ).items()
    }
    assert got["mmlu"] == {(s, i): 1.0 for s in ("mmlu_a", "mmlu_b") for i in range(2)}
    assert got["gsm8k"] == {("gsm8k", 0): 1.0, ("gsm8k", 1): 1.0} and "hellaswag" not in got


def test_trim_padding_drops_only_columns_that_are_padding_in_every_row(word):
    """DLLM layout: the leading <eos> pads go, the answer's <eos> positions (trained) stay; AR layout: the
    trailing pads after the answer's first <eos> go.  content_lengths measures the same span per row."""
    from unie.data.dllm_format import content_lengths, trim_padding

    x = dllm_sft_rows(word, PROMPTS, ["1 2", "[ 1 3 ]"], prompt_len=12, gen_len=8)
    lead = [12 - 1 - len(word.encode(p)) for p in PROMPTS]
    t = trim_padding(x, word.eos_id)
    assert t.shape[-1] == x.shape[-1] - min(lead)
    assert torch.equal(t, x[..., min(lead) :]) and torch.equal(t[:, 1, -8:], x[:, 1, -8:])
    assert content_lengths(x, word.eos_id).tolist() == [20 - n for n in lead]
    r = ar_sft_rows(word, PROMPTS, ["1 2", "[ 1 3 ]"], 20)
    ends = [len(word.encode(p)) + len(word.encode(a)) + 1 for p, a in zip(PROMPTS, ["1 2", "[ 1 3 ]"])]
    assert trim_padding(r, word.eos_id).shape[-1] == max(ends)
    assert content_lengths(r, word.eos_id).tolist() == ends
    pre = torch.zeros(3, 7, dtype=torch.long)
    assert trim_padding(pre, word.eos_id) is pre and content_lengths(pre, word.eos_id).tolist() == [7] * 3


def test_decoder_pads_prompts_to_the_batch_only_for_a_bucketed_model(word, monkeypatch):
    """A model trained on length-bucketed batches never saw its bucket's rows padded to the longest prompt of
    the whole task mix: its decoder pads to the batch's longest prompt; the others to the trained prompt_len,
    and both refuse a prompt longer than prompt_len."""
    import unie.dllm.decoder as decoder

    seen = []
    real = decoder.dllm_prompt_rows
    monkeypatch.setattr(decoder, "dllm_prompt_rows", lambda tok, p, P, G: seen.append(P) or real(tok, p, P, G))
    opts = DecodeOptions(gen_length=4, block_length=4, tokens_per_step=2)
    longest = 1 + max(len(word.encode(p)) for p in PROMPTS)
    for pad_to_batch, expected in ((False, 20), (True, longest)):
        dec = decoder.DLLMDecoder(backbone(word), word, 20, opts, pad_to_batch=pad_to_batch)
        texts, _ = dec.generate(PROMPTS, 4)
        assert len(texts) == 2 and seen[-1] == expected
        with pytest.raises(ValueError, match="prompt_len"):
            dec.check(["question : " + "the pie " * 12 + "answer :"])


class EosLeaning:
    """A tiny random DLLM whose ``<eos>`` logit gets ``bonus`` at every position: rows commit their ``<eos>`` at
    different iterations, so an early exit has something to skip."""

    def __init__(self, b, bonus):
        self.b, self.bonus = b, bonus
        self.mask_id, self.eos_id, self.bos_id, self.blocked = b.mask_id, b.eos_id, b.bos_id, b.blocked
        self.vocab_size, self.tokenizer, self.net = b.vocab_size, b.tokenizer, b.net

    def _lean(self, logits):
        logits = logits.clone()
        logits[..., self.eos_id] += self.bonus
        return logits

    def logits(self, x):
        return self._lean(self.b.logits(x))

    def logits_and_attention(self, x, n_layers):
        logits, A = self.b.logits_and_attention(x, n_layers)
        return self._lean(logits), A


@pytest.mark.parametrize("sampler", sorted(DLLM_SAMPLERS))
def test_early_exit_keeps_every_completion_and_saves_forwards(word, sampler):
    """``DecodeOptions.early_exit`` (stop once every row has a committed <eos> with no mask before it) gives every
    sampler the same completion text (up to the first <eos>) as decoding all N iterations, B = 6, 3 blocks."""
    entry = DLLM_SAMPLERS[sampler]
    b = EosLeaning(backbone(word, seed=3), bonus=4.0)
    x = dllm_prompt_rows(word, PROMPTS * 3, 12, 12)
    options = entry.options_cls(**({"energy": "uni", "K": 3, "w": 0.5} if sampler == "energy" else {}))
    kw = {"proxy": ProxyBridge(proxy(word), word)} if entry.needs_proxy else {}
    outs = {}
    for early in (False, True):
        opts = DecodeOptions(gen_length=12, block_length=4, tokens_per_step=2, early_exit=early)
        out, stats = entry.fn(b, x, opts, options, generator=[torch.Generator().manual_seed(i) for i in range(6)], **kw)
        assert not (out == word.mask_id).any()
        texts = []
        for row in out[:, 12:].tolist():
            texts.append(row[: row.index(word.eos_id)] if word.eos_id in row else row)
        outs[early] = (texts, stats["nfe"])
    assert outs[True][0] == outs[False][0]
    assert outs[True][1] <= outs[False][1]
    if sampler in ("plain", "energy", "core", "fast_dllm"):
        assert outs[True][1] < outs[False][1], outs  # the <eos>-leaning rows settle before the last block


@pytest.mark.parametrize("sampler", sorted(DLLM_SAMPLERS))
def test_horizon_limits_what_the_network_sees(word, sampler):
    """``DecodeOptions.horizon`` (TraceRL's further_horizon): the network is run on the prompt, the decoded blocks,
    the current block and ``horizon`` positions more; a horizon reaching the canvas's end decodes exactly as the
    whole canvas; every sampler decodes to the end behind it."""
    from unie.dllm.backbone import Horizon, with_horizon

    entry = DLLM_SAMPLERS[sampler]
    b = EosLeaning(backbone(word, seed=4), bonus=1.0)
    seen = []

    class Spy(EosLeaning):
        def logits(self, x):
            seen.append(x.shape[1])
            return super().logits(x)

        def logits_and_attention(self, x, n_layers):
            seen.append(x.shape[1])
            return super().logits_and_attention(x, n_layers)

    spy = Spy(b.b, 1.0)
    x = dllm_prompt_rows(word, PROMPTS * 3, 12, 12)
    options = entry.options_cls(**({"energy": "uni", "K": 3, "w": 0.5} if sampler == "energy" else {}))
    kw = {"proxy": ProxyBridge(proxy(word), word)} if entry.needs_proxy else {}
    gens = lambda: [torch.Generator().manual_seed(i) for i in range(6)]  # noqa: E731
    outs = {}
    for h in (None, 8, 4):
        opts = DecodeOptions(gen_length=12, block_length=4, tokens_per_step=2, early_exit=False, horizon=h)
        seen.clear()
        outs[h], _ = entry.fn(with_horizon(spy, opts), x, opts, options, generator=gens(), **kw)
        assert not (outs[h] == word.mask_id).any()
        if h == 4:  # block 0 ends at 16: the network saw at most 16 + 4 of the 24 positions at first
            assert seen and seen[0] == 20 and max(seen) <= 24
        if h is None:
            assert set(seen) == {24}
    assert torch.equal(outs[8], outs[None])  # 16 + 8 reaches the end: the whole canvas
    hz = Horizon(b, DecodeOptions(gen_length=12, block_length=4, tokens_per_step=2, horizon=4))
    lp = hz.logits(x)
    assert lp.shape == (6, 24, b.vocab_size) and (lp[:, 20:].argmax(-1) == word.eos_id).all()
    assert torch.equal(lp[:, :20], b.logits(x[:, :20]))
    with pytest.raises(ValueError, match="horizon"):
        DecodeOptions(horizon=-1)
