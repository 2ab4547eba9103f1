"""Rules ``dllm_map_{job}``: the map of when Uni-E helps a DLLM (beyond the paper; targets ``table_app_map``,
``fig_app_map``).

Per backbone, the room first: for each candidate draw (``dllm.map.draws``: temperature, greedy first candidate) and
each window (``dllm.map.windows``: w = 0.2, 0.5, 1), the candidate tree of Algorithm 3's window on the map's items
(:func:`unie.dllm.candidate_tree.decoder_trees`: the backbone's own requests as lm-eval logged them, the decoder's own
generators), every leaf scored by the task as lm-eval scores a response.  Each (rule, proxy) is a scorer recorded at
every node, so each argmin rule's result is the leaf its energies reach (the decode Algorithm 3 would make: the room
rule checks the identity on Table 3's rows), and each score's judgement is its pairwise AUC over the tree's
candidates (:func:`unie.eval.room.pairwise_auc`).  The proxies: the weak one, the paper's-ratio one, the AR of the
DLLMs' size, the oracle, and a continuum ``λ · oracle + (1 − λ) · paper's-ratio`` (:class:`unie.dllm.oracle.MixtureLM`)
along which the map locates each rule's break-even judgement (:func:`unie.eval.room.break_even`, bootstrap s.e.).

The backbone's own decode of the items, the proxies decoded alone and APD per proxy (its own drafts: no window) are
lm-eval runs, as every Table 3 row.  ``points.json`` per job holds them all.  A backbone's map is several jobs that
share the cores: its lm-eval points (:func:`run_map`, ``lmeval.json``), then each (draw, window) tree on its own
(:func:`run_map_tree`, ``trees/{tree}.json``; the names of :func:`unie.dllm.rows.map_tree_grid`), then
:func:`merge_map` (``points.json``).  A tree is the same in its own job as in one job for all: every request draws
from its own generator.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..config.settings import LmEvalSettings
from ..core.integrity import read_json
from .rule import write_json
from .dllm_runs import point_files
from .tables_figures import item_records, sample_records, task_metrics

ORACLE = "oracle"  # a map proxy whose model is this name reads the oracle checkpoint (rule dllm_oracle)
LMEVAL_POINTS = "lmeval.json"  # a backbone's lm-eval points, before its trees are merged in (points.json)


def continuum_name(lam: float) -> str:
    return f"mix{int(round(100 * lam)):02d}"


def map_scorers(m: dict, bridges: dict, energy: dict):
    """name -> :class:`~unie.dllm.candidate_tree.Scorer` of every (rule, proxy) of the map, plus the continuum's proxies; the
    names ``{rule}__{proxy}``.  A rule that reads no proxy under its reading (Inv-E, teacher forced) has one scorer,
    ``{rule}__any``."""
    from ..dllm.candidate_tree import Scorer
    from ..dllm.rows import reads_proxy

    out = {}
    for rule, spec in m["rules"].items():
        o = {**energy, **spec.get("options", {})}
        scorer = dict(
            energy=o.get("energy", "uni"),
            ar_context=o.get("ar_context", "teacher_forced"),
            selection=o.get("selection", "argmin"),
        )
        if scorer["selection"] not in ("argmin", "proxy_rerank"):
            raise ValueError(
                f"dllm.map.rules.{rule}: selection {scorer['selection']!r} draws its choice (resample): "
                "it has no path in the candidate tree; the map reads argmin and proxy_rerank rules"
            )
        if not reads_proxy(o):
            out[f"{rule}__any"] = Scorer(proxy=bridges[m["continuum"]["proxy"]], **scorer)
            continue
        for p, bridge in bridges.items():
            out[f"{rule}__{p}"] = Scorer(proxy=bridge, **scorer)
    return out


def _point_args(point: dict, dllm: dict, models: dict, device: str, precision: str) -> dict:
    """A map point's model args (its lm-eval run's; a backbone point's are the decoder its trees decode with)."""
    from ..dllm.rows import row_model_args

    row = point["row"]
    models_of = {role: models[row[role]] for role in ("model", "proxy") if row.get(role)}
    return row_model_args(point["name"], row, dllm, models_of, device, precision)


