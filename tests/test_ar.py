"""The autoregressive model: KV-cache decoding, teacher-forced likelihood, sampling, the mask-aware loss."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from unie.methods.ar import AR, ARModel
from unie.core.gumbel import gumbel_argmax
from unie.core.options import ModelConfig
from unie.core.registry import METHODS, SAMPLERS
from unie.models.transformer import Transformer


@pytest.fixture
def causal_net(net_factory):
    return net_factory(causal=True, d_model=32, n_layers=2, n_heads=4, max_len=16)


@pytest.fixture
def model(causal_net, tok_info):
    return AR(tok_info).wrap(causal_net)


def test_kv_cache_token_by_token_equals_full_forward(causal_net, random_words):
    x = random_words(3, 12, seed=1)
    with torch.no_grad():
        full = causal_net(x)
        cache = causal_net.new_cache()
        steps = torch.cat([causal_net(x[:, i : i + 1], cache=cache) for i in range(12)], dim=1)
    assert len(cache) == 2 and cache[0]["k"].shape[2] == 12
    assert torch.allclose(steps, full, atol=1e-5)


def test_kv_cache_in_chunks_equals_full_forward(causal_net, random_words):
    x = random_words(2, 12, seed=2)
    with torch.no_grad():
        full = causal_net(x)
        cache = causal_net.new_cache()
        chunks = [causal_net(x[:, a:b], cache=cache) for a, b in ((0, 5), (5, 6), (6, 9), (9, 12))]
    assert torch.allclose(torch.cat(chunks, dim=1), full, atol=1e-5)


def test_causal_net_ignores_the_future(causal_net, random_words):
    x = random_words(2, 10, seed=3)
    y = x.clone()
    y[:, 6:] = (y[:, 6:] + 1) % 50
    with torch.no_grad():
        a, b = causal_net(x), causal_net(y)
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-6)
    assert not torch.allclose(a[:, 6:], b[:, 6:], atol=1e-4)


def test_logp_next_normalised_and_blocks_specials(model, tok_info, random_words):
    x = random_words(4, 10)
    logp = model.logp_next(x)
    assert logp.shape == (4, 10, tok_info["vocab_size"])
    assert torch.isneginf(logp[..., tok_info["mask_id"]]).all() and torch.isneginf(logp[..., tok_info["bos_id"]]).all()
    assert torch.allclose(logp.logsumexp(-1), torch.zeros(4, 10), atol=1e-5)
    # position i sees only ctx_<i: changing x_i changes predictions after i, not at i
    y = x.clone()
    y[:, 4] = (y[:, 4] + 1) % 50
    other = model.logp_next(y)
    assert torch.allclose(logp[:, :5], other[:, :5], atol=1e-6)
    assert not torch.allclose(logp[:, 5:], other[:, 5:], atol=1e-4)
    # the first position is predicted from <bos> alone
    bos = torch.full((4, 1), tok_info["bos_id"])
    assert torch.allclose(logp[:, 0], model.normalise(model.net(bos))[:, 0], atol=1e-6)


def test_log_prob_is_sum_of_gathered_logp_next_and_nll_is_its_negative(model, causal_net, tok_info, random_words):
    x = random_words(5, 10, seed=4)
    lp = model.log_prob(x)
    want = model.logp_next(x).gather(-1, x[..., None]).squeeze(-1).double().sum(-1)
    assert lp.shape == (5,) and lp.dtype == torch.float64
    assert torch.allclose(lp, want, atol=1e-6)
    assert (lp < 0).all()
    assert torch.equal(AR(tok_info).nll(causal_net, x), -lp)
    # and the training loss is the mean per-token NLL on clean inputs
    loss = AR(tok_info).loss(causal_net, x, torch.Generator().manual_seed(0))
    assert torch.allclose(loss.double(), -lp.sum() / x.numel(), atol=1e-5)


def test_sample_shape_validity_and_reproducibility(model, tok_info):
    a = model.sample(9, 7, torch.Generator().manual_seed(0), batch_size=4)
    b = model.sample(9, 7, torch.Generator().manual_seed(0), batch_size=4)
    c = model.sample(9, 7, torch.Generator().manual_seed(1), batch_size=4)
    assert a.shape == (9, 7) and a.dtype == torch.int64
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert not (a == tok_info["mask_id"]).any() and not (a == tok_info["bos_id"]).any()
    assert (a >= 0).all() and (a < tok_info["vocab_size"]).all()


def test_sample_with_cache_equals_sampling_with_full_forwards(model):
    """KV-cache sampling draws the same tokens as recomputing the whole prefix at every step."""
    n, L = 6, 8
    got = model.sample(n, L, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    x = torch.full((n, 1), model.bos_id)
    with torch.no_grad():
        for _ in range(L):
            logp = model.normalise(model.net(x)[:, -1])
            x = torch.cat([x, gumbel_argmax(logp, g)[:, None]], dim=1)
    assert torch.equal(got, x[:, 1:])


def test_sample_distribution_matches_logp(tok_info, net_factory):
    """L=1 samples follow the model's own next-token distribution after <bos>."""
    net = net_factory(causal=True, max_len=4, seed=5)
    with torch.no_grad():  # sharpen the random model so a few tokens carry most of the mass
        net.head.weight.mul_(40)
    m = AR(tok_info).wrap(net)
    n = 20_000
    x = m.sample(n, 1, torch.Generator().manual_seed(0), batch_size=n)[:, 0]
    p = m.normalise(net(torch.full((1, 1), m.bos_id)))[0, 0].double().exp()
    freq = torch.bincount(x, minlength=p.numel()).double() / n
    assert 0.5 * (freq - p).abs().sum() < 0.05


