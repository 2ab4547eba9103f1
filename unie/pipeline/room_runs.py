"""Rule ``dllm_room_{backbone}``: the room Algorithm 3's rows had on Table 3's items (beyond the paper).

For one backbone: every request of its own row (lm-eval's logged requests: prompt, ``gen_kwargs``, document), the
candidate tree of Algorithm 3's window under Table 3's draw (:func:`unie.dllm.candidate_tree.decoder_trees`, the decoder's own
generators), each leaf scored by the task as lm-eval scores a response (:func:`unie.eval.room.leaf_scores`).  Written
to ``results/dllm/room/{backbone}.json``: the ceiling's and the floor's paired change against the backbone per task
and on the average, the share of items the window decides, and per Algorithm 3 row of that backbone its paired change
(from its own lm-eval samples), its share of the ceiling and, for a row whose decode is a path of the tree (argmin,
``proxy_rerank``), on how many items the tree's path gives the row's own score (the check that the tree is the
decoder's: all of them on a CPU).  Tables 3, the full table and the selection table print the ceiling and floor beside
every Algorithm 3 row.
"""

from __future__ import annotations

import json

from ..config.settings import LmEvalSettings
from .rule import write_json
from .tables_figures import averaged, item_records, sample_records, task_metrics


def _lm_tasks(names: list[str], tasks_dir):
    from lm_eval.tasks import TaskManager, get_task_dict

    tm = TaskManager(include_path=str(tasks_dir), include_defaults=False)
    return get_task_dict(names, tm)


def scored_trees(
    decoder, requests: dict, task_objs: dict, metrics: dict, options, scorers: dict, cap: int, batch_size: int
):
    """The candidate tree of every logged request (``requests``: task -> {(subtask, doc id): lm-eval's sample
    record}, :func:`~unie.pipeline.tables_figures.sample_records`) as the decoder would decode it under Algorithm 3's
    draw ``options``: the adapter's batches (one ``gen_kwargs`` and at most ``batch_size`` prompts), each request's
    own key (its ``gen_kwargs`` and repeat 0), each leaf scored by its task as lm-eval scores a response.  Yields
    ``(task, key, ItemLeaves, leaf scores, until)``."""
    from ..dllm.candidate_tree import decoder_trees
    from ..eval.room import leaf_scores

    for task, recs in requests.items():
        groups: dict[str, list] = {}
        for key, rec in recs.items():
            groups.setdefault(
                json.dumps(rec["arguments"]["gen_args_0"]["arg_1"], sort_keys=True, default=str), []
            ).append(key)
        for gk, keys in groups.items():
            gen_kwargs = json.loads(gk)
            until = gen_kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = int(gen_kwargs.get("max_gen_toks", decoder.gen_length))
            for lo in range(0, len(keys), batch_size):
                chunk = keys[lo : lo + batch_size]
                items = decoder_trees(
                    decoder,
                    [recs[k]["arguments"]["gen_args_0"]["arg_0"] for k in chunk],
                    max_new,
                    [json.dumps([gk, 0]) for _ in chunk],
                    options,
                    scorers,
                    cap,
                )
                for k, item in zip(chunk, items):
                    yield (
                        task,
                        k,
                        item,
                        leaf_scores(task_objs[k[0]], recs[k]["doc"], item.texts, until, metrics[task]),
                        until,
                    )


def row_draw(args: dict) -> tuple:
    """What a row's candidate tree depends on besides the backbone: Algorithm 3's draw and the decoder's seed."""
    return tuple(args.get(k) for k in ("K", "w", "temperature", "greedy_first", "seed"))


