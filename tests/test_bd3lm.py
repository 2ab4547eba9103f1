"""BD3-LM (docs/baselines.md): the two-stream mask, the block NELBO, the reduction to MDLM at
block_size = L, the exact block denoiser (reference and KV-cached), and the block sampler's step allocation."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch

import unie.core.gumbel
import unie.methods.bd3lm as bd3s
from unie.methods.bd3lm import BD3LM, BD3Denoiser, block_diff_mask, block_nelbo, block_times, noisy_stream_logits
from unie.pipeline.model_files import build_method, load_wrapped, train_from_spec
from unie.methods.mdlm import MDLM, MDLMDenoiser, subs_logp
from unie.core.registry import METHODS, SAMPLERS
from unie.methods.mdlm import sample_mdlm
from unie.methods.bd3lm import allocate_steps, sample_bd3
from unie.core.schedule import make_schedule
from unie.data.tokenizer import blocked_ids
from unie.data.toy_world import OracleDenoiser


def _rows(*patterns):
    return torch.tensor([[c == "1" for c in p.replace(" ", "")] for p in patterns])


# ---------------------------------------------------------------------- the training mask
def test_block_diff_mask_by_hand_L8_block2():
    """Columns: noisy x_t positions 0..7, then clean x0 positions 0..7; blocks of 2."""
    want = _rows(
        "11000000 00000000",
        "11000000 00000000",  # noisy block 0: itself only
        "00110000 11000000",
        "00110000 11000000",  # noisy block 1: itself + clean block 0
        "00001100 11110000",
        "00001100 11110000",  # noisy block 2: itself + clean blocks 0-1
        "00000011 11111100",
        "00000011 11111100",  # noisy block 3: itself + clean blocks 0-2
        "00000000 11000000",
        "00000000 11000000",  # clean block 0: clean block 0
        "00000000 11110000",
        "00000000 11110000",  # clean block 1: clean blocks 0-1
        "00000000 11111100",
        "00000000 11111100",
        "00000000 11111111",
        "00000000 11111111",
    )
    got = block_diff_mask(8, 2)
    assert got.dtype == torch.bool and got.shape == (16, 16)
    assert torch.equal(got, want)


def test_block_diff_mask_L8_block4_and_extremes():
    want = _rows(
        *["11110000 00000000"] * 4, *["00001111 11110000"] * 4, *["00000000 11110000"] * 4, *["00000000 11111111"] * 4
    )
    assert torch.equal(block_diff_mask(8, 4), want)
    # block_size = L: two independent full-attention streams (the noisy one is plain MDLM)
    m = block_diff_mask(6, 6)
    assert m[:6, :6].all() and m[6:, 6:].all() and not m[:6, 6:].any() and not m[6:, :6].any()
    # block_size = 1: noisy i sees itself and clean < i; clean is causal
    m = block_diff_mask(5, 1)
    eye = torch.eye(5, dtype=torch.bool)
    assert torch.equal(m[:5, :5], eye) and torch.equal(m[:5, 5:], torch.ones(5, 5).tril(-1).bool())
    assert torch.equal(m[5:, 5:], torch.ones(5, 5).tril().bool()) and not m[5:, :5].any()
    with pytest.raises(ValueError, match="multiple"):
        block_diff_mask(6, 4)


def test_block_times_layout_and_reduction():
    t = block_times(8, 3, torch.Generator().manual_seed(0), 1e-3)
    assert t.shape == (8, 3) and t.dtype == torch.float32
    u = (t.double().flatten() - 1e-3) / (1 - 1e-3)
    assert sorted(torch.floor(u * 24).long().tolist()) == list(range(24))  # one per stratum over batch x blocks
    for b in range(3):  # each block index sees the whole range of t across the batch
        assert t[:, b].min() < 0.15 and t[:, b].max() > 0.85
    lo, hi = block_times(16, 2, torch.Generator().manual_seed(0), 1e-3, t_range=(0.3, 0.8)).aminmax()
    assert lo >= 0.3 and hi <= 0.8


# ---------------------------------------------------------------------- the network sees what the mask allows
@pytest.fixture
def net(net_factory):
    return net_factory(max_len=16, d_model=16)


def test_noisy_stream_cannot_see_later_clean_or_other_noisy_blocks(net, tok, random_words):
    L, bs = 12, 4
    g = torch.Generator().manual_seed(0)
    x0 = random_words(3, L, seed=1)
    xt = torch.where(torch.rand(3, L, generator=g) < 0.5, torch.full_like(x0, tok.mask_id), x0)
    with torch.no_grad():
        ref = noisy_stream_logits(net, xt, x0, bs)
        for b in range(L // bs):
            lo, hi = b * bs, (b + 1) * bs
            x0b, xtb = x0.clone(), xt.clone()
            x0b[:, lo:] = random_words(3, L - lo, seed=7)  # clean blocks >= b
            xtb[:, :lo], xtb[:, hi:] = tok.mask_id, 5  # other noisy blocks
            out = noisy_stream_logits(net, xtb, x0b, bs)
            assert torch.allclose(out[:, lo:hi], ref[:, lo:hi], atol=1e-5)
            if b > 0:  # ... but it does see the earlier clean blocks
                x0c = x0.clone()
                x0c[:, :lo] = (x0c[:, :lo] + 1) % tok.eos_id
                assert not torch.allclose(noisy_stream_logits(net, xt, x0c, bs)[:, lo:hi], ref[:, lo:hi], atol=1e-4)


def test_block_denoiser_is_exact_reference_and_kv_cache(net, tok, tok_info, random_words):
    """Sampler-facing logp for block b (prefix = clean blocks < b) equals the training noisy stream, both
    with the prefix re-encoded as clean stream and with the prefix in the KV cache (committed block by block)."""
    L, bs = 12, 4
    x0 = random_words(4, L, seed=2)
    g = torch.Generator().manual_seed(3)
    xt = torch.where(torch.rand(4, L, generator=g) < 0.6, torch.full_like(x0, tok.mask_id), x0)
    blocked = blocked_ids(tok_info)
    with torch.no_grad():
        train = subs_logp(noisy_stream_logits(net, xt, x0, bs), xt, tok.mask_id, blocked)
    den = BD3LM(tok_info, block_size=bs).wrap(net)
    assert isinstance(den, BD3Denoiser) and den.block_size == bs
    kv = den.new_cache()
    for b in range(L // bs):
        lo, hi = b * bs, (b + 1) * bs
        ref = den.logp_block(x0[:, :lo], xt[:, lo:hi])
        assert torch.allclose(ref, train[:, lo:hi], atol=1e-5)
        commit = x0[:, lo - bs : lo] if b else None
        cached = den.evaluate(kv, commit, xt[:, lo:hi])
        assert torch.allclose(cached, train[:, lo:hi], atol=1e-5)
        assert kv[0]["k"].shape[2] == lo  # the cache holds the clean prefix only
        rows = torch.tensor([True, False, True, False])
        sub = den.evaluate(kv, None, xt[rows, lo:hi], rows=rows)
        assert torch.allclose(sub, train[rows, lo:hi], atol=1e-5) and kv[0]["k"].shape[2] == lo


def test_joint_blocks_attend_to_each_other_only_when_asked(net, tok, tok_info):
    den = BD3LM(tok_info, block_size=2).wrap(net)
    prefix = torch.tensor([[1, 2, 3, 4]])
    xb = torch.tensor([[tok.mask_id, tok.mask_id, tok.mask_id, tok.mask_id]])
    xb2 = xb.clone()
    xb2[0, 0] = 7  # a revealed token in the group's first block
    sep, sep2 = den.logp_block(prefix, xb), den.logp_block(prefix, xb2)
    assert torch.allclose(sep[:, 2:], sep2[:, 2:], atol=1e-6)  # second block: prefix only
    joint, joint2 = den.logp_block(prefix, xb, joint=True), den.logp_block(prefix, xb2, joint=True)
    assert not torch.allclose(joint[:, 2:], joint2[:, 2:], atol=1e-4)


# ---------------------------------------------------------------------- block_size = L is MDLM
def test_loss_and_nll_with_one_block_equal_mdlm(net, tok_info, random_words):
    L = 12
    x0 = random_words(8, L, seed=4)
    bd3, mdlm = BD3LM(tok_info, block_size=L), MDLM(tok_info)
    a = bd3.loss(net, x0, torch.Generator().manual_seed(3))
    b = mdlm.loss(net, x0, torch.Generator().manual_seed(3))
    assert torch.allclose(a, b, rtol=1e-5, atol=0)
    a = bd3.nll(net, x0, torch.Generator().manual_seed(5))
    b = mdlm.nll(net, x0, torch.Generator().manual_seed(5))
    assert a.shape == (8,) and torch.allclose(a.double(), b.double(), rtol=1e-5)


def test_loss_spelled_out_backpropagates_and_nll_finite(net_factory, tok_info, random_words):
    net = net_factory(max_len=16).train()
    L, bs = 12, 4
    x0 = random_words(6, L, seed=5)
    method = BD3LM(tok_info, block_size=bs)
    loss = method.loss(net, x0, torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(1)
    t = block_times(6, 3, g, 1e-3)
    tt = t.repeat_interleave(bs, 1)
    xt = torch.where(
        unie.core.gumbel.uniform(x0.shape, g) < method.schedule.mask_prob(tt).double(),
        torch.full_like(x0, tok_info["mask_id"]),
        x0,
    )
    with torch.no_grad():
        lp = subs_logp(noisy_stream_logits(net, xt, x0, bs), xt, tok_info["mask_id"], blocked_ids(tok_info))
    lp = lp.gather(-1, x0[..., None]).squeeze(-1)
    want = -(torch.where(xt == tok_info["mask_id"], lp, torch.zeros_like(lp)) / tt).sum() / x0.numel()
    assert torch.isfinite(loss) and loss > 0 and torch.allclose(loss.detach(), want, rtol=1e-4)
    loss.backward()
    grads = [p.grad for p in net.parameters()]
    assert all(gr is not None and torch.isfinite(gr).all() for gr in grads)
    assert net.embed.weight.grad.abs().sum() > 0 and net.head.weight.grad.abs().sum() > 0
    nll = method.nll(net.eval(), x0, torch.Generator().manual_seed(0))
    # sequence 0 draws the lowest strata of t for all its blocks (the released (B, n_blocks) layout): may be 0
    assert nll.shape == (6,) and torch.isfinite(nll).all() and (nll >= 0).all() and nll.sum() > 0
    with pytest.raises(ValueError, match="multiple"):
        BD3LM(tok_info, block_size=5).loss(net, x0, torch.Generator())


class BlockOracle:
    """Exact block conditionals: ``log pi(x_i | x0^{<b}, visible tokens of block b)`` for ``i`` in block ``b``
    (the later blocks are missing; for an HMM that is the posterior on the sequence cut after the block)."""

    def __init__(self, hmm, mask_id: int, block_size: int):
        self.hmm, self.mask_id, self.bs = hmm, mask_id, block_size

    def logp_fn(self, x0):
        def fn(xt):
            B, L = xt.shape
            pos = torch.arange(L)
            out = torch.empty(B, L, self.hmm.V, dtype=torch.float64)
            for lo in range(0, L, self.bs):
                hi = lo + self.bs
                x = torch.where(pos < lo, x0, xt)[:, :hi]
                obs = (pos < lo)[:hi] | (xt[:, :hi] != self.mask_id)
                out[:, lo:hi] = self.hmm.posterior(x.clamp(max=self.hmm.V - 1), obs)[:, lo:hi]
            return out

        return fn


def test_block_nelbo_with_exact_block_conditionals_equals_exact_nll(owt_hmm, tok):
    """With exact block conditionals the block NELBO is an unbiased estimator of -log pi(x0) (per block the
    any-order identity, then the chain rule over blocks).  Tolerance as for MDLM: 4 paired s.e. + 0.3%."""
    g = torch.Generator().manual_seed(0)
    n, R, L, bs = 256, 8, 16, 4
    x0 = owt_hmm.sample(n, L, g)
    nll = -owt_hmm.log_marginal(x0)
    oracle, sched = BlockOracle(owt_hmm, tok.mask_id, bs), make_schedule("loglinear", 1e-3)
    draws = torch.stack(
        [block_nelbo(oracle.logp_fn(x0), x0, block_times(n, L // bs, g, 1e-3), sched, tok.mask_id, g) for _ in range(R)]
    )
    assert draws.shape == (R, n) and torch.isfinite(draws).all() and (draws >= 0).all()
    diff = draws.mean(0) - nll
    se = diff.std().item() / math.sqrt(n)
    assert abs(diff.mean().item()) < 4 * se + 0.003 * nll.mean().item(), (draws.mean().item(), nll.mean().item(), se)
    assert se < 0.02 * nll.mean().item()


# ---------------------------------------------------------------------- step allocation and the sampler
@pytest.mark.parametrize("n_blocks", [1, 3, 4, 8])
@pytest.mark.parametrize("steps", [1, 2, 4, 5, 8, 16, 32])
def test_allocate_steps_covers_blocks_and_sums_to_S(n_blocks, steps):
    units = allocate_steps(n_blocks, steps)
    assert sum(s for _, _, s in units) == steps
    assert [f for f, _, _ in units] == list(itertools.accumulate([0] + [g for _, g, _ in units[:-1]]))
    assert sum(g for _, g, _ in units) == n_blocks and all(g >= 1 and s >= 1 for _, g, s in units)
    sizes = [g for _, g, _ in units] if steps < n_blocks else [s for _, _, s in units]
    assert max(sizes) - min(sizes) <= 1  # an even spread
    if steps >= n_blocks:
        assert all(g == 1 for _, g, _ in units)
    else:
        assert len(units) == steps and all(s == 1 for _, _, s in units)


@pytest.mark.parametrize("L", [12, 16])
def test_sampler_with_one_block_is_mdlm_bit_for_bit(net, tok, tok_info, L):
    den = BD3LM(tok_info, block_size=L).wrap(net)
    mdlm = MDLMDenoiser(net, tok.mask_id, blocked_ids(tok_info))
    for steps in (L // 4, L // 2, L, 3 * L):
        a, sa = sample_bd3(den, 6, L, steps, torch.Generator().manual_seed(steps), batch_size=4)
        b, sb = sample_mdlm(mdlm, 6, L, steps, torch.Generator().manual_seed(steps), batch_size=4)
        assert torch.equal(a, b), steps
        assert sa["nfe"] == sb["nfe"] and sa["rows_evaluated"] == sb["rows_evaluated"]


@pytest.mark.parametrize("steps", [2, 4, 8, 16])  # L/8, L/4, L/2, L at L = 16
def test_sampler_takes_exactly_S_steps(net, tok, tok_info, monkeypatch, steps):
    L, bs, n = 16, 4, 5
    den = BD3LM(tok_info, block_size=bs).wrap(net)
    calls, dtypes = [], []
    real_step, real_noise = bd3s.mdlm_step, unie.core.gumbel.gumbel_noise

    def spy_step(xt, logp, a_t, a_s, mask_id, generator):
        calls.append(xt.shape)
        return real_step(xt, logp, a_t, a_s, mask_id, generator)

    def spy_noise(shape, generator, device=None):
        out = real_noise(shape, generator, device)
        dtypes.append(out.dtype)
        return out

    monkeypatch.setattr(bd3s, "mdlm_step", spy_step)
    monkeypatch.setattr(unie.core.gumbel, "gumbel_noise", spy_noise)
    x, stats = sample_bd3(den, n, L, steps, torch.Generator().manual_seed(0))
    assert len(calls) == steps == stats["steps"]  # S ancestral steps for the whole sequence
    width = bs * max(1, (L // bs) // steps)  # tokens denoised per step: one block, or a group when S < n_blocks
    assert all(c == (n, width) for c in calls)
    assert stats["nfe"] <= steps + stats["units"]  # + at most one noise-removal pass per unit
    assert dtypes and all(d == torch.float64 for d in dtypes)
    assert x.shape == (n, L) and x.dtype == torch.int64 and not (x == tok.mask_id).any() and not (x == tok.bos_id).any()


def test_sampler_reproducible_and_registered(net, tok, tok_info):
    den = BD3LM(tok_info, block_size=4).wrap(net)
    a, _ = sample_bd3(den, 7, 16, 8, torch.Generator().manual_seed(0), batch_size=3)
    b, _ = sample_bd3(den, 7, 16, 8, torch.Generator().manual_seed(0), batch_size=3)
    c, _ = sample_bd3(den, 7, 16, 8, torch.Generator().manual_seed(1), batch_size=3)
    d, _ = SAMPLERS["bd3lm"]({"dlm": den}, 7, 16, 8, torch.Generator().manual_seed(0), batch_size=3)
    assert torch.equal(a, b) and torch.equal(a, d) and not torch.equal(a, c)
    assert (a >= 0).all() and (a < tok.vocab_size).all()
    j, _ = sample_bd3(den, 7, 16, 2, torch.Generator().manual_seed(0), joint_blocks=True)
    assert not (j == tok.mask_id).any()


def test_registered_method_trains_and_loads(tmp_path, tok, random_words):
    from unie.data.tokens import write_token_file

    assert METHODS["bd3lm"] is BD3LM and build_method("bd3lm", tok.info(), {"block_size": 2}).block_size == 2
    tok.save(tmp_path / "tokenizer")
    write_token_file(
        tmp_path / "train.parquet",
        [random_words(16, 8, seed=0).numpy()],
        8,
        {"tokenizer": tok.info()["fingerprint"], "vocab_size": tok.vocab_size},
    )
    spec = {
        "method": "bd3lm",
        "options": {"block_size": 2},
        "arch": {"d_model": 16, "n_layers": 1, "n_heads": 2, "mlp_ratio": 2},
        "train": {"steps": 2, "batch_size": 4, "lr": 1e-3, "warmup": 1, "ckpt_every": 2, "log_every": 1},
    }
    train_from_spec(
        "bd3",
        spec,
        tmp_path / "train.parquet",
        tmp_path / "tokenizer",
        tmp_path / "out",
        tmp_path / "ckpt",
        seq_len=8,
        log=lambda _m: None,
    )
    den = load_wrapped(tmp_path / "out", tok)
    assert isinstance(den, BD3Denoiser) and den.block_size == 2
    x, stats = SAMPLERS["bd3lm"]({"dlm": den}, 3, 8, 2, torch.Generator().manual_seed(0))
    assert x.shape == (3, 8) and not (x == tok.mask_id).any() and stats["steps"] == 2


class OracleBlockDenoiser:
    """The sampler-facing interface of :class:`BD3Denoiser` (``new_cache``/``evaluate``) with the toy world's exact
    block conditionals ``pi(x_i | clean prefix, visible tokens of the current unit)``; the "cache" is the prefix."""

    def __init__(self, hmm, tok, block_size: int):
        self.mask_id, self.block_size, self.vocab_size = tok.mask_id, block_size, tok.vocab_size
        self.net = SimpleNamespace(device=torch.device("cpu"))
        self.den = OracleDenoiser(hmm, tok)

    def new_cache(self):
        return [{}]

    def evaluate(self, cache, commit, xb, rows=None, joint=False):
        prefix = cache[0].get("x", torch.zeros(xb.shape[0] if rows is None else rows.shape[0], 0, dtype=torch.long))
        if commit is not None:
            prefix = cache[0]["x"] = torch.cat([prefix, commit], 1)
        if rows is not None:
            prefix = prefix[rows]
        return self.den.logp_x0(torch.cat([prefix, xb], 1))[:, prefix.shape[1] :]


def test_sampler_with_exact_block_conditionals(owt_hmm, tok):
    """End to end with a perfect block denoiser: many steps per block approach exact samples from pi (the
    remaining excess is two adjacent tokens revealed in the same step); one step per block (S = L/4: each block
    of 4 adjacent tokens drawn independently) and two blocks per step (S = L/8) are clearly worse."""
    L, n = 16, 256
    den = OracleBlockDenoiser(owt_hmm, tok, 4)

    def nll(steps):
        x, st = sample_bd3(den, n, L, steps, torch.Generator().manual_seed(0))
        assert not (x == tok.mask_id).any() and st["steps"] == steps
        v = -owt_hmm.log_marginal(x) / L
        return v.mean().item(), v.std().item() / math.sqrt(n)

    data = (-owt_hmm.log_marginal(owt_hmm.sample(n, L, torch.Generator().manual_seed(9))) / L).mean().item()
    fine, se_fine = nll(1024)
    one, se_one = nll(4)
    two, se_two = nll(2)
    assert fine < data + 0.15
    assert one - fine > 4 * math.hypot(se_one, se_fine) and two - one > 4 * math.hypot(se_two, se_one)
