"""The DLLM half's file I/O: task data -> tokenizers and training tensors, training the tiny DLLMs (AR rows and
proxy too), Table 3's rows (one lm-eval run per row) and the sweeps (one lm-eval run per point, then each point's
decoder timed again).  The decoders themselves live in :mod:`unie.dllm`.

Directory ``resources/dllm/`` (written by :func:`prepare_dllm_data`):
``tokenizers/{word,bpe}/``, ``{tokenizer}_{layout}_{data}.pt`` tensors (layout ``dllm`` or ``ar``; data ``sft``
or ``mix``), ``{tokenizer}_pretrain.pt`` (pretraining rows, either layout) and ``meta.json`` (prompt lengths per tokenizer, ``gen_length``).
A trained model directory holds ``model.safetensors``, ``config.json`` (with ``extra.layout``: the
tokenizer, prompt and generation lengths the model was trained with) and ``tokenizer/`` (self-contained,
so ``--model_args pretrained=results/models/llada`` is all lm-eval needs).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config.settings import LmEvalSettings
from ..core.distributed import world
from ..core.integrity import (
    MADE_FROM,
    DamagedFileError,
    atomic_save_torch,
    atomic_write_text,
    file_record,
    file_sha256,
    read_json,
    verify_file,
)
from ..core.options import ConfigError, TrainConfig, from_dict
from ..core.precision import check_precision, precision_record
from ..core.train import run_spec, train
from ..data.dllm_format import LAYOUTS, ar_sft_rows, content_lengths, dllm_sft_rows, pack_text, trim_padding
from ..data.tasks import task_vocabulary
from ..data.tokenizer import bpe_tokenizer, load_tokenizer, word_tokenizer
from ..dllm.backbone import DEFAULT_MAX_GEN_TOKS
from ..dllm.rows import row_model_args, sweep_points
from ..eval.timing import TimingChecks, describe, summarise, time_passes
from ..models.checkpoint import CheckpointError, load_model, save_model
from .damage import identities
from .model_files import build_method, fresh_network, init_fingerprint, model_config
from .rule import write_json


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------- data
def prepare_dllm_data(
    task_files: dict,
    test_files: dict,
    toy_texts: list[str],
    out_dir,
    gen_length: int | dict,
    bpe_vocab_size: int,
    n_pretrain_texts: int,
    seed: int = 0,
    log=print,
) -> dict:
    """Tokenizers and training tensors of the DLLM half.

    ``task_files``: task -> train JSONL (the fine-tuning mix); ``test_files``: task -> test JSONL (only to size
    the prompt length); ``toy_texts``: toy-world text (pretraining, and the proxy's mix); ``gen_length``: the
    answer positions of a training row (the answer and its ``<eos>`` padding), one number or one per tokenizer
    (``word``, ``bpe``; config ``dllm.sft_length``); ``seed`` (config ``dllm.tasks.seed``) orders the proxy's mix of
    pretraining and SFT rows."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train_docs = [d for t in sorted(task_files) for d in read_jsonl(task_files[t])]
    all_prompts = [d["question"] for d in train_docs] + [
        d["question"] for t in sorted(test_files) for d in read_jsonl(test_files[t])
    ]
    prompts, answers = [d["question"] for d in train_docs], [d["answer"] for d in train_docs]
    toy = toy_texts[:n_pretrain_texts]
    toks = {
        "word": word_tokenizer(task_vocabulary(), unk=True),
        # the LLaDA-like model's own tokenizer: BPE on the same text (it splits many words into pieces)
        "bpe": bpe_tokenizer(toy + [p + " " + a for p, a in zip(prompts, answers)], bpe_vocab_size),
    }
    lengths = {name: int(gen_length[name] if isinstance(gen_length, dict) else gen_length) for name in toks}
    meta = {
        "gen_length": lengths,
        "prompt_len": {},
        "n_sft": len(train_docs),
        "tasks": sorted(task_files),
        "n_pretrain_texts": len(toy),
        "files": {},
    }  # files: size and SHA-256 of each tensor file (checked on load)
    g = torch.Generator().manual_seed(seed)
    for name, tok in toks.items():
        tok.save(out / "tokenizers" / name)
        P, G = 1 + max(len(ids) for ids in tok.encode_batch(all_prompts)), lengths[name]
        T = P + G
        meta["prompt_len"][name] = P
        dllm = dllm_sft_rows(tok, prompts, answers, P, G)
        ar = ar_sft_rows(tok, prompts, answers, T)
        pre = pack_text(tok, toy, T)
        pre3 = torch.stack([pre, torch.ones_like(pre)], dim=1)
        tensors = {
            "dllm_sft": dllm,
            "ar_sft": ar,
            "pretrain": pre,  # pretraining rows fit either layout
            "ar_mix": torch.cat([ar, pre3])[torch.randperm(len(ar) + len(pre3), generator=g)],
        }
        for key, x in tensors.items():
            atomic_save_torch(out / f"{name}_{key}.pt", x)
            meta["files"][f"{name}_{key}.pt"] = file_record(out / f"{name}_{key}.pt")
        log(
            f"{name} tokenizer: {tok.vocab_size} tokens, prompt_len {P}, T {T}; sft {tuple(dllm.shape)}, "
            f"pretrain {tuple(pre.shape)}"
        )
    write_json(meta, out / "meta.json", indent=1)  # last: it vouches for the files above
    return meta


def dllm_data(dllm: dict, tasks_dir, tokenizer, toy, out_dir, log=print) -> dict:
    """Rule dllm_data: :func:`prepare_dllm_data` from the rule's files.  ``tasks_dir``: rule dllm_tasks' folder (each
    task of ``dllm.tasks.names`` with its ``data/{task}_test.jsonl``, and ``data/{task}_train.jsonl`` where it has a
    train split); ``toy``: the toy world's token file, whose first ``dllm.pretrain_texts`` rows are decoded with the
    toy ``tokenizer``; a tokenizer without a ``dllm.sft_length`` trains on the decoding canvas
    (``dllm.decoding.gen_length``)."""
    import os

    from ..data.tokens import load_tokens

    names = dllm["tasks"]["names"]
    train = {
        t: f"{tasks_dir}/data/{t}_train.jsonl" for t in names if os.path.exists(f"{tasks_dir}/data/{t}_train.jsonl")
    }
    test = {t: f"{tasks_dir}/data/{t}_test.jsonl" for t in names}
    toy_tok = load_tokenizer(tokenizer)
    n = dllm["pretrain_texts"]
    texts = [toy_tok.decode(r) for r in load_tokens(toy, n).tolist()]
    gen = dllm["decoding"]["gen_length"]
    sft_length = {name: (dllm.get("sft_length") or {}).get(name, gen) for name in ("word", "bpe")}
    return prepare_dllm_data(
        train,
        test,
        texts,
        out_dir,
        sft_length,
        dllm["bpe_vocab_size"],
        n,
        seed=dllm["tasks"]["seed"],
        log=log,
    )


def load_dllm_tensor(data_dir, filename: str, meta: dict) -> tuple[torch.Tensor, str]:
    """``(tensor, sha256)`` of a training tensor of :func:`prepare_dllm_data`, its bytes checked against the size
    and SHA-256 in ``meta.json``; a damaged file is a :class:`DamagedFileError` naming it and the fix (rule
    ``dllm_data`` rewrites every tensor when its ``meta.json`` is missing)."""
    path = Path(data_dir) / filename
    fix = "rerun the workflow: it sets the damaged file aside and rule dllm_data rewrites every tensor in the same run"
    record = meta.get("files", {}).get(filename)
    digest = verify_file(path, record, fix) if record else file_sha256(path)
    try:
        return torch.load(path, weights_only=True), digest
    except Exception as e:
        raise DamagedFileError(
            path, f"torch cannot read it ({(str(e).splitlines() or [type(e).__name__])[0]})", fix
        ) from None


# ---------------------------------------------------------------------- training
def transfer_weights(net, init, new_tok, old_tok, log=print) -> None:
    """Initialise ``net`` from ``init`` (another vocabulary, or another attention direction: an AR's weights
    for the Dream-like model).  Every tensor of the same name and shape is copied; the embedding and the
    output head are copied row by row for the tokens both vocabularies share (matched by the text they add,
    :meth:`~unie.data.tokenizer.Tokenizer.surfaces`, so BPE's ``▁anchor`` takes the word model's ``anchor``;
    specials by name);
    new tokens keep their initialisation.  Any other shape difference is an error."""
    own, theirs = net.state_dict(), init.state_dict()

    def keys(tok):  # specials by name, every other token by the text it adds (" anchor" in both vocabularies)
        specials = {tok.eos_id, tok.bos_id, tok.mask_id}
        return [
            t if i in specials or t.startswith("<") and t.endswith(">") else s
            for i, (t, s) in enumerate(zip(tok.tokens, tok.surfaces()))
        ]

    new_index = {}
    for i, k in enumerate(keys(new_tok)):
        new_index.setdefault(k, i)
    shared = [(new_index[k], j) for j, k in enumerate(keys(old_tok)) if k in new_index]
    copied = []
    with torch.no_grad():
        for k, v in theirs.items():
            if k not in own:
                raise CheckpointError(f"init weights have {k!r}, which the new network lacks")
            if own[k].shape == v.shape and k not in ("embed.weight", "head.weight"):
                own[k].copy_(v)
            elif k in ("embed.weight", "head.weight") and own[k].shape[1:] == v.shape[1:]:
                ni, oi = torch.tensor([a for a, _ in shared]), torch.tensor([b for _, b in shared])
                own[k][ni] = v[oi]
            else:
                raise CheckpointError(
                    f"init weights {k!r} have shape {tuple(v.shape)}, the new network {tuple(own[k].shape)}"
                )
            copied.append(k)
    net.load_state_dict(own)
    log(
        f"initialised from another checkpoint: {len(copied)} tensors; {len(shared)} of {len(new_tok.tokens)} "
        f"token rows shared by string"
    )


def train_dllm_model(
    name: str,
    spec: dict,
    data_dir,
    out_dir,
    ckpt_dir,
    device: str = "cpu",
    init_dir=None,
    init_tokenizer_dir=None,
    log=print,
    precision: str = "fp32",
):
    """Train one model of ``config['dllm']['models']`` on ``data_dir/{tokenizer}_{layout}_{data}.pt`` (``{tokenizer}_pretrain.pt``).

    ``precision`` (:mod:`unie.core.precision`): the training passes' precision, as for the models of the DLM half
    (:func:`~unie.pipeline.model_files.train_from_spec`): another precision than ``fp32`` is another run specification
    and is recorded in ``config.json``.

    Under ``torch.distributed`` every rank calls this (data-parallel :func:`~unie.core.train.train`, ``device``
    is the rank's own); only rank 0 writes ``out_dir``."""
    data_dir = Path(data_dir)
    tok_name, data_kind = spec["tokenizer"], spec["data"]
    tok = load_tokenizer(data_dir / "tokenizers" / tok_name)
    meta = read_json(data_dir / "meta.json", "DLLM data description")
    method = build_method(spec["method"], tok.info(), spec.get("options", {}), f"dllm.models.{name}.options")
    layout = LAYOUTS[spec["method"]]
    path = data_dir / (f"{tok_name}_pretrain.pt" if data_kind == "pretrain" else f"{tok_name}_{layout}_{data_kind}.pt")
    if not path.exists():
        raise ConfigError(f"dllm.models.{name}: no {data_kind!r} data for layout {layout!r} ({path})")
    data, data_sha = load_dllm_tensor(data_dir, path.name, meta)
    seq_len = data.shape[-1]
    cfg = model_config(spec["arch"], tok.vocab_size, seq_len, method)
    tcfg = from_dict(TrainConfig, spec["train"], f"dllm.models.{name}.train")
    net = fresh_network(method, cfg, tcfg.seed).to(device)
    init_tok_fp = None
    if init_dir:
        init, init_meta = load_model(init_dir, device)
        old_tok = load_tokenizer(init_tokenizer_dir)
        init_tok_fp = old_tok.info()["fingerprint"]
        if init_meta["tokenizer"]["fingerprint"] != init_tok_fp:
            raise CheckpointError(f"{init_dir} was not trained with the tokenizer at {init_tokenizer_dir}")
        transfer_weights(net, init, tok, old_tok, log)
    sig = run_spec(
        tcfg,
        {
            "model": dataclasses.asdict(cfg),
            "method": spec["method"],
            "options": spec.get("options", {}),
            "data": {"sha256": data_sha, "shape": list(data.shape)},
            "tokenizer": tok.info()["fingerprint"],
            "init": init_fingerprint(init_dir),
            "init_tokenizer": init_tok_fp,
            **precision_record(check_precision(precision)),
        },
    )
    log(
        f"training {name} ({spec['method']}, {tok_name} tokenizer, {data_kind} data {tuple(data.shape)}): "
        f"{sum(p.numel() for p in net.parameters()) / 1e6:.2f}M parameters"
    )
    bucketed = {}
    if tcfg.length_buckets > 1:  # batches of similar length, all-padding columns dropped (see TrainConfig)
        bucketed = {
            "row_lengths": content_lengths(data, tok.eos_id),
            "collate": functools.partial(trim_padding, pad_id=tok.eos_id),
        }
    ema, history = train(net, method.loss, data, tcfg, ckpt_dir, sig, log=log, precision=precision, **bucketed)
    extra = {
        "options": spec.get("options", {}),
        "train": spec["train"],
        "data": str(path),
        **precision_record(precision),
        "layout": {
            "kind": layout,
            "tokenizer": tok_name,
            "prompt_len": meta["prompt_len"][tok_name],
            "gen_length": meta["gen_length"][tok_name],
            "pad_to_batch": tcfg.length_buckets > 1,
        },
        "final": next((h for h in reversed(history) if "loss" in h), {}),
        MADE_FROM: identities(
            [
                data_dir / "meta.json",
                data_dir / "tokenizers" / tok_name,
                *(
                    (Path(init_dir, "model.safetensors"), Path(init_dir, "config.json"), init_tokenizer_dir)
                    if init_dir
                    else ()
                ),
            ]
        ),
    }
    if world()[0] == 0:
        tokenizer = Path(out_dir) / "tokenizer"
        shutil.copytree(data_dir / "tokenizers" / tok_name, tokenizer, dirs_exist_ok=True)
        atomic_write_text(Path(out_dir, "history.json"), json.dumps(history, indent=1))
        files = ["history.json", *sorted(str(f.relative_to(out_dir)) for f in tokenizer.rglob("*") if f.is_file())]
        save_model(ema, out_dir, spec["method"], tok.info(), extra=extra, files=files)  # last: it vouches for them
    return ema, history


# ---------------------------------------------------------------------- Table 3's rows
def run_rows(
    rows: dict,
    inputs: dict,
    dllm: dict,
    results,
    effects,
    device: str,
    nproc: int = 1,
    log=print,
    precision: str = "fp32",
    threads: int = 1,
) -> list[dict]:
    """Rules dllm_eval (one Table 3 row) and dllm_eval_{model} (every row of one backbone, ``dllm.eval_job:
    model``): per row of ``rows`` (name -> spec, in order; ``inputs``: name -> the files it reads) one lm-eval run
    over the tasks ``dllm.tasks.names`` (:func:`unie.dllm.lmeval.run_evaluation`, data parallel on ``nproc`` ranks
    when above 1; lm-eval writes its JSONs), its results JSON copied byte for byte to the row's ``results`` path,
    then the row's effect against its backbone (``delta_to``) at its ``effects`` path
    (:func:`~unie.pipeline.tables_figures.dllm_effect`).  ``results`` and ``effects``: one path each (one row) or
    one per row, in the rows' order.  ``precision``: every row's model_args (:func:`~unie.dllm.rows.row_model_args`).
    Returns the rows' effects."""
    import os

    from ..dllm.lmeval import run_evaluation
    from .tables_figures import dllm_effect

    lm = LmEvalSettings.from_dllm(dllm)
    many = not isinstance(results, str)  # a model's job: one output of each kind per row, in the rows' order
    out = []
    for i, (name, row) in enumerate(rows.items()):
        row_inputs = inputs[name]
        result, effect = (results[i], effects[i]) if many else (results, effects)
        out_dir = os.path.dirname(result)
        args = row_model_args(name, row, dllm, row_inputs, device, precision)
        log(f"{name}: model_args: {args}")
        local = row_inputs.get("tasks") or row_inputs.get("local_tasks")  # toy tasks, or the paper's local ones
        include = os.path.dirname(local[0]) if local else None
        kwargs = dict(
            model_args=args,
            tasks=dllm["tasks"]["names"],
            include_path=include,
            output_path=out_dir,
            batch_size=lm.batch_size,
            include_defaults=lm.include_default_tasks,
            limit=lm.limit,
            seed=lm.seed,
            allow_code_execution=lm.allow_code_execution,
        )
        found = run_evaluation(kwargs, nproc, log=log, threads=threads)
        shutil.copyfile(found, result)  # lm-eval's JSON, byte for byte, at a deterministic path
        base = row.get("delta_to")
        e = dllm_effect(
            name, base, dllm["tasks"], out_dir, os.path.dirname(row_inputs["base"]) if base else None, effect
        )
        if e["avg"]:
            log(
                f"{name} against {base}: average {e['avg']['delta']:+.2f} ± {e['avg']['se']:.2f} points, "
                f"{100 * e['avg']['changed']:.1f} % of completions changed"
            )
        if e["window"]:
            log(
                f"{name} window: {100 * e['window']['disagree']:.1f} % of {e['window']['window_rows']} "
                f"row-iterations disagree, {100 * e['window']['steered']:.1f} % steered"
            )
        out.append(e)
    return out


# ---------------------------------------------------------------------- sweeps (Figure 4, appendix k/w tables)
SWEEP_SOURCES = ("lm_eval", "timed")


@dataclass(frozen=True)
class SweepTiming:
    """Where a sweep point's throughput comes from (``source``) and how it is checked.

    ``lm_eval`` (the default): the scored lm-eval pass's own (its ``throughput.json``: every prompt once, the first
    batch generated untimed before, model loading excluded; the paper's protocol is one pass too), checked for CPU
    starvation by the process CPU time of that pass (:func:`lmeval_pass_timing`).  ``timed``: measured again after
    the lm-eval run in a job that holds every core (:func:`time_sweep_point`): ``repeats`` timed passes over the
    first ``batches`` batches of the task's prompts, batched as the lm-eval pass batches them (None: every prompt,
    so that a pass makes the model calls of lm-eval's pass; prompts are batched by length, and the first batches
    alone would be the shortest prompts), after ``warmup`` untimed batches; tokens/s is the median over the passes.
    ``checks``: when a timing is flagged (:class:`~unie.eval.timing.TimingChecks`; a flagged timed one is measured
    again up to ``checks.reruns`` times)."""

    source: str = "lm_eval"
    repeats: int = 3
    warmup: int = 1
    batches: int | None = None
    checks: TimingChecks = TimingChecks()

    def __post_init__(self):
        if self.source not in SWEEP_SOURCES:
            raise ValueError(f"dllm.timing.source {self.source!r}: one of {', '.join(SWEEP_SOURCES)}")

    @property
    def timed(self) -> bool:
        """Whether the points are timed again in a job of their own that holds every core (rule dllm_sweep)."""
        return self.source == "timed"

    @classmethod
    def from_config(cls, d: dict | None) -> SweepTiming:
        d = dict(d or {})
        return cls(**{**d, "checks": TimingChecks(**d.get("checks", {}))})


def sweep_batches(samples_path, batch_size: int, batches: int | None, batch_key=None) -> list[tuple[list[str], int]]:
    """The prompts of an lm-eval ``samples_*.jsonl`` (document order) in the batches the adapter makes: the same
    ``max_gen_toks``, then the same ``batch_key(prompt)`` (the decoder's: prompts of one length), at most
    ``batch_size`` each; the first ``batches`` of them (None: all)."""
    groups: dict[int, list[str]] = {}
    for doc in sorted(read_jsonl(samples_path), key=lambda d: d["doc_id"]):
        args = doc["arguments"]["gen_args_0"]
        groups.setdefault(int(args["arg_1"].get("max_gen_toks", DEFAULT_MAX_GEN_TOKS)), []).append(args["arg_0"])
    out = []
    for max_new, prompts in groups.items():
        by_key: dict = {}
        for p in prompts:  # document order kept inside a key, keys in sorted order (as unie.dllm.lmeval does)
            by_key.setdefault(batch_key(p) if batch_key else 0, []).append(p)
        out += [
            (same[i : i + batch_size], max_new)
            for k in sorted(by_key)
            for same in [by_key[k]]
            for i in range(0, len(same), batch_size)
        ]
    return out if batches is None else out[:batches]


def time_sweep_point(
    args: dict,
    samples_path,
    batch_size: int,
    timing: SweepTiming,
    lmeval_tp: dict,
    log=print,
    lmeval_threads: int | None = None,
) -> dict:
    """The throughput of one sweep point, measured again after its lm-eval run (whose adapter times a single pass):
    the decoder of ``args`` rebuilt (loading untimed), :func:`~unie.eval.timing.time_passes` over the prompts of
    ``samples_path`` (:func:`sweep_batches`).  Besides the checks of one timing, its seconds per model call are
    compared with those of the lm-eval pass (``lmeval_tp``: its ``throughput.json``), the same decoder on the same
    prompts, when that pass ran on as many torch threads (``lmeval_threads``; None: the same): a deviation above
    ``checks.max_call_deviation`` is flagged ``seconds_per_call``.  On other threads (a local CPU run: the lm-eval
    job on ``threads`` beside other jobs, the timing on every core) the two are not comparable: the lm-eval pass's
    seconds per call are recorded, not checked (``call_checked``: false)."""
    from ..dllm.decoder import build_decoder

    decoder = build_decoder(args)
    checks = timing.checks
    out = time_passes(
        decoder.generate,
        sweep_batches(samples_path, batch_size, timing.batches, getattr(decoder, "batch_key", None)),
        repeats=timing.repeats,
        warmup=timing.warmup,
        device=args.get("device", "cpu"),
        checks=checks,
        reruns=checks.reruns,
    )
    ref = lmeval_tp["seconds"] / lmeval_tp["nfe"] if lmeval_tp.get("nfe") and lmeval_tp.get("seconds") else None
    out["seconds_per_call_lmeval"] = ref
    out["threads_lmeval"] = lmeval_threads if lmeval_threads is not None else out["threads"]
    out["call_checked"] = bool(ref and out["seconds_per_call"] and out["threads_lmeval"] == out["threads"])
    if out["call_checked"] and abs(out["seconds_per_call"] / ref - 1) > checks.max_call_deviation:
        out["flags"] = out["flags"] + ["seconds_per_call"]
        out["trusted"] = False
    return out


def lmeval_pass_timing(tp: dict, threads: int | None, device: str, checks: TimingChecks) -> dict:
    """A sweep point's throughput from its scored lm-eval pass (``tp``: its ``throughput.json``), with the checks one
    pass allows (:func:`~unie.eval.timing.summarise` of that single stretch: CPU starvation on a CPU; no spread, one
    pass).  ``threads``: the torch threads the pass ran on (the lm-eval job's).  A ``throughput.json`` without
    ``cpu_seconds`` (written before it was recorded, or several ranks) is not CPU-checked (``cpu_checked``:
    false)."""
    seconds, cpu = tp.get("seconds"), tp.get("cpu_seconds")
    threads = threads or 1
    if seconds and cpu is not None:
        out = summarise([seconds], [cpu], threads=threads, device=device, nfe=tp.get("nfe"), checks=checks)
    else:
        out = {"cpu_ratio": None, "cpu_checked": False, "threads": threads, "flags": [], "trusted": True}
        out["seconds_per_call"] = seconds / tp["nfe"] if seconds and tp.get("nfe") else None
    return {
        "source": "lm_eval",
        "tokens_per_s": tp.get("tokens_per_s"),
        "seconds": seconds,
        "cpu_seconds": cpu,
        "generated_tokens": tp.get("generated_tokens"),
        "requests": tp.get("requests"),
        "nfe": tp.get("nfe"),
        **{k: out[k] for k in ("cpu_ratio", "cpu_checked", "threads", "seconds_per_call", "flags", "trusted")},
    }


def resume_stamp(inputs: dict) -> str:
    """What a finished sweep point depends on beyond its own settings, for :func:`evaluate_sweep` and
    :func:`time_sweep` to reuse it after an interrupted attempt: the package's source (every ``unie/**/*.py``), the
    lm-eval, torch and transformers versions, and every input file's name, size and modification time (a model
    fetched again, a task file replaced).  A hex digest."""
    import hashlib
    from importlib.metadata import version

    from ..core.integrity import code_digest

    h = hashlib.sha256(code_digest().encode())
    for dist in ("lm_eval", "torch", "transformers"):
        h.update(f"{dist}={version(dist)}".encode())
    for key in sorted(inputs):
        paths = inputs[key] if isinstance(inputs[key], (list, tuple)) else [inputs[key]]
        for path in map(Path, paths):
            for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
                if f.is_file():
                    st = f.stat()
                    h.update(f"{key}:{f}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


LMEVAL_RECORD = "lmeval.json"  # a sweep's lm-eval runs (rule dllm_sweep_eval), beside its points.json
TIMED = "timing.json"  # a point's timing (rule dllm_sweep), in its folder beside point.json (its lm-eval run)
# a point's record in points.json: these fields of its lm-eval run, tokens/s, these, then the timing's verdict
_POINT_HEAD = ("sweep", "point", "curve", "label", "key", "value", "task", "metric", "accuracy", "stderr", "n")
_POINT_TAIL = ("nfe", "seconds", "requests", "generated_tokens", "model_args", "tokens_per_s_lmeval")


def _point_args(point: dict, dllm: dict, inputs: dict, device: str, precision: str) -> dict:
    """A sweep point's ``model_args`` (:func:`~unie.dllm.rows.row_model_args`) with its curve's files."""
    files = {
        role: inputs[f"{point['curve']}_{role}"] for role in ("model", "proxy") if f"{point['curve']}_{role}" in inputs
    }
    return row_model_args(point["name"], point["row"], dllm, files, device, precision)


def evaluate_sweep(
    sweep: str, dllm: dict, inputs: dict, out_dir, device: str, evaluate=None, log=print, precision: str = "fp32"
) -> list[dict]:
    """Rule dllm_sweep_eval: one lm-eval run (the real evaluator, ``--log_samples``) per point of ``sweep`` on the
    task ``dllm.sweeps.task``, all in this process (lm-eval and the models are imported once), on the job's threads
    beside other jobs.  What in ``out_dir`` is neither a point of the sweep nor its ``points.json`` (rule dllm_sweep's)
    goes first.  Writes ``{point}/results.json`` (lm-eval's JSON) and ``{point}/throughput.json`` (the adapter's
    counters and its timed pass: warm-up batch and model loading excluded, ``dllm.batch_size``) per point and
    :data:`LMEVAL_RECORD` (one record per point: accuracy and its s.e. from lm-eval, the items, NFE, requests,
    generated tokens, the adapter's pass; the torch threads it ran on), which vouches for the points' lm-eval files,
    under ``out_dir``; returns the records.  The throughput Figure 4 plots is timed after it (:func:`time_sweep`).
    ``evaluate``: :func:`unie.dllm.lmeval.evaluate` unless given (a test's stand-in).  ``precision``: every point's
    model_args (:func:`~unie.dllm.rows.row_model_args`).

    Resumable point by point: each finished point's record is kept in ``{point}/point.json`` with what it was made
    from (its model_args, the task, the metric, the shared settings and :func:`resume_stamp`); a job started again
    (a Slurm retry after the time limit) reuses every point whose record matches and runs the others, so 24
    points need not fit in one allocation.  A point whose record does not match is run again from nothing (its
    timing too)."""
    from ..data.tasks import PRIMARY_METRIC

    if evaluate is None:
        from ..dllm.lmeval import evaluate
    out_dir = Path(out_dir)
    points = sweep_points(dllm, sweep)
    keep = {p["name"] for p in points} | {"points.json"}
    for entry in sorted(out_dir.iterdir()) if out_dir.is_dir() else []:
        if entry.name not in keep:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)
    task = dllm["sweeps"]["task"]
    metric = dllm["tasks"].get("metrics", {}).get(task) or f"{PRIMARY_METRIC[task]},none"
    include = inputs.get("tasks") or inputs.get("local_tasks")
    include = Path(include[0] if isinstance(include, (list, tuple)) else include).parent if include else None
    lm = LmEvalSettings.from_dllm(dllm)
    stamp = resume_stamp(inputs)
    records = []
    for point in points:
        point_dir = out_dir / point["name"]
        args = _point_args(point, dllm, inputs, device, precision)
        made_with = json.dumps(
            {
                "model_args": args,
                "task": task,
                "metric": metric,
                "lm_eval": dataclasses.asdict(lm),
                "batch_size": dllm["batch_size"],
                "stamp": stamp,
            },
            sort_keys=True,
            default=str,
        )
        kept = _kept_point(point_dir / "point.json", made_with)
        if kept is not None:
            records.append(kept)
            log(f"{sweep} {point['name']}: kept from an earlier attempt of this job (accuracy {kept['accuracy']:.1f})")
            continue
        if point_dir.exists():
            shutil.rmtree(point_dir)  # an unfinished or stale point: from nothing
        log(f"{sweep} {point['name']}: model_args {args}")
        found = evaluate(
            args,
            [task],
            include,
            point_dir,
            lm.batch_size,
            include_defaults=lm.include_default_tasks,
            limit=lm.limit,
            seed=lm.seed,
            allow_code_execution=lm.allow_code_execution,
            log=log,
        )
        shutil.copyfile(found, point_dir / "results.json")
        res = json.loads((point_dir / "results.json").read_text())["results"][task]
        tp = json.loads((point_dir / "throughput.json").read_text())
        name, filt = metric.split(",", 1)
        samples = next(point_dir.rglob(f"samples_{task}_*.jsonl"))
        records.append(
            {
                "sweep": sweep,
                "point": point["name"],
                "curve": point["curve"],
                "label": point["label"],
                "key": point["key"],
                "value": point["value"],
                "task": task,
                "metric": metric,
                "accuracy": 100 * res[metric],
                "stderr": 100 * res[f"{name}_stderr,{filt}"],
                "n": len(read_jsonl(samples)),
                "nfe": tp["nfe"],
                "seconds": tp["seconds"],
                "requests": tp["requests"],
                "generated_tokens": tp["generated_tokens"],
                "model_args": {k: v for k, v in args.items() if k != "device"},
                "tokens_per_s_lmeval": tp["tokens_per_s"],
            }
        )
        log(
            f"  accuracy {records[-1]['accuracy']:.1f} ± {records[-1]['stderr']:.1f}, NFE {tp['nfe']} (lm-eval's pass "
            f"{tp['tokens_per_s'] or 0:.0f} tokens/s on {torch.get_num_threads()} threads: not the plotted throughput)"
        )
        atomic_write_text(point_dir / "point.json", json.dumps({"made_with": made_with, "record": records[-1]}))
    write_json(
        {
            "sweep": sweep,
            "task": task,
            "metric": metric,
            "batch_size": dllm["batch_size"],
            "threads": torch.get_num_threads(),  # the lm-eval passes' (time_sweep compares like with like)
            "points": records,
        },
        out_dir / LMEVAL_RECORD,
        indent=1,
        records=point_files(out_dir, [r["point"] for r in records]),
    )  # it vouches for the points' files
    return records


def time_sweep(
    sweep: str, dllm: dict, inputs: dict, out_dir, device: str, log=print, precision: str = "fp32"
) -> list[dict]:
    """Rule dllm_sweep: the throughput of every point of ``sweep`` whose lm-eval run :func:`evaluate_sweep` recorded in
    ``out_dir`` (:data:`LMEVAL_RECORD`; the point's ``throughput.json`` and samples checked against it), by
    ``dllm.timing`` (:class:`SweepTiming`).  Its ``source`` ``lm_eval``: the scored pass's own tokens/s, CPU-checked
    (:func:`lmeval_pass_timing`; nothing is run, one core).  ``timed``: timed again in this job, which then holds
    every core on a CPU (:func:`time_sweep_point`): a point's ``tokens_per_s`` is the median of ``repeats`` timed
    passes after a warm-up.  Either way checked and flagged like every timing (``flags``, ``trusted``, the details
    under ``timing``); the adapter's own figures are kept as ``tokens_per_s_lmeval`` and ``seconds`` (its timed
    generation, all prompts).  Writes ``points.json`` (one record per point: accuracy and its s.e. from lm-eval,
    tokens/s, NFE) under ``out_dir``; returns the records.

    Resumable point by point as :func:`evaluate_sweep`: a timed point's timing is kept in ``{point}/timing.json``
    with what it was made from (the point's lm-eval record, the timing settings, :func:`resume_stamp`) and reused by
    a job started again while that still holds."""
    from ..core.integrity import fix_by_rerun, records_of, verify_file

    out_dir = Path(out_dir)
    evaluated = read_json(out_dir / LMEVAL_RECORD, "a sweep's lm-eval record")
    vouched = records_of(out_dir / LMEVAL_RECORD)
    fix = fix_by_rerun("dllm_sweep_eval")
    timing = SweepTiming.from_config(dllm.get("timing"))
    points = {p["name"]: p for p in sweep_points(dllm, sweep)}
    stamp = resume_stamp(inputs)
    records = []
    for ev in evaluated["points"]:
        point_dir = out_dir / ev["point"]
        made_with = json.dumps(
            {"record": ev, "timing": dataclasses.asdict(timing), "stamp": stamp}, sort_keys=True, default=str
        )
        timed = _kept_point(point_dir / TIMED, made_with) if timing.timed else None
        if timed is not None:
            log(f"{sweep} {ev['point']}: timing kept from an earlier attempt of this job")
        else:
            samples = next(point_dir.rglob(f"samples_{evaluated['task']}_*.jsonl"))
            for path in (point_dir / "throughput.json", samples):
                record = vouched.get(os.path.normpath(path))
                if record is not None:
                    verify_file(path, record, fix)
            tp = json.loads((point_dir / "throughput.json").read_text())
            if timing.timed:
                args = _point_args(points[ev["point"]], dllm, inputs, device, precision)
                timed = time_sweep_point(
                    args, samples, evaluated["batch_size"], timing, tp, log=log, lmeval_threads=evaluated.get("threads")
                )
                atomic_write_text(point_dir / TIMED, json.dumps({"made_with": made_with, "record": timed}))
            else:  # the scored pass's own tokens/s: nothing is run
                timed = lmeval_pass_timing(tp, evaluated.get("threads"), device, timing.checks)
        records.append(
            {
                **{k: ev[k] for k in _POINT_HEAD},
                "tokens_per_s": timed["tokens_per_s"],
                **{k: ev[k] for k in _POINT_TAIL},
                "flags": timed["flags"],
                "trusted": timed["trusted"],
                "timing": timed,
            }
        )
        how = (
            f"median of {timing.repeats} passes; spread {timed['spread']:.2f}; lm-eval's pass "
            f"{ev['tokens_per_s_lmeval'] or 0:.0f}"
            if timing.timed
            else f"the scored lm-eval pass on {timed['threads']} thread(s), CPU/wall "
            + (f"{timed['cpu_ratio']:.2f}" if timed["cpu_ratio"] is not None else "not recorded")
        )
        log(
            f"{sweep} {ev['point']}: accuracy {ev['accuracy']:.1f} ± {ev['stderr']:.1f}, "
            f"{timed['tokens_per_s'] or 0:.0f} tokens/s ({how}), NFE {ev['nfe']}"
        )
        if not timed["trusted"]:
            log(f"WARNING: {sweep} {ev['point']}: {describe(timed)}")
    write_json(
        {
            "sweep": sweep,
            "task": evaluated["task"],
            "metric": evaluated["metric"],
            "batch_size": evaluated["batch_size"],
            "points": records,
            "timing": dataclasses.asdict(timing),
            "trusted": all(r["trusted"] for r in records),
        },
        out_dir / "points.json",
        indent=1,
    )
    return records


def _kept_point(path: Path, made_with: str) -> dict | None:
    """A finished point's record (:func:`evaluate_sweep`, :func:`time_sweep`) when ``path`` holds one made with
    ``made_with``, else None."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return saved.get("record") if isinstance(saved, dict) and saved.get("made_with") == made_with else None


def point_files(out_dir, names) -> list[str]:
    """The lm-eval files of a sweep's or the map's points (``out_dir/{point}/``: :func:`row_files`), whose sizes and
    hashes the sweep's ``lmeval.json`` (:data:`LMEVAL_RECORD`) or the map job's ``points.json`` records."""
    from .tables_figures import row_files

    return [f for name in names for f in row_files(Path(out_dir) / name)]