def run_room(
    backbone: str,
    rows: dict,
    dllm: dict,
    inputs: dict,
    row_dirs: dict,
    tasks_dir,
    out_path,
    device: str,
    cap: int,
    log=print,
    precision: str = "fp32",
) -> dict:
    """The room of backbone row ``backbone`` (module doc).  ``rows``: the Algorithm 3 rows compared with it
    (name -> spec, all with one candidate draw); ``inputs``: row -> its files (model, proxy); ``row_dirs``: row ->
    its results folder (the backbone's too).  Returns the record written to ``out_path``."""
    from ..dllm.decoder import ModelArgs, build_decoder, load_proxy
    from ..dllm.candidate_tree import Scorer, rule_leaf
    from ..dllm.rows import row_model_args
    from ..eval.metrics import paired_effect
    from ..eval.room import pairwise_auc, room_effects, share_of_ceiling

    names, metrics, _ = task_metrics(dllm["tasks"])
    lm = LmEvalSettings.from_dllm(dllm)
    args = {
        r: {**row_model_args(r, spec, dllm, inputs[r], device, precision), "seed": lm.seed} for r, spec in rows.items()
    }
    draws = {row_draw(a) for a in args.values()}
    if len(draws) != 1:
        raise ValueError(
            f"dllm_room_{backbone}: the rows draw their candidates differently ({sorted(draws)}); one "
            "tree serves rows of one draw"
        )
    first = next(iter(args.values()))
    decoder = build_decoder(first)
    options = decoder.options  # Algorithm 3's DLLMEnergyOptions, as the rows decode
    scorers, proxies = {}, {}
    for r, a in args.items():
        parsed = ModelArgs.parse(a)
        if parsed.options.get("selection", "argmin") == "resample":
            continue  # a resample row draws once more per iteration: its decode is no path of this tree
        if parsed.proxy not in proxies:
            proxies[parsed.proxy] = load_proxy(parsed, decoder.tok)
        scorers[r] = Scorer(
            a.get("energy", "uni"),
            proxies[parsed.proxy],
            a.get("ar_context", "teacher_forced"),
            a.get("selection", "argmin"),
        )
    requests = sample_records(row_dirs[backbone], names, metrics)
    task_objs = _lm_tasks(names, tasks_dir)
    base = item_records(row_dirs[backbone], names, metrics)
    leaves, trees_by_task, path_scores = {t: {} for t in names}, {t: {} for t in names}, {r: {} for r in scorers}
    for task, k, item, s, _ in scored_trees(
        decoder, requests, task_objs, metrics, options, scorers, cap, lm.batch_size
    ):
        leaves[task][k] = s
        trees_by_task[task][k] = item.tree
        for r in scorers:
            leaf = rule_leaf(item.tree, r)
            path_scores[r].setdefault(task, {})[k] = None if leaf is None else s[leaf]
    for task in names:
        log(
            f"room {backbone} {task}: {len(leaves[task])} items, ceiling {sum(max(v) for v in leaves[task].values())}, "
            f"floor {sum(min(v) for v in leaves[task].values())}, backbone "
            f"{sum(b[0] for b in base.get(task, {}).values()):.0f}"
        )
    out = {
        "backbone": backbone,
        "draw": {k: v for k, v in zip(("K", "w", "temperature", "greedy_first", "seed"), next(iter(draws)))},
        "cap": cap,
        "tasks": names,
        "items": {t: len(v) for t, v in leaves.items()},
        "exhaustive": sum(t.exhaustive for v in trees_by_task.values() for t in v.values())
        / max(1, sum(len(v) for v in trees_by_task.values())),
        "average": averaged(dllm["tasks"]),
        **room_effects(leaves, base, names, averaged(dllm["tasks"])),
        "rows": {},
    }
    all_trees = [trees_by_task[t][k] for t in averaged(dllm["tasks"]) for k in trees_by_task[t]]
    all_scores = [leaves[t][k] for t in averaged(dllm["tasks"]) for k in leaves[t]]
    out["auc"] = {"dlm": pairwise_auc(all_trees, all_scores, lambda nd, j: nd.dlm_logp[j])}
    for r in rows:
        own = item_records(row_dirs[r], names, metrics)
        rec = {"effect": paired_effect(own, base, names, averaged(dllm["tasks"]))}
        keys = [
            (t, k) for t in averaged(dllm["tasks"]) for k in leaves[t] if k in own.get(t, {}) and k in base.get(t, {})
        ]
        rec["share"] = share_of_ceiling(
            [own[t][k][0] for t, k in keys], [max(leaves[t][k]) for t, k in keys], [base[t][k][0] for t, k in keys]
        )
        if r in scorers:  # every item of every task: the tree is the decoder's
            every = [(t, k) for t in names for k in leaves[t] if k in own.get(t, {})]
            same = sum(path_scores[r][t].get(k) == own[t][k][0] for t, k in every)
            rec["tree_path"] = {"items": len(every), "same_score": same}
            out["auc"][r] = pairwise_auc(
                all_trees, all_scores, lambda nd, j, r=r: -nd.energies[r][j], lambda nd, r=r: r in nd.energies
            )
        out["rows"][r] = rec
    write_json(out, out_path, indent=1)
    return out


__all__ = ["row_draw", "run_room", "scored_trees"]
