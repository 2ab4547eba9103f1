"""The map's calibration point on a GPU (beyond the paper; ``scripts/gpu_calibration.py``, ``docs/gpu-runs.md``).

On the first ``N`` GSM8K test items, the paper profile's LLaDA-8B-Instruct with its Qwen2.5-0.5B proxy at Table 3's
settings (every number read from the resolved ``config/paper.yaml``: the ``llada``, ``llada_uni`` and ``llada_ind``
rows, ``dllm.decoding``, ``dllm.energy``; the oracle's ``eps`` is the map's, ``dllm.map.oracle_eps`` of the grid,
which the paper profile leaves out), per item:

1. **backbone**: the backbone's own decode (row ``llada``: the plain decoder);
2. **energy**: Algorithm 3 with the proxy (row ``llada_uni``: Uni-E argmin over ``K`` candidates drawn at the
   configured temperature inside the window ``w``), with the window's counters as
   :func:`~unie.dllm.energy_decoding.energy_decode` counts them: ``window_rows`` (window iterations),
   ``disagree_rows`` (those whose ``K`` candidates reveal different tokens: where any rule could act) and
   ``steered_rows`` (those whose chosen reveal differs from candidate 0's);
3. **oracle**: Algorithm 3 with the oracle proxy (row ``llada_ind``'s options: Ind-E argmin, read through the
   tokenizer bridge), an ``eps``-smoothed point mass on the item's reference solution in the proxy's tokenizer
   (:class:`~unie.dllm.oracle.TextOracleLM`; GSM8K's worked solution without its calculator notes): what the
   window's choices reach when the proxy knows the answer and writes it as the reference does (a lower bound on
   the ceiling: it cannot reward a right answer phrased otherwise);

each completion scored by lm-eval's own ``gsm8k`` task object (the metric of ``dllm.tasks.metrics.gsm8k``: its
filter ensemble, then ``process_results``: :func:`unie.eval.room.leaf_scores`), the task read from the local
parquet files of ``openai/gsm8k`` (main config) instead of the hub.  Then, as the time left allows, per item
**the candidate tree** of the window (:func:`unie.dllm.candidate_tree.decoder_trees`, the decoder's own draws, at
most ``cap`` distinct nodes per level beyond the two rules' paths): its explored ceiling and floor (the best and
worst leaf against the backbone: bounds where the cap cut the tree), the share of items whose leaves are not all
scored alike, each score's pairwise AUC (the map's judgement axis), and whether each rule's path in the tree leads
to the decode of step 2 / 3 (the tree is the decoder's: the same text on a CPU; on a GPU a batched forward of
another row count may break a near-tie).

The record (``calibration.json``, ``calibration.md``) is rewritten after every item and every phase, so a run stopped
by its time limit keeps every item it finished; an item whose decode or tree fails is recorded with its error and
left out of the numbers, and the run goes on.  Changes are paired against the backbone on the same items
(:func:`unie.eval.metrics.paired_mean_se`); the window shares pool the row-iterations of all items, their s.e. is
the ratio estimator's over items (:func:`unie.eval.metrics.ratio_mean_se`).
"""

from __future__ import annotations

import json
import math
import re
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from ..core.integrity import atomic_write_text, write_json

TASK = "gsm8k"
ROWS = {"backbone": "llada", "energy": "llada_uni", "oracle": "llada_ind"}  # the Table 3 rows each decode is
DECODES = tuple(ROWS)
GSM8K_HUB = "openai/gsm8k"


class CalibrationError(ValueError):
    """An input the calibration cannot run on (a model, the data, a setting): one line naming it."""


# ---------------------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Settings:
    """What the run reads from the resolved paper configuration: each decode's ``model_args`` (``pretrained`` and
    ``proxy`` still the config's names), the GSM8K metric, the oracle's ``eps``, the seed, the hub ids of the two
    models and the names the paper profile's download rule gives their folders."""

    args: dict
    metric: str
    oracle_eps: float
    seed: int
    model_names: dict
    hub_ids: dict


