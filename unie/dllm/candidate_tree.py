"""The room Algorithm 3 has to act: every path through its window's candidates (beyond the paper).

Inside the window Algorithm 3 draws ``K`` candidates at each iteration and keeps one; outside it the backbone decodes
greedily.  Whatever the energy, the proxy or the selection rule, a decode is therefore one path of the **candidate
tree**: the root is the prompt, a node at window iteration ``n`` has one child per candidate ``j`` (the state
``xs^j`` after its reveal), and below the last window iteration each node is decoded to the end by the backbone's own
rule, a leaf.  The best and the worst any selection rule can reach on an item are its best and worst leaf (its
*ceiling* and *floor*); a rule that picks by energy walks one path (:func:`rule_leaf`).

The tree is the decoder's own: the draws come from each request's generator exactly as
:func:`~unie.dllm.energy_decoding.energy_decode` draws them.  A node's ``K`` draws consume the generator the same way
whichever candidate its parent chose, so every child starts from the generator state after its parent's draws (a
copy per child), and an argmin (or ``proxy_rerank``) row's decode is exactly the path its energies pick (a test and
the pipeline check it against the row's own completions).  ``resample`` draws once more per iteration to choose, so
its later candidates come from another generator state: its decode is a path of a tree drawn alike, not of this
one.  Children with the same state are one node (at temperature 0.1 the candidates mostly agree, so a tree is
small), and a node whose completion is final (:func:`~unie.dllm.backbone.settled`) is a leaf at once.  ``cap``
bounds the distinct nodes of one item per level; an item that reaches it keeps its first ``cap`` nodes and is marked
not exhaustive (its ceiling and floor are then bounds: the best and worst of the explored part).

At every node the energies of each *scorer* (an energy, a proxy, a reading: what a Table 3 row or a map point would
choose by) are recorded per candidate, so every argmin rule's path, and how well each score ranks candidates that
lead to a right answer above those that lead to a wrong one (:mod:`unie.eval.room`), come from one tree.  Once an
item's tree is cut, its nodes record only the energies of the scorers whose path goes through them (the rules'
results stay exact; their judgement is then measured on the part explored whole).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..energy.energies import selection_energy
from .backbone import DecodeOptions, block_bounds, commit_top, confidence, normalise, settled
from .energy_decoding import DLLMEnergyOptions, in_window, window_step

DEFAULT_CAP = 729  # distinct nodes of one item per level (3^6: every node of six fully disagreeing iterations at K = 3)


@dataclass(frozen=True)
class Scorer:
    """What one rule chooses by: ``energy`` (``ind``, ``inv``, ``uni``) read by ``proxy`` (a
    :class:`~unie.dllm.bridge.ProxyBridge`) in ``ar_context``, chosen by ``selection`` (``argmin`` or
    ``proxy_rerank``; ``resample`` draws and has no path in the tree)."""

    energy: str
    proxy: object
    ar_context: str = "teacher_forced"
    selection: str = "argmin"


@dataclass
class Node:
    level: int  # the window iteration whose candidates it chooses among (the root: 0)
    children: list[int] = field(default_factory=list)  # per candidate j: the index of its child node (deduplicated)
    energies: dict[str, list[float]] = field(default_factory=dict)  # scorer -> E^j (a cut tree: its path's only)
    dlm_logp: list[float] = field(default_factory=list)  # log p_theta(xs^j | xt): the backbone's own judgement
    leaf: int | None = None  # below the window: the index of its leaf
    paths: set = field(default_factory=set)  # the scorers whose argmin path goes through it (kept beyond the cap)


@dataclass
class ItemTree:
    """One item's candidate tree: ``nodes[0]`` is the root; ``leaves`` the final decodes ``(T,)`` (one per node of the
    last window level, or earlier where a completion was final); ``exhaustive``: no level reached the cap."""

    nodes: list[Node] = field(default_factory=list)
    leaves: list[torch.Tensor] = field(default_factory=list)
    exhaustive: bool = True


class _Memo:
    """A proxy's ``token_logp`` remembered per call within one iteration: the scorers of one proxy (Ind-E, Inv-E,
    Uni-E, rerank) read the same candidates."""

    def __init__(self, scorer):
        self.scorer, self.seen = scorer, {}

    def token_logp(self, ctx, tokens):
        key = (ctx.shape, ctx.cpu().numpy().tobytes(), tokens.shape, tokens.cpu().numpy().tobytes())
        if key not in self.seen:
            self.seen[key] = self.scorer.token_logp(ctx, tokens)
        return self.seen[key]


def _copy(g: torch.Generator) -> torch.Generator:
    h = torch.Generator(device=g.device)
    h.set_state(g.get_state())
    return h


def _batches(n: int, size: int):
    for lo in range(0, n, size):
        yield lo, min(n, lo + size)


@torch.no_grad()
def window_tree(
    backbone,
    x: torch.Tensor,
    decode: DecodeOptions,
    options: DLLMEnergyOptions,
    generators: list,
    scorers: dict[str, Scorer] | None = None,
    cap: int = DEFAULT_CAP,
    batch_size: int = 256,
) -> list[ItemTree]:
    """The candidate tree of each prompt row of ``x`` ``(B, T)`` (module doc) under Algorithm 3's candidate draw
    (``options``: ``K``, ``w``, ``temperature``, ``greedy_first``), each row drawing from its own generator
    (``generators[b]``, as the decoder passes them; not consumed: the tree draws from copies).  ``scorers``: name ->
    :class:`Scorer`, whose energies every window node records."""
    scorers = scorers or {}
    B, T = x.shape
    K, m, mask_id = options.K, decode.tokens_per_step, backbone.mask_id
    prompt_len = T - decode.gen_length
    N = decode.iterations
    eos_id = getattr(backbone, "eos_id", None)
    blocked = (mask_id, *getattr(backbone, "blocked", ()))
    pos = torch.arange(T, device=x.device)
    trees = [ItemTree(nodes=[Node(level=0)]) for _ in range(B)]
    # the frontier: (item, node index, state (T,), generator)
    frontier = [(b, 0, x[b].clone(), _copy(generators[b])) for b in range(B)]

    def finish(b, node, state):
        if eos_id is not None:
            state = torch.where(state == mask_id, torch.full_like(state, eos_id), state)
        trees[b].nodes[node].leaf = len(trees[b].leaves)
        trees[b].leaves.append(state)

    for n in range(N):
        if not frontier:
            break
        start, end = block_bounds(prompt_len, decode, n)
        window = in_window(n, N, options.w)
        nxt = []
        for lo, hi in _batches(len(frontier), batch_size):
            part = frontier[lo:hi]
            xb = torch.stack([f[2] for f in part])
            logp_dlm = normalise(backbone.logits(xb), blocked).to(xb.device)
            x0_hat = logp_dlm.argmax(-1)
            masked = xb == mask_id
            allowed = masked & (pos >= start) & (pos < end)
            if not window:
                xs = commit_top(xb, x0_hat, confidence(logp_dlm, x0_hat, decode.confidence), allowed, m)
                nxt += [(b, node, xs[r], g) for r, (b, node, _, g) in enumerate(part)]
                continue
            step = window_step(xb, logp_dlm, start, end, decode, options, mask_id, [f[3] for f in part])
            xs, xt_b, x0_b, xs_b = step.xs, step.xt_b, step.x0_b, step.xs_b
            revealed = (xs != xb[:, None]) & masked[:, None]  # D of each candidate
            picked = logp_dlm[:, None].expand(-1, K, -1, -1).gather(-1, xs[..., None]).squeeze(-1).double()
            dlm = torch.where(revealed, picked, torch.zeros_like(picked)).sum(-1)  # not 0 * -inf at the others
            # each scorer's energies at the rows that need them: every row of an item still explored whole, else
            # only the nodes its own argmin path goes through (a cut tree keeps its rules' paths, not their judgements).
            # Computed on the rows any scorer needs (a node kept up to the cap that no path takes needs none), the
            # same rows for every scorer, so each proxy reads them once (_Memo) whichever its own scorers keep; the
            # candidates are checked once
            memo = {}
            nodes = [trees[b].nodes[node] for b, node, _, _ in part]
            whole = [trees[b].exhaustive or node == 0 for b, node, _, _ in part]
            for nd in nodes:
                nd.energies = {}
            rows_of = {name: [r for r, nd in enumerate(nodes) if whole[r] or name in nd.paths] for name in scorers}
            need = sorted(set().union(*rows_of.values()))
            at = {r: k for k, r in enumerate(need)}
            idx = torch.tensor(need, dtype=torch.long, device=xb.device)
            xt_n, x0_n, xs_n, dlm_n = (
                (xt_b, x0_b, xs_b, logp_dlm)
                if len(need) == len(part)
                else (xt_b[idx], x0_b[idx], xs_b[idx], logp_dlm[idx])
            )
            check = True
            for name, s in scorers.items():
                if not rows_of[name]:
                    continue
                until = memo.setdefault(id(s.proxy), _Memo(s.proxy.until(end)))
                e = (
                    selection_energy(
                        s.selection, s.energy, xt_n, x0_n, xs_n, dlm_n, until, s.ar_context, mask_id, check=check
                    )
                    .double()
                    .cpu()
                )
                check = False
                for r in rows_of[name]:
                    nodes[r].energies[name] = e[at[r]].tolist()
            for r, (b, node, _, g) in enumerate(part):
                nodes[r].dlm_logp = dlm[r].tolist()
                nxt.append((b, node, xs[r], g, r))
        if window:
            frontier = _branch(trees, nxt, n, cap)
        else:
            frontier = nxt
        # a node whose completion is final is a leaf now (exact: no decoder here revises a committed token)
        keep = []
        for b, node, state, g in frontier:
            if eos_id is not None and bool(settled(state[None], prompt_len, eos_id, mask_id)[0]):
                finish(b, node, state)
            else:
                keep.append((b, node, state, g))
        frontier = keep
    for b, node, state, _ in frontier:
        finish(b, node, state)
    return trees


def _branch(trees, nxt, n: int, cap: int):
    """The children of the window nodes in ``nxt`` (``(item, node, xs (K, T), generator, row)``): one node per
    distinct state per item, each with a copy of its parent's generator (after the parent's draws).  Beyond ``cap``
    distinct children of one item, a child is kept only when a scorer's path goes through it (every scorer's argmin
    path is one node per level, so each rule's result stays in the tree); the item is then not exhaustive."""
    frontier = []
    by_item: dict[int, list] = {}
    for entry in nxt:
        by_item.setdefault(entry[0], []).append(entry)
    for b, entries in by_item.items():
        tree = trees[b]
        # which candidates some scorer's path takes (a parent on a scorer's path passes it to its argmin child)
        wanted = []
        for _, node, xs, _, _ in entries:
            nd = tree.nodes[node]
            on = nd.paths if node else set(nd.energies)
            picks = set()
            for name in on:
                e = nd.energies[name]
                picks.add(min(range(len(e)), key=lambda j: (e[j], j)))
            wanted.append(
                {
                    j: {
                        name
                        for name in on
                        if min(range(len(nd.energies[name])), key=lambda j2: (nd.energies[name][j2], j2)) == j
                    }
                    for j in picks
                }
            )
        index: dict[bytes, int] = {}
        keys = [[xs[j].cpu().numpy().tobytes() for j in range(xs.shape[0])] for _, _, xs, _, _ in entries]
        order = [(e, j, True) for e, w in enumerate(wanted) for j in sorted(w)]
        order += [(e, j, False) for e in range(len(entries)) for j in range(entries[e][2].shape[0])]
        children = [[None] * entries[e][2].shape[0] for e in range(len(entries))]
        for e, j, priority in order:
            key = keys[e][j]
            child = index.get(key)
            if child is None:
                if len(index) >= cap and not priority:
                    tree.exhaustive = False
                    continue
                _, node, xs, g, _ = entries[e]
                child = len(tree.nodes)
                tree.nodes.append(Node(level=n + 1))
                index[key] = child
                frontier.append((b, child, xs[j].clone(), _copy(g)))
            children[e][j] = child
            if priority:
                tree.nodes[child].paths |= wanted[e][j]
        for e, (_, node, _, _, _) in enumerate(entries):
            tree.nodes[node].children = children[e]
    return frontier