def test_mask_aware_loss_masks_inputs_not_targets(causal_net, tok_info, random_words):
    mask_id = tok_info["mask_id"]
    x0 = random_words(8, 12, seed=6)
    seen = []
    real_forward = causal_net.forward

    def spy(x, *a, **kw):
        seen.append(x.clone())
        return real_forward(x, *a, **kw)

    causal_net.forward = spy
    method = AR(tok_info, mask_inputs=True)
    loss = method.loss(causal_net, x0, torch.Generator().manual_seed(0))
    del causal_net.forward
    assert len(seen) == 1
    inputs = seen[0]
    assert (inputs[:, 0] == tok_info["bos_id"]).all()
    masked = inputs[:, 1:] == mask_id
    assert masked.any(), "the mask-aware loss must mask some inputs"
    assert not masked[0::2].any(), "even rows keep a clean context"
    assert torch.equal(inputs[:, 1:][~masked], x0[:, :-1][~masked])  # the rest is the shifted clean x0
    # targets are the clean x0 (a masked target would have log-probability -inf: the loss stays finite)
    assert torch.isfinite(loss) and loss > 0
    logp = AR(tok_info).wrap(causal_net).normalise(causal_net(inputs))
    assert torch.allclose(loss, F.nll_loss(logp.transpose(1, 2), x0), atol=1e-6)
    loss.backward()
    assert causal_net.embed.weight.grad[mask_id].abs().sum() > 0  # the mask embedding is trained
    # the same generator gives the same masking; the plain loss never masks
    assert torch.isfinite(AR(tok_info).loss(causal_net, x0, torch.Generator().manual_seed(0)))


def test_ar_registry_entries(model, tok_info):
    assert METHODS["ar"] is AR and AR.causal
    x, stats = SAMPLERS["ar"]({"ar": model}, 5, 6, 6, torch.Generator().manual_seed(0), batch_size=2)
    assert x.shape == (5, 6) and stats["nfe"] == 6 * 3
    assert torch.equal(x, model.sample(5, 6, torch.Generator().manual_seed(0), batch_size=2))
    with pytest.raises(ValueError, match="steps must be L"):
        SAMPLERS["ar"]({"ar": model}, 5, 6, 3, torch.Generator().manual_seed(0))