def paper_settings(
    config: dict,
    device: str,
    precision: str,
    decoding: dict | None = None,
    energy: dict | None = None,
    loading: dict | None = None,
) -> Settings:
    """:class:`Settings` from a resolved configuration (:func:`unie.config.profile.resolve_config` of
    ``config/paper.yaml``).  ``decoding``, ``energy``, ``loading``: overrides of the decoding options, of Algorithm 3's
    options (both energy decodes) and of the loading keys (the ``--tiny`` stand-ins', another cell's ``w``)."""
    from ..config.settings import LmEvalSettings
    from ..dllm.rows import row_model_args

    dllm = config["dllm"]
    rows = dllm["rows"]
    missing = [r for r in ROWS.values() if r not in rows]
    if missing:
        raise CalibrationError(f"the configuration has no dllm.rows {missing} (the calibration reads Table 3's rows)")
    lm = LmEvalSettings.from_dllm(dllm)
    args = {}
    for decode, row in ROWS.items():
        spec = rows[row]
        inputs = {"model": spec["model"], **({"proxy": spec["proxy"]} if spec.get("proxy") else {})}
        a = row_model_args(row, spec, dllm, inputs, device, precision)
        a.update({"pretrained": spec["model"], "seed": lm.seed, **(decoding or {}), **(loading or {})})
        if spec.get("proxy"):
            a["proxy"] = spec["proxy"]
            a.update(energy or {})
        args[decode] = a
    if len({a["pretrained"] for a in args.values()}) != 1:
        raise CalibrationError(f"dllm.rows {sorted(ROWS.values())} name different models: one backbone is loaded")
    metrics = dllm["tasks"].get("metrics", {})
    if TASK not in metrics:
        raise CalibrationError(f"the configuration has no dllm.tasks.metrics.{TASK}")
    names = {"backbone": rows["llada"]["model"], "proxy": rows["llada_uni"]["proxy"]}
    hub = config.get("hf_models", {})
    eps = dllm.get("map", {}).get("oracle_eps")
    if eps is None:  # the paper profile leaves the toy map out (exclude: dllm.map): the grid's value, the map's own
        from ..config.profile import GRID, load_yaml

        eps = load_yaml(GRID)["dllm"]["map"]["oracle_eps"]
    return Settings(
        args=args,
        metric=metrics[TASK],
        oracle_eps=float(eps),
        seed=lm.seed,
        model_names=names,
        hub_ids={k: hub.get(v, v) for k, v in names.items()},
    )


def resolve_model(given: str | None, name: str, hub_id: str, shared: Path, allow_download: bool) -> Path:
    """A model's local folder: ``given`` when it is a folder; else the paper profile's download folder
    ``shared/<name>`` (rule ``download_hf_model``); else the Hugging Face cache's snapshot of ``hub_id`` (``given``
    when it names another hub id), fetched only with ``allow_download``.  A :class:`CalibrationError` naming the
    model when none is there."""
    if given and Path(given).is_dir():
        return Path(given)
    if not given and (shared / name).is_dir():
        return shared / name
    repo = given or hub_id
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo, local_files_only=not allow_download))
    except Exception as e:  # not in the cache (offline), or the hub refused
        raise CalibrationError(
            f"model {repo!r} is not in the local Hugging Face cache nor at {shared / name} "
            f"({type(e).__name__}); give its folder, or run with --allow-download where the hub "
            "can be reached"
        ) from None


def resolve_data(given: str | None, allow_download: bool) -> dict:
    """GSM8K's ``{"test": file, "train": file}`` (``train`` when present: the few-shot examples): ``given`` a parquet or
    JSON-lines file of the test split, or a folder holding ``openai/gsm8k``'s ``main/test-*.parquet`` (and
    ``train-*``); by default the Hugging Face cache's snapshot of ``openai/gsm8k``."""
    if given is None:
        try:
            from huggingface_hub import snapshot_download

            folder = Path(
                snapshot_download(
                    GSM8K_HUB, repo_type="dataset", allow_patterns=["main/*"], local_files_only=not allow_download
                )
            )
        except Exception as e:
            raise CalibrationError(
                f"GSM8K ({GSM8K_HUB}, main) is not in the local Hugging Face cache "
                f"({type(e).__name__}); give --data (its test parquet or a folder holding "
                "main/test-*.parquet), or --allow-download"
            ) from None
    else:
        folder = Path(given)
        if folder.is_file():
            return {"test": folder}
        if not folder.is_dir():
            raise CalibrationError(f"--data {given}: no such file or folder")
    found = {}
    for split in ("test", "train"):
        hits = sorted(folder.glob(f"**/{split}-*.parquet")) or sorted(folder.glob(f"**/{split}.jsonl"))
        if hits:
            found[split] = hits[0]
    if "test" not in found:
        raise CalibrationError(f"{folder} holds no GSM8K test split (main/test-*.parquet or test.jsonl)")
    return found