def leaf_below(tree: ItemTree, node: int, choose) -> int | None:
    """The leaf reached from ``node`` when every window node picks ``choose(node) -> j`` (None: the path leaves the
    explored part of a capped tree)."""
    while True:
        nd = tree.nodes[node]
        if nd.leaf is not None:
            return nd.leaf
        if not nd.children:
            return None
        child = nd.children[choose(nd)]
        if child is None:
            return None
        node = child


def rule_leaf(tree: ItemTree, scorer: str) -> int | None:
    """The leaf an argmin rule by ``scorer`` reaches: at each node the first candidate of least energy (torch's
    ``argmin``), as :func:`~unie.energy.energies.select` picks."""

    def choose(nd):
        e = nd.energies[scorer]
        return min(range(len(e)), key=lambda j: (e[j], j))

    return leaf_below(tree, 0, choose)


def subtree_leaves(tree: ItemTree, node: int) -> list[int]:
    """Every leaf below ``node`` (itself when it is one)."""
    out, stack, seen = [], [node], set()
    while stack:
        k = stack.pop()
        if k is None or k in seen:
            continue
        seen.add(k)
        nd = tree.nodes[k]
        if nd.leaf is not None:
            out.append(nd.leaf)
        stack.extend(nd.children)
    return sorted(set(out))


