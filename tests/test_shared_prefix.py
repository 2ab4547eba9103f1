"""A causal proxy reading a prompt's candidates with the prompt computed once (``Transformer.forward_shared``, the
map's learned proxies): the same logits as a whole read to float rounding, the same read when nothing is shared."""

import pytest
import torch

from unie.core.options import ModelConfig
from unie.models.transformer import Transformer, prefix_groups, rotary_tables


def _net(causal=True, seed=0):
    torch.manual_seed(seed)
    return Transformer(ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, causal=causal, max_len=64)).eval()


def _rows(B=2, K=3, prompt=(14, 17), answer=(4, 7), single=True, seed=1):
    """B prompts with K candidates each (answers of different lengths, first tokens distinct within a prompt), plus
    one unrelated row; right-padded with token 1, shuffled.  Returns (x, the prompt length of each row or None)."""
    g = torch.Generator().manual_seed(seed)
    rows, plen = [], []
    for b in range(B):
        p = torch.randint(3, 40, (prompt[b % len(prompt)],), generator=g)
        for k in range(K):
            a = torch.randint(3, 40, (answer[0] + k,), generator=g)
            a[0] = 3 + b * K + k  # each candidate's first token its own: a prompt's candidates share the prompt only
            rows.append(torch.cat([p, a]))
            plen.append(len(p))
    if single:
        rows.append(torch.randint(3, 40, (20,), generator=g))
        plen.append(None)
    W = max(len(r) for r in rows)
    x = torch.stack([torch.cat([r, torch.ones(W - len(r), dtype=torch.long)]) for r in rows])
    perm = torch.randperm(len(rows), generator=g)
    return x[perm], [plen[i] for i in perm.tolist()]


def test_prefix_groups_find_each_prompts_candidates():
    """B = 2 prompts x K = 3 candidates and one unrelated row: two groups of three whose prefix is the prompt, the
    unrelated row read whole; every row in exactly one place."""
    x, plen = _rows()
    plan = prefix_groups(x)
    assert plan is not None
    assert sorted(plan.singles.tolist()) == [i for i, p in enumerate(plen) if p is None]
    assert sorted(plan.rows.tolist() + plan.singles.tolist()) == list(range(len(x)))
    assert sorted(torch.bincount(plan.group).tolist()) == [3, 3]
    for r, g in zip(plan.rows.tolist(), plan.group.tolist()):
        assert int(plan.plen[g]) == plen[r]  # the candidates differ from their first answer token on
        assert torch.equal(x[r, : plen[r]], x[plan.first[g], : plen[r]])


def test_forward_shared_is_the_whole_read_to_rounding():
    """Every position of every row (padding included) within 1e-5 of :meth:`Transformer.forward`."""
    net = _net()
    for seed in range(3):
        x, _ = _rows(seed=seed)
        with torch.no_grad():
            whole, shared = net(x), net.forward_shared(x)
        assert shared.shape == whole.shape and shared.dtype == whole.dtype
        assert (shared - whole).abs().max() < 1e-5


def test_forward_shared_is_the_whole_read_when_nothing_is_shared():
    """Rows that share nothing worth reading once, a single row, a bidirectional model: the whole read, bit for bit."""
    net = _net()
    g = torch.Generator().manual_seed(5)
    x = torch.randint(3, 40, (6, 12), generator=g)
    x[:, 0] = torch.arange(3, 9)  # no two rows start alike
    assert prefix_groups(x) is None and prefix_groups(x[:1]) is None
    with torch.no_grad():
        assert torch.equal(net.forward_shared(x), net(x))
        rows, _ = _rows()
        bidir = _net(causal=False)
        assert torch.equal(bidir.forward_shared(rows), bidir(rows))


def test_rotary_tables_of_each_rows_own_positions():
    """``(B, L)`` positions give each row the tables of its own ``(L,)`` positions, bit for bit."""
    pos = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])
    cos, sin = rotary_tables(pos, 8)
    for b in range(2):
        c, s = rotary_tables(pos[b], 8)
        assert torch.equal(cos[b], c) and torch.equal(sin[b], s)


def test_remembered_proxy_shares_prefixes_only_for_a_network():
    """The map's learned proxies (RememberedLM with share_prefixes): next-token scores within 1e-5 of the whole read;
    a model with its own next-token scores (the oracle), or one without unie's network, reads as before."""
    from unie.dllm.bridge import logits_next_token_logp
    from unie.dllm.oracle import RememberedLM
    from unie.methods.ar import ARModel

    lm = ARModel(_net(), bos_id=2, eos_id=1)
    x, _ = _rows()
    whole = logits_next_token_logp(lm, x)
    shared = RememberedLM(lm, share_prefixes=True).next_token_logp(x)
    assert shared.dtype == torch.float64 and shared.shape == whole.shape
    assert (shared - whole).abs().max() < 1e-5
    assert torch.equal(RememberedLM(lm).next_token_logp(x), whole)

    class OwnScores:
        def next_token_logp(self, x):
            return torch.zeros(x.shape[0], x.shape[1] - 1, dtype=torch.float64)

    class HFLike:  # logits(x) only, no unie network
        def logits(self, x):
            return torch.zeros(*x.shape, 40)

    assert not RememberedLM(OwnScores(), share_prefixes=True).share_prefixes
    assert not RememberedLM(HFLike(), share_prefixes=True).share_prefixes
    assert RememberedLM(lm, share_prefixes=True).share_prefixes


@pytest.mark.parametrize("min_saving", [0.0, 0.5])
def test_the_saving_threshold_decides_whether_to_share(min_saving):
    """``min_saving``: the plan is kept only when it computes at most ``1 - min_saving`` of the whole read's
    positions."""
    x, _ = _rows(prompt=(6, 6), answer=(8, 10), single=False)
    plan = prefix_groups(x, min_saving)
    N, W = x.shape
    if plan is not None:
        cost = len(plan.singles) * W + len(plan.plen) * int(plan.plen.max())
        cost += len(plan.rows) * (W - int(plan.plen.min()))
        assert cost <= (1 - min_saving) * N * W
    assert (plan is None) == (min_saving == 0.5)