# ---------------------------------------------------------------------------------------------- the task
def gsm8k_task(files: dict, num_fewshot: int, seed: int):
    """lm-eval's own ``gsm8k`` task (its YAML: prompt, few-shot format, stop strings, filters, metric) reading the
    local ``files`` instead of the hub; ``num_fewshot`` examples from ``train``, drawn by lm-eval's sampler with
    ``seed`` (as ``simple_evaluate``'s ``fewshot_random_seed``)."""
    import yaml
    import lm_eval
    from lm_eval.api.task import ConfigurableTask

    path = Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml"
    cfg = yaml.safe_load(path.read_text())
    if num_fewshot and "train" not in files:
        raise CalibrationError(f"{num_fewshot}-shot prompts need GSM8K's train split beside the test file")
    kind = "parquet" if Path(files["test"]).suffix == ".parquet" else "json"
    splits = {"test": str(files["test"]), **({"train": str(files["train"])} if num_fewshot else {})}
    cfg.update(
        task="gsm8k_calibration",
        dataset_path=kind,
        dataset_name=None,
        dataset_kwargs={"data_files": splits},
        num_fewshot=num_fewshot,
    )
    cfg.pop("tag", None)
    if not num_fewshot:
        cfg.update(training_split=None, fewshot_split=None)
    task = ConfigurableTask(config=cfg)
    task.set_fewshot_seed(seed)
    return task


def chat_renderer(tokenizer):
    """lm-eval's ``--apply_chat_template`` rendering with the backbone's own chat template (as lm-eval's HFLM
    applies it), less a leading ``<bos>`` string: the DLLM layout puts ``<bos>`` in front of every prompt itself."""
    hf = tokenizer.hf
    if not getattr(hf, "chat_template", None):
        raise CalibrationError(
            f"the backbone's tokenizer ({getattr(tokenizer, 'path', '?')}) has no chat template; "
            "run with --no-chat-template"
        )
    bos = hf.bos_token or ""

    def render(chat_history, add_generation_prompt: bool = True) -> str:
        text = hf.apply_chat_template(
            chat_history,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
        )
        return text[len(bos) :] if bos and text.startswith(bos) else text

    return render


def gsm8k_requests(task, limit: int, chat=None) -> list[dict]:
    """The first ``limit`` test items as lm-eval builds its requests: ``doc_id``, ``doc``, ``prompt`` (the
    context), ``until`` and ``max_new`` (the stop strings and token limit of its ``gen_kwargs``) and ``key`` (the
    per-row key the unie lm-eval adapter seeds the decoder's noise with: the ``gen_kwargs`` and repeat 0)."""
    from ..dllm.backbone import DEFAULT_MAX_GEN_TOKS

    task.build_all_requests(limit=limit, rank=0, world_size=1, apply_chat_template=chat is not None, chat_template=chat)
    out = []
    for inst in task.instances:
        context, gen_kwargs = inst.args
        until = gen_kwargs.get("until") or []
        gk = json.dumps(gen_kwargs, sort_keys=True, default=str)
        out.append(
            {
                "doc_id": int(inst.doc_id),
                "doc": inst.doc,
                "prompt": context,
                "until": [until] if isinstance(until, str) else list(until),
                "max_new": int(gen_kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS)),
                "key": json.dumps([gk, 0]),
            }
        )
    return sorted(out, key=lambda r: r["doc_id"])


def reference_completion(task, doc: dict, chat: bool) -> str:
    """The reference solution as a completion continues the prompt: lm-eval's target (``doc_to_target``: GSM8K's
    worked solution and its ``#### answer``) without GSM8K's calculator notes (``<<48/2=24>>``, which no model
    writes), after the task's ``target_delimiter`` (the few-shot answers' form) without a chat template; after the
    chat template's generation prompt the answer starts the assistant's turn, with no delimiter."""
    target = re.sub(r"<<[^<>]*>>", "", task.doc_to_target(doc))
    return target if chat else task.config.target_delimiter + target


# ---------------------------------------------------------------------------------------------- the decoders
@dataclass
class Decoders:
    """The three decoders over one loaded backbone (``backbone``, ``energy``, ``oracle``), the two proxy bridges and
    what identifies the models."""

    decoders: dict
    bridges: dict
    info: dict = field(default_factory=dict)