def point_items(point: dict, m: dict) -> int | None:
    """The test items per task that a map point's lm-eval run reads (its ``limit``; None: all): the map's ``limit``,
    and for APD with ``dllm.map.apd.whole_only`` at most the first ``whole`` (Table 3's items, whose trees are
    explored whole; no claim of the map rests on APD, and its change is paired with the backbone's on them)."""
    limit = m.get("limit")
    if point["rule"] == "apd" and (m.get("apd") or {}).get("whole_only") and m.get("whole") is not None:
        return m["whole"] if limit is None else min(limit, m["whole"])
    return limit


def _lmeval_point(point, dllm, models, names, tasks_dir, out_dir, device, evaluate, lm, limit, log, precision):
    from ..eval.metrics import window_shares

    point_dir = out_dir / point["name"]
    args = _point_args(point, dllm, models, device, precision)
    log(f"map {point['name']}: model_args {args}")
    found = evaluate(
        args,
        names,
        tasks_dir,
        point_dir,
        lm.batch_size,
        include_defaults=False,
        limit=limit,
        seed=lm.seed,
        allow_code_execution=False,
        log=log,
    )
    shutil.copyfile(found, point_dir / "results.json")
    return point_dir, args, window_shares(read_json(point_dir / "throughput.json", "throughput record", hashed=False))


def write_map_oracle(tasks: list[str], tasks_dir, data_dir, out_dir, eps: float, log=print) -> Path:
    """Rule dllm_oracle: the eps-smoothed oracle proxy (:func:`unie.dllm.oracle.write_oracle`) of the test items of
    the toy ``tasks`` (``tasks_dir/data/{task}_test.jsonl``), with the word tokenizer of the DLLM data
    (``data_dir/tokenizers/word``), into ``out_dir``; returns ``out_dir``."""
    from ..dllm.oracle import write_oracle

    docs = []
    for task in tasks:
        with open(Path(tasks_dir, "data", f"{task}_test.jsonl")) as f:
            docs += [json.loads(line) for line in f if line.strip()]
    out = write_oracle(docs, Path(data_dir, "tokenizers", "word"), out_dir, eps=eps)
    log(f"oracle of {len(docs)} test items ({', '.join(tasks)}), eps {eps}: {out}")
    return out


def run_map(
    job: str,
    dllm: dict,
    models: dict,
    tasks_dir,
    out_dir,
    device: str,
    evaluate=None,
    log=print,
    precision: str = "fp32",
) -> dict:
    """The lm-eval points of one map job (module doc; rules ``dllm_map_{job}``): ``job`` a backbone of
    ``dllm.map.backbones`` (its own decode, APD per proxy) or ``proxies`` (the proxies decoded alone).  ``models``:
    model name -> its directory (an oracle checkpoint for ``oracle``).  Writes ``{point}/`` lm-eval folders under
    ``out_dir`` and the record: ``points.json`` for ``proxies``; for a backbone ``lmeval.json``, which its tree jobs
    (:func:`run_map_tree`) decode from and :func:`merge_map` completes into ``points.json``.  Returns the record.
    ``evaluate``: :func:`unie.dllm.lmeval.evaluate` unless given (a test's stand-in)."""
    from ..dllm.rows import map_points, map_proxy_points
    from ..eval.metrics import paired_effect

    if evaluate is None:
        from ..dllm.lmeval import evaluate

    m = dllm["map"]
    names, metrics, _ = task_metrics({"names": list(m["tasks"])})
    lm = LmEvalSettings.from_dllm(dllm)
    out_dir = Path(out_dir)
    limit = m.get("limit")
    records = []
    points = map_proxy_points(dllm) if job == "proxies" else map_points(dllm, job)
    base_items = None
    for point in points:
        point_limit = point_items(point, m)
        point_dir, args, window = _lmeval_point(
            point, dllm, models, names, tasks_dir, out_dir, device, evaluate, lm, point_limit, log, precision
        )
        res = json.loads((point_dir / "results.json").read_text())["results"]
        acc = {t: 100 * res[t][metrics[t]] for t in names}
        items = item_records(point_dir, names, metrics)
        rec = {k: v for k, v in point.items() if k != "row"} | {
            "model_args": {k: v for k, v in args.items() if k != "device"},
            "accuracy": acc,
            "avg": sum(acc.values()) / len(acc),
            "n": {t: len(items.get(t, {})) for t in names},
            "limit": point_limit,
            "window": window,
        }
        if point["rule"] == "backbone":
            base_items = items
        elif base_items is not None:
            effect = paired_effect(items, base_items, names)
            rec["effect"], rec["effect_tasks"] = effect["avg"], effect["tasks"]
        records.append(rec)
        e = rec.get("effect")
        log(
            f"  average {rec['avg']:.1f} %" + (f", against the backbone {e['delta']:+.1f} ± {e['se']:.1f}" if e else "")
        )
    out = {
        "job": job,
        "tasks": names,
        "limit": limit,
        "items": m.get("items"),  # test items per task of the map's own tasks (None: Table 3's)
        "whole": m.get("whole"),  # the first ones per task whose trees are explored whole (None: all)
        "batch_size": lm.batch_size,
        "seed": lm.seed,
        "oracle_eps": m.get("oracle_eps", 0.05),
        "draws": [dict(d) for d in m["draws"]],
        "windows": list(m.get("windows", [dllm["energy"]["w"]])),
        "continuum": dict(m.get("continuum") or {}),
        "proxies": {p: dict(s) for p, s in m["proxies"].items()},
        "points": records,
        "trees": [],  # a backbone's: one job each (run_map_tree), merged into points.json by merge_map
    }
    # it vouches for the points' files
    path = out_dir / ("points.json" if job == "proxies" else LMEVAL_POINTS)
    write_json(out, path, indent=1, records=point_files(out_dir, [p["name"] for p in points]))
    return out