def test_armodel_without_mask_id(causal_net, tok_info, random_words):
    m = ARModel(causal_net, tok_info["bos_id"], None)
    logp = m.logp_next(random_words(2, 5))
    assert torch.isneginf(logp[..., tok_info["bos_id"]]).all()
    assert torch.isfinite(logp[..., tok_info["mask_id"]]).all()
    assert math.isclose(logp.exp().sum(-1).mean().item(), 1.0, rel_tol=1e-5)


def test_ar_with_bos_equal_to_eos_can_score_and_emit_eos():
    """GPT-2's BOS is its EOS (50256), a real data token: the AR must not block it.  A tokenizer with BOS = EOS:
    the training loss on data full of EOS is finite, and the sampler emits EOS."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from unie.data.tokenizer import Tokenizer, blocked_ids
    from unie.methods.ar import AR

    vocab = {w: i for i, w in enumerate(["a", "b", "c", "<|endoftext|>", "<|mask|>"])}
    rust = RustTokenizer(models.WordLevel(vocab, unk_token=None))
    rust.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf = PreTrainedTokenizerFast(
        tokenizer_object=rust, bos_token="<|endoftext|>", eos_token="<|endoftext|>", mask_token="<|mask|>"
    )
    tok = Tokenizer("hf", hf=hf)
    assert tok.bos_id == tok.eos_id == 3 and blocked_ids(tok.info()) == [4]
    method = AR(tok.info())
    torch.manual_seed(0)
    net = Transformer(ModelConfig(vocab_size=5, d_model=16, n_layers=1, n_heads=2, max_len=8, causal=True))
    x0 = torch.tensor([[0, 1, 3, 2, 0, 3, 3, 1]] * 4)  # documents end with EOS
    loss = method.loss(net, x0, torch.Generator().manual_seed(0))
    assert torch.isfinite(loss)
    with torch.no_grad():  # make EOS the likeliest next token everywhere
        net.head.weight.zero_()
        net.head.weight[3] = 1.0
        net.ln_f.bias.fill_(1.0)
    x = method.wrap(net).sample(4, 6, torch.Generator().manual_seed(0))
    assert (x == 3).any() and not (x == 4).any()


def _sample_reference(model, n, L, generator, batch_size=256):
    """The KV-cache sampler as it was before the preallocated cache: a per-layer dict cache, concatenated."""
    out = []
    for start in range(0, n, batch_size):
        b = min(batch_size, n - start)
        cache = model.net.new_cache()
        x = torch.full((b, 1), model.bos_id, dtype=torch.long)
        toks = []
        with torch.no_grad():
            for _ in range(L):
                nxt = gumbel_argmax(model.normalise(model.net(x, cache=cache)[:, -1]), generator)
                toks.append(nxt)
                x = nxt[:, None]
        out.append(torch.stack(toks, dim=1))
    return torch.cat(out)


def test_static_cache_sampler_draws_the_dict_cache_tokens_bit_for_bit(model):
    got = model.sample(7, 16, torch.Generator().manual_seed(4), batch_size=3)
    assert model.decode_path == "eager"
    assert torch.equal(got, _sample_reference(model, 7, 16, torch.Generator().manual_seed(4), batch_size=3))


def test_static_cache_logits_equal_the_dict_cache_and_fixed_shape_mode_is_close(causal_net, random_words):
    x = random_words(3, 12, seed=7)
    with torch.no_grad():
        grow, static = causal_net.new_cache(), causal_net.static_cache(16)
        pos = torch.zeros(1, dtype=torch.long)
        fixed = causal_net.static_cache(16, pos=pos)
        for i in range(12):
            a = causal_net(x[:, i : i + 1], cache=grow)
            assert torch.equal(causal_net(x[:, i : i + 1], cache=static), a)
            pos.fill_(i)
            assert torch.allclose(causal_net(x[:, i : i + 1], cache=fixed), a, atol=1e-5)
        assert static.n == 12
        with pytest.raises(ValueError, match="KV cache full"):
            causal_net(x[:, :5], cache=static)


def test_graphs_need_a_cuda_model(model):
    with pytest.raises(ValueError, match="CUDA"):
        model.sample(2, 4, torch.Generator().manual_seed(0), graphs=True)
