"""The room to act (unie.dllm.candidate_tree, unie.eval.room): the candidate tree of Algorithm 3's window against brute force
(every choice sequence replayed through the decoder itself), its rule paths against the decoder's own decodes, and
the room statistics against their formulas."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from unie.data.dllm_format import dllm_prompt_rows
from unie.dllm.backbone import DecodeOptions
from unie.dllm.bridge import ProxyBridge
from unie.dllm.energy_decoding import DLLMEnergyOptions, energy_decode
from unie.dllm.candidate_tree import Scorer, leaf_below, rule_leaf, subtree_leaves, window_tree
from unie.energy import energies as E

from test_dllm import PROMPTS, backbone, bpe, proxy, word  # noqa: F401  (fixtures)

OPTS = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2, confidence="entropy")


def _completion(ids, P, eos):
    ids = ids[P:].tolist()
    return ids[: ids.index(eos)] if eos in ids else ids


def _forced_decode(b, p, x, opts, eopts, gens, choices, monkeypatch):
    """energy_decode with the selection replaced by a fixed choice sequence (one index per window iteration)."""
    it = iter(choices)
    monkeypatch.setattr(
        "unie.dllm.energy_decoding.select",
        lambda energy, how, t, g: torch.full((energy.shape[0],), next(it), dtype=torch.long),
    )
    out, _ = energy_decode(b, ProxyBridge(p, b.tokenizer), x, opts, eopts, gens)
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("temperature", [0.1, 1.0, 5.0])
def test_the_tree_is_every_choice_sequence_of_the_decoder(word, temperature, monkeypatch):
    """B = 2 prompts, K = 3, a window of 2 iterations: the tree's leaves are exactly the completions of the 3^2
    decodes that force each choice sequence through energy_decode itself (brute force), item by item."""
    b, p = backbone(word, shift=True), proxy(word)
    eopts = DLLMEnergyOptions(energy="uni", K=3, w=0.5, temperature=temperature)  # N = 4: iterations 0, 1
    x = dllm_prompt_rows(word, PROMPTS, 30, 8)
    P = x.shape[1] - OPTS.gen_length
    seeds = [11, 12]
    trees = window_tree(b, x, OPTS, eopts, [torch.Generator().manual_seed(s) for s in seeds])
    assert len(trees) == 2
    for row, tree in enumerate(trees):
        brute = set()
        for choices in itertools.product(range(3), repeat=2):
            out = _forced_decode(
                b, p, x[row : row + 1], OPTS, eopts, [torch.Generator().manual_seed(seeds[row])], choices, monkeypatch
            )
            brute.add(tuple(_completion(out[0], P, word.eos_id)))
        leaves = {tuple(_completion(leaf, P, word.eos_id)) for leaf in tree.leaves}
        assert leaves == brute, (row, temperature)
        assert tree.exhaustive
    if temperature == 5.0:  # hot candidates: the tree branches
        assert max(len(t.leaves) for t in trees) > 1


def test_an_argmin_rows_decode_is_its_path_in_the_tree(word, bpe):  # noqa: F811
    """For each energy (and proxy_rerank), the leaf its scorer's argmin path reaches is the decoder's own decode of
    that row, with per-row generators as the lm-eval adapter passes them (B = 2, K = 3)."""
    for tok, shift, rule in ((word, True, "entropy"), (bpe, False, "low_confidence")):
        b, p = backbone(tok, shift=shift), proxy(word)
        opts = DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2, confidence=rule)
        x = dllm_prompt_rows(tok, PROMPTS, 30, 8)
        P = x.shape[1] - opts.gen_length
        bridge = ProxyBridge(p, tok)
        scorers = {f"{e}_{s}": Scorer(e, bridge, selection=s) for e in ("ind", "inv", "uni") for s in ("argmin",)}
        scorers["rerank"] = Scorer("uni", bridge, selection="proxy_rerank")
        eopts = DLLMEnergyOptions(energy="uni", K=3, w=1.0, temperature=2.0)
        trees = window_tree(b, x, opts, eopts, [torch.Generator().manual_seed(s) for s in (3, 4)], scorers)
        for name, s in scorers.items():
            o = DLLMEnergyOptions(energy=s.energy, K=3, w=1.0, temperature=2.0, selection=s.selection)
            out, _ = energy_decode(b, bridge, x, opts, o, [torch.Generator().manual_seed(s) for s in (3, 4)])
            for row, tree in enumerate(trees):
                leaf = rule_leaf(tree, name)
                assert leaf is not None
                assert _completion(tree.leaves[leaf], P, tok.eos_id) == _completion(out[row], P, tok.eos_id), name


def test_energies_at_a_node_are_the_decoders(word):  # noqa: F811
    """The energies the root records are selection_energy's on the root's candidates (B = 2, K = 3)."""
    b, p = backbone(word, shift=True), proxy(word)
    bridge = ProxyBridge(p, word)
    eopts = DLLMEnergyOptions(energy="ind", K=3, w=1.0, temperature=1.0)
    x = dllm_prompt_rows(word, PROMPTS, 30, 8)
    seen = []

    def spy(selection, name, *args, **kw):
        out = E.selection_energy(selection, name, *args, **kw)
        seen.append(out)
        return out

    import unie.dllm.energy_decoding as ed

    orig = ed.selection_energy
    ed.selection_energy = spy
    try:
        energy_decode(b, bridge, x, OPTS, eopts, [torch.Generator().manual_seed(s) for s in (5, 6)])
    finally:
        ed.selection_energy = orig
    trees = window_tree(
        b, x, OPTS, eopts, [torch.Generator().manual_seed(s) for s in (5, 6)], {"ind": Scorer("ind", bridge)}
    )
    for row in range(2):
        assert trees[row].nodes[0].energies["ind"] == pytest.approx(seen[0][row].double().tolist(), abs=1e-9)


def test_dedup_and_cap(word):  # noqa: F811
    b = backbone(word, shift=True)
    x = dllm_prompt_rows(word, PROMPTS[:1], 30, 8)
    cold = window_tree(b, x, OPTS, DLLMEnergyOptions(K=3, w=1.0, temperature=1e-4), [torch.Generator().manual_seed(0)])
    assert len(cold[0].leaves) == 1 and cold[0].exhaustive  # three identical candidates at each node: one node
    hot = window_tree(
        b, x, OPTS, DLLMEnergyOptions(K=3, w=1.0, temperature=50.0), [torch.Generator().manual_seed(0)], cap=2
    )
    assert not hot[0].exhaustive
    per_level = {}
    for n in hot[0].nodes[1:]:
        per_level[n.level] = per_level.get(n.level, 0) + 1
    assert max(per_level.values()) <= 2


def test_subtree_and_paths_on_a_hand_made_tree():
    from unie.dllm.candidate_tree import ItemTree, Node

    t = ItemTree(
        nodes=[
            Node(0, children=[1, 2, 1], energies={"s": [0.5, 0.1, 0.3]}),
            Node(1, leaf=0),
            Node(1, children=[3, 4, 3], energies={"s": [2.0, 1.0, 1.0]}),
            Node(2, leaf=1),
            Node(2, leaf=2),
        ],
        leaves=[torch.zeros(1)] * 3,
    )
    assert rule_leaf(t, "s") == 2  # root picks j=1 (0.1) -> node 2, which picks the first least (j=1) -> node 4
    assert subtree_leaves(t, 0) == [0, 1, 2] and subtree_leaves(t, 2) == [1, 2]
    assert leaf_below(t, 0, lambda nd: 0) == 0
    assert math.isfinite(t.nodes[0].energies["s"][0])


def test_a_cut_tree_keeps_every_rules_path(word):  # noqa: F811
    """Beyond the cap a tree keeps the nodes some scorer's argmin path goes through: each rule reaches the same
    completion as in the whole tree, while the tree itself is marked not exhaustive."""
    b, p = backbone(word, shift=True), proxy(word)
    bridge = ProxyBridge(p, word)
    scorers = {e: Scorer(e, bridge) for e in ("ind", "uni")}
    scorers["rerank"] = Scorer("uni", bridge, selection="proxy_rerank")
    eopts = DLLMEnergyOptions(K=3, w=1.0, temperature=20.0)
    x = dllm_prompt_rows(word, PROMPTS, 30, 8)
    P = x.shape[1] - OPTS.gen_length
    whole = window_tree(b, x, OPTS, eopts, [torch.Generator().manual_seed(s) for s in (7, 8)], scorers)
    cut = window_tree(b, x, OPTS, eopts, [torch.Generator().manual_seed(s) for s in (7, 8)], scorers, cap=1)
    assert all(t.exhaustive for t in whole) and not all(t.exhaustive for t in cut)
    for tw, tc in zip(whole, cut):
        assert len(tc.leaves) < len(tw.leaves) or len(tw.leaves) == 1
        for name in scorers:
            lw, lc = rule_leaf(tw, name), rule_leaf(tc, name)
            assert lc is not None
            assert _completion(tc.leaves[lc], P, word.eos_id) == _completion(tw.leaves[lw], P, word.eos_id), name
    # the energies a cut tree records along each rule's path are the whole tree's at the same nodes, at the cap
    # of one node (every node on a path) and of four with one rule (nodes kept up to the cap that no path takes,
    # left out of the rows the scorers read)
    off = 0
    for cap, names in ((1, list(scorers)), (2, list(scorers)), (4, ["ind"])):
        only = {n: scorers[n] for n in names}
        cut = window_tree(b, x, OPTS, eopts, [torch.Generator().manual_seed(s) for s in (7, 8)], only, cap=cap)
        for tw, tc in zip(whole, cut):
            for name in names:
                nw, nc = 0, 0
                while tc.nodes[nc].leaf is None:
                    ew, ec = tw.nodes[nw].energies[name], tc.nodes[nc].energies[name]
                    assert ec == ew and tc.nodes[nc].dlm_logp == tw.nodes[nw].dlm_logp, (cap, name)
                    j = min(range(len(ec)), key=lambda i: (ec[i], i))
                    nw, nc = tw.nodes[nw].children[j], tc.nodes[nc].children[j]
                assert tw.nodes[nw].leaf is not None
            off_path = [nd for nd in tc.nodes[1:] if not nd.paths and nd.leaf is None and not tc.exhaustive]
            off += sum(not nd.energies for nd in off_path)
    assert off > 0  # nodes off every path, past the cap, were kept and read by no scorer


# ---------------------------------------------------------------------- the room's statistics (unie.eval.room)
def test_room_effects_against_their_formulas():
    from unie.eval.room import room_effects

    leaves = {"a": {1: [1.0, 0.0], 2: [0.0], 3: [1.0, 1.0]}, "b": {1: [0.0, 1.0, 0.0], 2: [0.0, 0.0]}}
    base = {"a": {1: (0.0, "x"), 2: (0.0, "x"), 3: (1.0, "x")}, "b": {1: (1.0, "x"), 2: (0.0, "x")}}
    r = room_effects(leaves, base, ["a", "b"])
    # task a: ceiling gains on item 1 only (+1/3), floor none; task b: ceiling none, floor loses item 1 (-1/2)
    assert r["ceiling"]["tasks"]["a"]["delta"] == pytest.approx(100 / 3)
    assert r["floor"]["tasks"]["b"]["delta"] == pytest.approx(-50)
    assert r["ceiling"]["avg"]["delta"] == pytest.approx((100 / 3 + 0) / 2)
    se_a = 100 * math.sqrt(((1 - 1 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2) / math.sqrt(3)
    assert r["ceiling"]["tasks"]["a"]["se"] == pytest.approx(se_a)
    assert r["decides"]["tasks"] == {"a": pytest.approx(1 / 3), "b": pytest.approx(1 / 2)}
    assert r["decides"]["avg"] == pytest.approx(2 / 5)


def test_share_auc_and_break_even():
    from unie.dllm.candidate_tree import ItemTree, Node
    from unie.eval.room import break_even, pairwise_auc, share_of_ceiling

    s = share_of_ceiling([1, 0, 1, 0], [1, 1, 1, 0], [0, 0, 1, 0])
    assert s["share"] == pytest.approx(0.5) and s["se"] > 0
    assert share_of_ceiling([0, 0], [0, 0], [0, 0])["share"] is None  # no room: no share
    # root with three candidates: 0 -> right leaf, 1 -> wrong leaf, 2 -> the same child as 0
    t = ItemTree(
        nodes=[
            Node(0, children=[1, 2, 1], energies={"e": [0.1, 0.5, 0.2]}, dlm_logp=[-1.0, -0.5, -1.0]),
            Node(1, leaf=0),
            Node(1, leaf=1),
        ],
        leaves=[torch.zeros(1)] * 2,
    )
    right = pairwise_auc([t], [[1.0, 0.0]], lambda nd, j: -nd.energies["e"][j])
    wrong = pairwise_auc([t], [[1.0, 0.0]], lambda nd, j: nd.dlm_logp[j])
    assert right["auc"] == 1.0 and right["pairs"] == 2 and wrong["auc"] == 0.0  # pairs (0, 1) and (2, 1)
    assert pairwise_auc([t], [[1.0, 1.0]], lambda nd, j: 0.0)["auc"] is None  # no pair with different outcomes
    assert break_even([(0.5, -2.0), (0.7, -1.0), (0.9, 1.0)]) == pytest.approx(0.8)
    assert break_even([(0.5, 1.0), (0.9, 2.0)]) is None


def _loop_bootstrap(items, stat, reps=400, seed=0):
    """The bootstrap s.d. as its definition reads: ``reps`` resamples of ``items`` drawn one item at a time with
    ``random.Random(seed).randrange``, ``stat`` of each (None and NaN dropped), their sample s.d."""
    import random

    rng = random.Random(seed)
    vals = [stat([items[rng.randrange(len(items))] for _ in items]) for _ in range(reps)]
    vals = [v for v in vals if v is not None and not math.isnan(v)]
    if len(vals) < 2:
        return float("nan")
    m = sum(vals) / len(vals)
    return math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))


def _same(a, b):
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("n", [1, 2, 7, 300, 1400])
def test_the_summed_bootstraps_are_the_resample_loops_number_for_number(n):
    """share_of_ceiling, pairwise AUC and break-even s.e.: every resample's sums at once (the same draws of
    ``random.Random(0)``, reproduced by numpy) give the loop's s.e. bit for bit; with item values that cannot be summed
    in any order exactly (thirds), the loop itself."""
    import random

    from unie.eval import room

    rng = random.Random(n)
    row = [float(rng.random() < 0.4) for _ in range(n)]
    ceiling = [max(r, float(rng.random() < 0.6)) for r in row]
    base = [float(rng.random() < 0.3) for _ in range(n)]

    def share(sample):
        gain = sum(c - b for _, c, b in sample)
        return sum(r - b for r, _, b in sample) / gain if gain > 0 else None

    for scores in ((row, ceiling, base), ([v / 3 for v in row], ceiling, base)):
        items = list(zip(*scores))
        got = room.share_of_ceiling(*scores)
        assert got["share"] == share(items)
        assert _same(got["se"], _loop_bootstrap(items, share) if got["share"] is not None else None), n
    per_item = [[(rng.choice([0, 1, 2]), rng.choice([0, 1, 2])) for _ in range(rng.randint(1, 5))] for _ in range(n)]
    assert _same(room._auc_se(per_item), _loop_bootstrap(per_item, room._auc_of))
    chain = ["proxy", "half", "oracle"]
    per_item = [
        {
            name: (
                float(rng.choice([-1, 0, 1] + [1] * k + [-1] * (2 - k))) if rng.random() > 0.1 else float("nan"),
                [(rng.random() + 0.2 * k, rng.random()) for _ in range(rng.randint(0, 3))],
            )
            for k, name in enumerate(chain)
        }
        for _ in range(n)
    ]

    def crossing(sample):
        pts = []
        for name in chain:
            d = [it[name][0] for it in sample if not math.isnan(it[name][0])]
            pts.append((room._auc_of([it[name][1] for it in sample]), 100 * sum(d) / len(d) if d else None))
        return room.break_even(pts)

    got = room.break_even_bootstrap(per_item, chain)  # changes from below zero (the proxy) to above (the oracle)
    assert _same(got["auc"], crossing(per_item)) and (got["auc"] is not None or n < 300)
    assert _same(got["se"], _loop_bootstrap(per_item, crossing, 200) if got["auc"] is not None else None)


def test_the_backbones_judgement_is_its_log_prob_of_the_reveal(word):  # noqa: F811
    """A node's ``dlm_logp[j]`` is Σ_D log p_theta(xs^j_i | xt) over the positions candidate j reveals: finite (the
    blocked tokens' -inf never enters), and Inv-E under teacher forcing orders the candidates by it (Inv-E = +log
    p_theta(xs|xt) + a constant per row: argmin prefers the reveal the backbone finds least likely)."""
    b, p = backbone(word, shift=True), proxy(word)
    bridge = ProxyBridge(p, word)
    x = dllm_prompt_rows(word, PROMPTS, 30, 8)
    trees = window_tree(
        b,
        x,
        OPTS,
        DLLMEnergyOptions(K=3, w=1.0, temperature=3.0),
        [torch.Generator().manual_seed(s) for s in (1, 2)],
        {"inv": Scorer("inv", bridge)},
    )
    for t in trees:
        for nd in t.nodes:
            if nd.children:
                assert all(math.isfinite(v) for v in nd.dlm_logp)
                inv = nd.energies["inv"]
                for a in range(3):
                    for c in range(3):
                        if nd.dlm_logp[a] > nd.dlm_logp[c] + 1e-6:
                            assert inv[a] > inv[c] - 1e-4