def weights_identity(folder: Path, hashed: bool) -> dict:
    """A model folder's identity for the record: its path (a Hugging Face cache snapshot's name is the revision) and
    each weight file's size; with ``hashed`` their SHA-256 too (:func:`unie.dllm.decoder.weights_record`: ~20 s for
    LLaDA-8B's 16 GB, a share of a GPU lease's minutes, hence optional)."""
    from ..dllm.decoder import WEIGHT_SUFFIXES, weights_record

    if hashed:
        return weights_record(folder)
    return {
        "path": str(folder),
        "sizes": {
            f.name: f.stat().st_size
            for f in sorted(Path(folder).iterdir())
            if f.is_file() and f.suffix in WEIGHT_SUFFIXES
        },
    }


def build_decoders(
    settings: Settings, backbone_dir: Path, proxy_dir: Path, references: dict, hash_weights: bool = False
) -> Decoders:
    """Load the backbone once and the proxy once (``settings``' loading keys, precision and device) and build the
    three decoders of the module doc: the backbone's own, Algorithm 3 with the proxy, Algorithm 3 with the
    :class:`~unie.dllm.oracle.TextOracleLM` over the proxy's tokenizer (``references``: prompt -> reference
    completion).  Both bridges score on the proxy's device (``on_model``)."""
    from ..core.options import from_dict
    from ..dllm.backbone import DecodeOptions
    from ..dllm.bridge import ProxyBridge
    from ..dllm.decoder import DLLMDecoder, ModelArgs, hf_dtype, load_backbone
    from ..dllm.oracle import TextOracleLM
    from ..models.hf import load_hf_causal

    parsed = {}
    for decode, a in settings.args.items():
        a = {**a, "pretrained": str(backbone_dir)}
        if "proxy" in a:
            a["proxy"] = str(proxy_dir)
        parsed[decode] = ModelArgs.parse(a)
    b = parsed["backbone"]
    model, tok, prompt_len, pad_to_batch, default_gen, is_ar = load_backbone(b)
    if is_ar:
        raise CalibrationError(f"{backbone_dir} is not a diffusion LM")
    p = parsed["energy"]
    ar = load_hf_causal(
        proxy_dir, trust_remote_code=p.proxy_trust_remote_code, device=p.device, dtype=hf_dtype(p.precision)
    )
    oracle = TextOracleLM(references, ar.tokenizer, settings.oracle_eps)
    bridges = {"energy": ProxyBridge(ar, tok, on_model=True), "oracle": ProxyBridge(oracle, tok, on_model=True)}
    decoders = {}
    for decode, a in parsed.items():
        gen = int(a.decoding.get("gen_length", default_gen))
        opts = from_dict(DecodeOptions, {**a.decoding, "gen_length": gen}, "decoding options")
        decoders[decode] = DLLMDecoder(
            model,
            tok,
            prompt_len,
            opts,
            a.options,
            bridges.get(decode),
            seed=a.seed,
            name=decode,
            pad_to_batch=pad_to_batch,
            sampler=a.sampler,
            precision=a.precision,
        )
    info = {
        "backbone": str(backbone_dir),
        "proxy": str(proxy_dir),
        "weights": {
            "backbone": weights_identity(backbone_dir, hash_weights),
            "proxy": weights_identity(proxy_dir, hash_weights),
        },
        "decoders": {k: d.info() for k, d in decoders.items()},
    }
    return Decoders(decoders, bridges, info)


# ---------------------------------------------------------------------------------------------- per item
def decode_item(dec: Decoders, req: dict, score) -> dict:
    """The three decodes of one request (module doc, steps 1-3), their scores and the energy decodes' window
    counters; ``score(doc, texts, until) -> [scores]``."""
    out, texts = {}, []
    for decode in DECODES:
        t0 = time.perf_counter()
        (text,), counters = dec.decoders[decode].generate([req["prompt"]], req["max_new"], keys=[req["key"]])
        rec = {
            "text": text,
            "seconds": time.perf_counter() - t0,
            "nfe": int(counters["nfe"]),
            "generated_tokens": int(counters["generated_tokens"]),
        }
        if decode != "backbone":
            rec.update({k: int(counters[k]) for k in ("window_rows", "disagree_rows", "steered_rows")})
            rec["proxy_forwards"] = int(counters.get("proxy_forwards", 0))
        out[decode] = rec
        texts.append(text)
    for decode, s in zip(DECODES, score(req["doc"], texts, req["until"])):
        out[decode]["score"] = float(s)
    for decode in ("energy", "oracle"):
        out[decode]["changed"] = out[decode]["text"] != out["backbone"]["text"]
    return out