def run_map_tree(
    backbone: str, tree: str, dllm: dict, models: dict, tasks_dir, out_dir, device: str, log=print, precision="fp32"
) -> dict:
    """One candidate tree of a backbone's map (rules ``dllm_map_tree_{backbone}``): ``tree`` a name of
    :func:`unie.dllm.rows.map_tree_grid` (a candidate draw and a window), decoded from the backbone's own logged
    requests (its lm-eval point of ``out_dir/lmeval.json``, rule ``dllm_map_{backbone}``).  Writes and returns
    ``out_dir/trees/{tree}.json``: ``{backbone, tree, record}``, ``record`` the tree's entry of ``points.json``.
    Each request draws from its own generator (seeded by the run's seed, its prompt and its key), so a tree is the
    same whichever job decodes it and in whichever order."""
    from ..dllm.rows import map_points, map_tree_grid

    grid = map_tree_grid(dllm)
    if tree not in grid:
        raise ValueError(f"dllm.map: no candidate tree {tree!r} (the map's: {', '.join(grid)})")
    out_dir = Path(out_dir)
    read_json(out_dir / LMEVAL_POINTS, "map lm-eval points")  # checked against its hash: the base run is whole
    names, metrics, _ = task_metrics({"names": list(dllm["map"]["tasks"])})
    base_args = _point_args(map_points(dllm, backbone)[0], dllm, models, device, precision)  # its backbone point
    base_dir = out_dir / base_args["name"]
    base_items = item_records(base_dir, names, metrics)
    (rec,) = map_trees(
        backbone, dllm, models, names, metrics, tasks_dir, base_dir, base_args, base_items, log, only=[grid[tree]]
    )
    out = {"backbone": backbone, "tree": tree, "record": rec}
    write_json(out, out_dir / "trees" / f"{tree}.json", indent=1)
    return out


def merge_map(lmeval_path, tree_paths: list, out_path) -> dict:
    """Rules ``dllm_map_points_{backbone}``: a backbone's ``points.json``, its lm-eval points (``lmeval_path``) with
    its trees (``tree_paths``, in the map's order), the record the table and the figure read."""
    rec = read_json(lmeval_path, "map lm-eval points")
    trees = [read_json(p, "map candidate tree")["record"] for p in tree_paths]
    out = {**rec, "trees": trees}
    # the points' lm-eval files are vouched for by lmeval.json alone: a damaged one is remade by its own rule
    write_json(out, out_path, indent=1)
    return out


PATHS_ONLY = 1  # the cap of an item read along its rules' paths alone (dllm.map.whole): no other node is kept


def _is_whole(key, m: dict) -> bool:
    """Whether the map explores an item's tree whole (up to ``dllm.map.cap``): its document is among the first
    ``dllm.map.whole`` of its task (all without ``whole``); beyond, the tree holds its rules' paths alone."""
    whole = m.get("whole")
    return whole is None or int(key[1]) < whole