__all__ = ["DEFAULT_CAP", "ItemTree", "Node", "Scorer", "leaf_below", "rule_leaf", "subtree_leaves", "window_tree"]


@dataclass
class ItemLeaves:
    """One request's tree (:class:`ItemTree`) and each leaf's completion text, as :meth:`DLLMDecoder.generate` would
    return it for that decode (the adapter then cuts it at the request's stop strings)."""

    tree: ItemTree
    texts: list[str]


def decoder_trees(
    decoder,
    prompts: list[str],
    max_new_tokens: int,
    keys: list[str],
    options: DLLMEnergyOptions,
    scorers: dict[str, Scorer] | None = None,
    cap: int = DEFAULT_CAP,
) -> list[ItemLeaves]:
    """The candidate tree of each prompt as ``decoder`` (a :class:`~unie.dllm.decoder.DLLMDecoder`) would decode it
    with Algorithm 3's draw ``options``: the same layout and length groups, the same per-request generators (seeded
    from the decoder's seed, the prompt and its key: the adapter's ``[gen_kwargs, repeat]``), the same precision, the
    same completion text per leaf."""
    from ..core.precision import autocast
    from ..data.dllm_format import dllm_prompt_rows
    from .backbone import model_device, with_horizon
    from .decoder import completion_text, request_generator

    G = decoder.gen_length
    groups: dict[int, list[int]] = {}
    for i, ids in enumerate(decoder.tok.encode_batch(prompts)):
        groups.setdefault(decoder._positions(len(ids)), []).append(i)
    out: list[ItemLeaves | None] = [None] * len(prompts)
    device = model_device(decoder.backbone)
    for P, idx in groups.items():
        x = dllm_prompt_rows(decoder.tok, [prompts[i] for i in idx], P, G).to(device)
        gens = [request_generator(decoder.seed, "generate", prompts[i], keys[i]) for i in idx]
        with autocast(model_device(decoder.backbone), decoder.precision):
            trees = window_tree(
                with_horizon(decoder.backbone, decoder.decode_options),
                x,
                decoder.decode_options,
                options,
                gens,
                scorers,
                cap,
            )
        for i, tree in zip(idx, trees):
            texts = [
                completion_text(decoder.tok, leaf[P : P + min(G, max_new_tokens)].tolist()) for leaf in tree.leaves
            ]
            out[i] = ItemLeaves(tree, texts)
    return out


__all__ += ["ItemLeaves", "decoder_trees"]