def path_counters(tree, scorer: str) -> dict:
    """The window counters of an argmin rule's path through a candidate tree, as
    :func:`~unie.dllm.energy_decoding.energy_decode` counts them on one row: per window node on the path,
    ``window_rows`` + 1, ``disagree_rows`` + 1 when its candidates do not all lead to one state (children are
    deduplicated by state; a child cut by the cap is a state unlike every kept one), ``steered_rows`` + 1 when the
    chosen candidate's state is not candidate 0's."""
    counts = {"window_rows": 0, "disagree_rows": 0, "steered_rows": 0}
    node = 0
    while True:
        nd = tree.nodes[node]
        if nd.leaf is not None or not nd.children:
            return counts
        e = nd.energies[scorer]
        j = min(range(len(e)), key=lambda i: (e[i], i))
        kids = nd.children
        counts["window_rows"] += 1
        counts["disagree_rows"] += int(None in kids or len(set(kids)) > 1)
        counts["steered_rows"] += int(kids[j] != kids[0])
        node = kids[j]
        if node is None:
            return counts


SCORERS = {"energy": "energy", "oracle": "oracle"}  # tree scorer name per energy decode
# beside them in the tree: the proxy's own score (proxy_rerank, the released code's rule), whose AUC is the map's
# judgement axis (unie.report.tables.map_table)
RERANK = "rerank"
AUC_LABELS = {
    "dlm": "the backbone's own log p(xs|xt)",
    "rerank": "the proxy's own score (proxy rerank: the map's judgement axis)",
    "energy": "Uni-E with the proxy",
    "oracle": "Ind-E with the oracle",
}


def tree_item(dec: Decoders, req: dict, score, cap: int) -> tuple[dict, object]:
    """The candidate tree of one request (module doc) with the two rules as scorers: ``(record, tree)``; the record
    holds every leaf's score, whether the tree is exhaustive, each rule's leaf and its path's counters."""
    from ..dllm.candidate_tree import Scorer, decoder_trees, rule_leaf

    energy = dec.decoders["energy"]
    scorers = {}
    for decode in ("energy", "oracle"):
        o = dec.decoders[decode].options
        scorers[SCORERS[decode]] = Scorer(o.energy, dec.bridges[decode], o.ar_context, o.selection)
    scorers[RERANK] = Scorer(energy.options.energy, dec.bridges["energy"], energy.options.ar_context, "proxy_rerank")
    t0 = time.perf_counter()
    (item,) = decoder_trees(energy, [req["prompt"]], req["max_new"], [req["key"]], energy.options, scorers, cap)
    scores = [float(s) for s in score(req["doc"], item.texts, req["until"])]
    rec = {
        "seconds": time.perf_counter() - t0,
        "leaves": len(item.texts),
        "nodes": len(item.tree.nodes),
        "exhaustive": bool(item.tree.exhaustive),
        "scores": scores,
    }
    for decode, name in SCORERS.items():
        leaf = rule_leaf(item.tree, name)
        rec[f"{decode}_leaf"] = leaf
        rec[f"{decode}_text"] = None if leaf is None else item.texts[leaf]
        rec[f"{decode}_counters"] = path_counters(item.tree, name)
    rec["rerank_leaf"] = rule_leaf(item.tree, RERANK)  # a path of the tree: the rule's decode (no direct check)
    return rec, item.tree


# ---------------------------------------------------------------------------------------------- the summary
def _points(mean_se) -> dict:
    mean, se = mean_se
    return {"mean": 100 * mean, "se": 100 * se if not math.isnan(se) else None}