def _map_item_trees(decoder, requests, task_objs, metrics, options, scorers, m, lm):
    """``(explored whole, scored tree)`` of the map's items (:func:`~unie.pipeline.room_runs.scored_trees`'s): the
    first ``dllm.map.whole`` of each task explored up to ``dllm.map.cap``, the others along their rules' paths alone
    (cap :data:`PATHS_ONLY`)."""
    from .room_runs import scored_trees

    for whole, cap in ((True, m.get("cap", 243)), (False, PATHS_ONLY)):
        part = {t: {k: r for k, r in recs.items() if _is_whole(k, m) is whole} for t, recs in requests.items()}
        part = {t: recs for t, recs in part.items() if recs}
        if part:
            for scored in scored_trees(decoder, part, task_objs, metrics, options, scorers, cap, lm.batch_size):
                yield whole, scored


def map_bridges(m: dict, models: dict, tok, device: str) -> dict:
    """proxy name -> :class:`~unie.dllm.bridge.ProxyBridge` of every map proxy and of the continuum's mixtures."""
    from ..dllm.bridge import ProxyBridge
    from ..dllm.decoder import load_trained
    from ..dllm.oracle import MixtureLM, OracleLM, RememberedLM

    lms = {}
    for p, spec in m["proxies"].items():  # remembered: the continuum's mixtures read them again on the same rows
        # a learned proxy reads each prompt once for all of its candidates (share_prefixes; the same to float rounding)
        lms[p] = RememberedLM(
            OracleLM.load(models[ORACLE])
            if spec["model"] == ORACLE
            else load_trained(models[spec["model"]], device)[0],
            share_prefixes=True,
        )
    cont = m.get("continuum") or {}
    oracle = next(lms[p] for p, s in m["proxies"].items() if s["model"] == ORACLE) if cont else None
    for lam in cont.get("lambdas", []):
        lms[continuum_name(lam)] = MixtureLM(oracle, lms[cont["proxy"]], lam)
    # on_model: each bridge reads its model's next-token scores (the learned proxies' by the same operations as through
    # their logits, remembered across the bridges that read them on the same rows; the oracle's and the mixtures'
    # exact, without an (N, L, V) tensor per mixture: the same up to rounding)
    return {p: ProxyBridge(lm, tok, on_model=True) for p, lm in lms.items()}