def summarise(items: list[dict], trees: dict | None = None) -> dict:
    """The record's numbers from the per-item records (``items``; ``trees``: doc_id -> candidate tree, for the AUCs):
    accuracies (points, binomial s.e.), each energy decode's paired change against the backbone, the window shares
    (pooled, ratio s.e.) and, over the items with a tree, the room."""
    from ..eval.metrics import paired_mean_se, ratio_mean_se, window_shares

    done = [it for it in items if all(d in it for d in DECODES)]
    out: dict = {
        "items": len(done),
        "failed_items": sum("error" in it for it in items),
        "failed_trees": sum("tree_error" in it for it in items),
    }
    if not done:
        return out
    base = [it["backbone"]["score"] for it in done]
    out["accuracy"] = {}
    for decode in DECODES:
        s = [it[decode]["score"] for it in done]
        p = sum(s) / len(s)
        out["accuracy"][decode] = {"mean": 100 * p, "se": 100 * math.sqrt(p * (1 - p) / len(s))}
    out["change"], out["window"] = {}, {}
    for decode in ("energy", "oracle"):
        d = [it[decode]["score"] - b for it, b in zip(done, base)]
        mean, se = paired_mean_se(d)
        out["change"][decode] = {
            "delta": 100 * mean,
            "se": None if math.isnan(se) else 100 * se,
            "n": len(d),
            "changed_items": sum(it[decode]["changed"] for it in done),
            "gained_items": sum(x > 0 for x in d),
            "lost_items": sum(x < 0 for x in d),
        }
        rows = [it[decode]["window_rows"] for it in done]
        shares = window_shares(
            {k: sum(it[decode][k] for it in done) for k in ("window_rows", "disagree_rows", "steered_rows")}
            | {"window_padding": 0, "window_answer": 0}
        )
        if shares is None:
            out["window"][decode] = None
            continue
        w = {k: shares[k] for k in ("window_rows", "disagree_rows", "steered_rows", "disagree", "steered")}
        for k in ("disagree", "steered"):
            w[f"{k}_se"] = ratio_mean_se([it[decode][f"{k}_rows"] for it in done], rows)[1]
        w["steered_given_disagree"] = w["steered_rows"] / w["disagree_rows"] if w["disagree_rows"] else None
        w["items_disagree"] = sum(it[decode]["disagree_rows"] > 0 for it in done) / len(done)
        w["items_steered"] = sum(it[decode]["steered_rows"] > 0 for it in done) / len(done)
        out["window"][decode] = w
    with_tree = [it for it in done if "tree" in it]
    if with_tree:
        out["tree"] = tree_summary(with_tree, trees or {})
    return out


def tree_summary(items: list[dict], trees: dict) -> dict:
    """The room over the items with a tree: explored ceiling and floor against the backbone (paired, points), the
    share of items the window decides, the share explored exhaustively, each rule's path check, the AUCs."""
    from ..eval.metrics import paired_mean_se
    from ..eval.room import pairwise_auc

    base = [it["backbone"]["score"] for it in items]
    out = {
        "items": len(items),
        "exhaustive": sum(it["tree"]["exhaustive"] for it in items) / len(items),
        "leaves_mean": sum(it["tree"]["leaves"] for it in items) / len(items),
        "decides": sum(max(it["tree"]["scores"]) != min(it["tree"]["scores"]) for it in items) / len(items),
    }
    for name, pick in (("ceiling", max), ("floor", min)):
        mean, se = paired_mean_se([pick(it["tree"]["scores"]) - b for it, b in zip(items, base)])
        out[name] = {"delta": 100 * mean, "se": None if math.isnan(se) else 100 * se}
    mean, se = paired_mean_se([it["tree"]["scores"][it["tree"]["rerank_leaf"]] - b for it, b in zip(items, base)])
    out["rerank_change"] = {"delta": 100 * mean, "se": None if math.isnan(se) else 100 * se}
    out["paths"] = {}
    for decode in ("energy", "oracle"):
        same_text = sum(it["tree"][f"{decode}_text"] == it[decode]["text"] for it in items)
        same_counters = sum(
            it["tree"][f"{decode}_counters"]
            == {k: it[decode][k] for k in ("window_rows", "disagree_rows", "steered_rows")}
            for it in items
        )
        out["paths"][decode] = {"items": len(items), "same_text": same_text, "same_counters": same_counters}
    held = [(trees[it["doc_id"]], it["tree"]["scores"]) for it in items if it["doc_id"] in trees]
    if held:
        ts, ss = [t for t, _ in held], [s for _, s in held]
        out["auc"] = {"dlm": pairwise_auc(ts, ss, lambda nd, j: nd.dlm_logp[j])}
        for name in (RERANK, *SCORERS.values()):
            out["auc"][name] = pairwise_auc(ts, ss, lambda nd, j, n=name: -nd.energies[n][j])
    return out


# ---------------------------------------------------------------------------------------------- the record
def _fmt(x, nd: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{nd}f}"


def _pm(rec: dict | None, key: str = "delta") -> str:
    if not rec:
        return "–"
    return f"{_fmt(rec[key])} ± {_fmt(rec.get('se'))}"