def map_trees(
    backbone: str,
    dllm: dict,
    models: dict,
    names: list[str],
    metrics: dict,
    tasks_dir,
    base_dir,
    base_args: dict,
    base_items: dict,
    log=print,
    only: list | None = None,
) -> list[dict]:
    """Per (draw, window) (``only``: those ``(draw, w)`` pairs; else every draw with every window): the room of the
    backbone's window on the map's items and every scorer's result and judgement (module doc)."""
    from ..dllm.decoder import build_decoder
    from ..dllm.energy_decoding import DLLMEnergyOptions
    from ..dllm.candidate_tree import rule_leaf
    from ..eval.metrics import paired_effect
    from ..dllm.lmeval import truncate_at
    from ..eval.room import (
        _item_pairs,
        break_even_bootstrap,
        pairwise_auc,
        room_effects,
        room_reading,
        share_of_ceiling,
    )
    from ..dllm.rows import map_tree_grid
    from .room_runs import _lm_tasks

    m = dllm["map"]
    lm = LmEvalSettings.from_dllm(dllm)
    decoder = build_decoder({**base_args, "seed": lm.seed})
    bridges = map_bridges(m, models, decoder.tok, base_args.get("device", "cpu"))
    scorers = map_scorers(m, bridges, dllm.get("energy", {}))
    requests = sample_records(base_dir, names, metrics)
    task_objs = _lm_tasks(names, tasks_dir)
    energy = dllm.get("energy", {})
    out = []
    for draw, w in only if only is not None else map_tree_grid(dllm).values():
        options = DLLMEnergyOptions(
            energy="uni",
            K=energy.get("K", 3),
            w=w,
            temperature=draw["temperature"],
            greedy_first=bool(draw.get("greedy_first", False)),
        )
        every, paths = [], {s: {} for s in scorers}  # every: (task, key, tree, leaf scores, explored whole)
        for whole, (task, k, item, s, until) in _map_item_trees(
            decoder, requests, task_objs, metrics, options, scorers, m, lm
        ):
            every.append((task, k, item.tree, s, whole))
            for name in scorers:  # a path's text as item_records writes a response
                leaf = rule_leaf(item.tree, name)
                paths[name].setdefault(task, {})[k] = (
                    (float("nan"), "")
                    if leaf is None
                    else (s[leaf], json.dumps([truncate_at(item.texts[leaf], until)]))
                )
        trees = [(t, k, tr, s) for t, k, tr, s, whole in every if whole]  # the room, judgements, shares: on these
        leaves = {t: {} for t in names}
        for t, k, _, s in trees:
            leaves[t][k] = s
        room = room_effects(leaves, base_items, names)
        tree_list = [t for _, _, t, _ in trees]
        score_list = [s for _, _, _, s in trees]
        rec = {
            "draw": dict(draw),
            "w": w,
            "items": len(every),
            "whole_items": len(trees),
            "exhaustive": sum(t.exhaustive for t in tree_list) / max(1, len(tree_list)),
            **room,
            "auc": {"dlm": pairwise_auc(tree_list, score_list, lambda nd, j: nd.dlm_logp[j])},
            "cells": [],
        }
        base = [base_items[t][k][0] for t, k, _, _ in trees]
        ceiling = [max(s) for _, _, _, s in trees]
        for name in scorers:
            rule, proxy = name.split("__", 1)
            effect = paired_effect(paths[name], base_items, names)["avg"]  # every item's path
            effect_whole = paired_effect(  # on the whole trees' items: the room's own
                {t: {k: v for k, v in paths[name].get(t, {}).items() if k in leaves[t]} for t in names},
                base_items,
                names,
            )["avg"]
            auc = pairwise_auc(
                tree_list, score_list, lambda nd, j, n=name: -nd.energies[n][j], lambda nd, n=name: n in nd.energies
            )
            rows = [paths[name][t][k][0] for t, k, _, _ in trees]
            share = share_of_ceiling(rows, ceiling, base)
            rec["cells"].append(
                {
                    "rule": rule,
                    "proxy": proxy,
                    "effect": effect,
                    "effect_whole": effect_whole,
                    "auc": auc,
                    "share": share,
                    # the change on every item against 2 s.e.; the room, estimated on the whole trees' items
                    "reading": room_reading(
                        effect["delta"], effect["se"], room["ceiling"]["avg"]["delta"], room["ceiling"]["avg"]["se"]
                    ),
                }
            )
        # break-even judgement along the continuum, per rule, with a bootstrap over items
        cont = m.get("continuum") or {}
        if cont:
            chain = [
                cont["proxy"],
                *[continuum_name(x) for x in cont.get("lambdas", [])],
                next(p for p, s in m["proxies"].items() if s["model"] == ORACLE),
            ]
            rec["break_even"] = {}
            for rule in m["rules"]:
                names_chain = [f"{rule}__{p}" for p in chain if f"{rule}__{p}" in scorers]
                if len(names_chain) < 2:
                    continue
                per_item = [  # every item's change; its candidate pairs where its tree is whole
                    {
                        n: (
                            (paths[n][t][k][0] - base_items[t][k][0]),
                            _item_pairs(tr, s, lambda nd, j, n=n: -nd.energies[n][j], lambda nd, n=n: n in nd.energies)
                            if whole
                            else [],
                        )
                        for n in names_chain
                    }
                    for (t, k, tr, s, whole) in every
                ]
                rec["break_even"][rule] = break_even_bootstrap(per_item, names_chain)
        log(
            f"map {backbone} {draw} w={w}: ceiling {room['ceiling']['avg']['delta']:+.1f} ± "
            f"{room['ceiling']['avg']['se']:.1f}, floor {room['floor']['avg']['delta']:+.1f}, decides "
            f"{100 * room['decides']['avg']:.0f} % of {rec['whole_items']} items (trees whole up to the cap; "
            f"{rec['items'] - rec['whole_items']} more read along the rules' paths), exhaustive "
            f"{100 * rec['exhaustive']:.0f} %"
        )
        out.append(rec)
    return out


__all__ = [
    "LMEVAL_POINTS",
    "ORACLE",
    "continuum_name",
    "map_bridges",
    "map_scorers",
    "map_trees",
    "merge_map",
    "run_map",
    "run_map_tree",
]