def calibration_markdown(record: dict) -> str:
    """The record as Markdown (``calibration.md``)."""
    s = record.get("summary", {})
    head = record.get("settings", {})
    lines = [
        f"# Calibration point: {head.get('backbone_label', 'LLaDA')} + {head.get('proxy_label', 'proxy')} on "
        f"GSM8K ({record.get('status', 'running')})",
        "",
        f"device {record.get('device')}, torch {record.get('torch')}, {s.get('items', 0)} of "
        f"{record.get('requested_items')} items decoded, {_fmt(record.get('elapsed_s'), 0)} s "
        f"(models loaded in {_fmt(record.get('load_s'), 0)} s)",
        "",
    ]
    if head:
        lines += [
            f"decoding {head.get('decoding')}; Algorithm 3 {head.get('energy_options')}; oracle "
            f"{head.get('oracle_options')}, eps {head.get('oracle_eps')}; prompt: {head.get('prompt')}; "
            f"metric {head.get('metric')}",
            "",
        ]
    if record.get("stopped"):
        lines += [f"**Stopped early** in phase {record['stopped']['phase']}: {record['stopped']['reason']}", ""]
    failed = [it for it in record.get("items", []) if "error" in it or "tree_error" in it]
    if failed:
        lines += [
            f"**{len(failed)} items failed** (left out of the numbers): "
            + "; ".join(
                f"doc {it['doc_id']}: {(it.get('error') or it['tree_error'])['message'][:120]}" for it in failed[:5]
            ),
            "",
        ]
    if s.get("accuracy"):
        acc, ch = s["accuracy"], s["change"]
        lines += [
            "| decode | accuracy (points) | change vs backbone (paired s.e.) | items changed / gained / lost |",
            "|---|---|---|---|",
            f"| backbone (own decoder) | {_pm(acc['backbone'], 'mean')} | | |",
        ]
        for decode, label in (("energy", "Uni-E argmin, the proxy"), ("oracle", "Ind-E argmin, the oracle")):
            c = ch[decode]
            lines.append(
                f"| {label} | {_pm(acc[decode], 'mean')} | {_pm(c)} | {c['changed_items']} / "
                f"{c['gained_items']} / {c['lost_items']} |"
            )
        lines += ["", "| window (row-iterations) | Uni-E, the proxy | Ind-E, the oracle |", "|---|---|---|"]
        ws = s["window"]

        def cell(decode, key):
            w = ws.get(decode)
            if not w:
                return "–"
            if key in ("disagree", "steered"):
                return f"{_fmt(100 * w[key], 1)} % ± {_fmt(100 * w[f'{key}_se'], 1)}"
            if key in ("items_disagree", "items_steered", "steered_given_disagree"):
                return "–" if w[key] is None else f"{_fmt(100 * w[key], 1)} %"
            return str(w[key])

        for key, label in (
            ("window_rows", "window iterations"),
            ("disagree", "candidates disagree"),
            ("steered", "choice differs from candidate 0"),
            ("steered_given_disagree", "... of the disagreeing ones"),
            ("items_disagree", "items with a disagreement"),
            ("items_steered", "items steered"),
        ):
            lines.append(f"| {label} | {cell('energy', key)} | {cell('oracle', key)} |")
    t = s.get("tree")
    if t:
        lines += [
            "",
            f"Candidate tree (cap {record.get('cap')} nodes per level beyond the rules' paths), "
            f"{t['items']} items, {_fmt(100 * t['exhaustive'], 0)} % exhaustive, {_fmt(t['leaves_mean'], 1)} "
            "leaves per item:",
            "",
            "| quantity | value |",
            "|---|---|",
            f"| explored ceiling vs backbone (points) | {_pm(t['ceiling'])} |",
            f"| explored floor vs backbone (points) | {_pm(t['floor'])} |",
            f"| items the window decides | {_fmt(100 * t['decides'], 1)} % |",
        ]
        for decode, p in t["paths"].items():
            lines.append(
                f"| {decode} rule: tree path = its decode (text / counters) | {p['same_text']} / "
                f"{p['same_counters']} of {p['items']} |"
            )
        lines.append(f"| proxy rerank (its path in the tree) vs backbone (points) | {_pm(t['rerank_change'])} |")
        for name, a in t.get("auc", {}).items():
            lines.append(
                f"| pairwise AUC of {AUC_LABELS.get(name, name)} | {_fmt(a['auc'], 3)} ± {_fmt(a['se'], 3)} "
                f"({a['pairs']} pairs, {a['items']} items) |"
            )
    return "\n".join(lines) + "\n"


def failure(e: BaseException) -> dict:
    """An item's error as the record keeps it: its one-line message and the traceback's last lines."""
    return {"message": f"{type(e).__name__}: {e}"[:500], "traceback": traceback.format_exc()[-2000:]}


def run_calibration(
    reqs: list[dict],
    dec: Decoders,
    score,
    out_dir: Path,
    record: dict,
    deadline: float,
    cap: int | None,
    log=print,
    clock=time.perf_counter,
) -> dict:
    """The two phases over the requests ``reqs`` (module doc): ``decode`` (the three decodes of every item), then,
    with ``cap`` (None: no tree), ``tree``.  ``record`` (its settings, device, times) gets ``items``, ``summary``,
    ``phase``, ``status`` and, when ``deadline`` (a ``clock()`` time) would be passed by the next item at the pace
    of the last one, ``stopped``; it is written to ``out_dir`` after every item and every phase.  Returns it."""
    items, trees = [], {}
    record.update(items=items, phase="decode", status="running", cap=cap)

    def save():
        record["summary"] = summarise(items, trees)
        record["elapsed_s"] = clock() - record.get("_t0", clock())
        write_record({k: v for k, v in record.items() if not k.startswith("_")}, out_dir)

    def out_of_time(phase: str, done: int, pace: float) -> bool:
        if clock() + pace <= deadline:
            return False
        record["stopped"] = {
            "phase": phase,
            "items_done": done,
            "reason": f"the time limit would pass during the next item ({done} done, {pace:.1f} s per item)",
        }
        log(f"calibration: stopped in phase {phase} after {done} items (time limit)")
        return True

    save()
    pace = 0.0
    for i, req in enumerate(reqs):
        if out_of_time("decode", i, pace):
            break
        t0 = clock()
        it = {
            "doc_id": req["doc_id"],
            "target": str(req["doc"].get("answer", "")).split("####")[-1].strip(),
            "prompt": req["prompt"],
            "prompt_tokens": len(dec.decoders["backbone"].tok.encode(req["prompt"])),
        }
        try:
            it.update(decode_item(dec, req, score))
        except Exception as e:  # one item's failure is recorded and the run goes on (a GPU's minutes are few)
            it["error"] = failure(e)
            log(f"calibration: item {i + 1} (doc {req['doc_id']}) failed: {it['error']['message']}")
        items.append(it)
        pace = clock() - t0
        save()
        if "error" in it:
            continue
        log(
            f"calibration: item {i + 1}/{len(reqs)} (doc {req['doc_id']}) in {pace:.1f} s: scores "
            + ", ".join(f"{d} {it[d]['score']:g}" for d in DECODES)
            + f"; window {it['energy']['disagree_rows']}/{it['energy']['window_rows']} disagree, "
            f"{it['energy']['steered_rows']} steered"
        )
    if cap is not None and "stopped" not in record:
        record["phase"] = "tree"
        save()
        by_id = {r["doc_id"]: r for r in reqs}
        pace = max((it["energy"]["seconds"] for it in items), default=0.0)
        for i, it in enumerate(items):
            if "error" in it:
                continue
            if out_of_time("tree", i, pace):
                break
            t0 = clock()
            try:
                it["tree"], trees[it["doc_id"]] = tree_item(dec, by_id[it["doc_id"]], score, cap)
            except Exception as e:
                it["tree_error"] = failure(e)
                log(f"calibration: tree {i + 1} failed: {it['tree_error']['message']}")
                save()
                continue
            pace = clock() - t0
            save()
            log(
                f"calibration: tree {i + 1}/{len(items)} in {pace:.1f} s: {it['tree']['leaves']} leaves, best "
                f"{max(it['tree']['scores']):g}, worst {min(it['tree']['scores']):g}, backbone "
                f"{it['backbone']['score']:g}"
            )
    record["phase"] = "done"
    record["status"] = "stopped early" if "stopped" in record else "complete"
    save()
    return record


def write_record(record: dict, out_dir: Path) -> None:
    """``calibration.json`` and ``calibration.md`` in ``out_dir``, each written atomically."""
    write_json(record, out_dir / "calibration.json", indent=1)
    atomic_write_text(out_dir / "calibration.md", calibration_markdown(record))


__all__ = [
    "CalibrationError",
    "Decoders",
    "Settings",
    "build_decoders",
    "calibration_markdown",
    "decode_item",
    "gsm8k_requests",
    "gsm8k_task",
    "paper_settings",
    "path_counters",
    "reference_completion",
    "resolve_data",
    "resolve_model",
    "run_calibration",
    "summarise",
    "tree_item",
    "write_record",
]
