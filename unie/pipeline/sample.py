"""Rule ``sample``: one sampling run at one step count -> Parquet samples, then their Gen PPL and entropy.

* :func:`run_sampler`: draw the samples with the run's registered sampler (options checked strictly) and
  write them with their identity (run, steps, resolved options, timing) in the Parquet metadata.
* :func:`evaluate_samples`: Gen PPL under every evaluator (each loaded once) and entropy in bits; the
  result JSON carries the sampling identity, so tables read it from there, never from a path.
"""

from __future__ import annotations

import dataclasses
import json
import time
import zlib
from pathlib import Path

import pyarrow.parquet as pq
import torch

from ..core.registry import EVALUATORS, SAMPLERS
from ..data.corpus import load_tokens, write_tokens
from ..data.tokenizer import blocked_ids, load_tokenizer
from ..eval import genppl  # noqa: F401  (registers the evaluators)
from ..eval.metrics import mean_entropy_bits, ppl_with_se
from .models import load_wrapped


def sampling_seed(seed: int, run: str, steps: int) -> int:
    return zlib.crc32(f"{seed}/{run}/{steps}".encode())


def oracle_models(options, tokenizer, domain: str) -> dict:
    """Models the toy world supplies instead of a checkpoint: the exact AR for ``ar_context: exact``."""
    if getattr(options, "ar_context", None) != "exact":
        return {}
    from ..data.toy_world import HMM, OracleAR

    return {"proxy": OracleAR(HMM(domain), tokenizer)}


def run_sampler(run: str, spec: dict, steps: int, inputs: dict, out_path, n_samples: int, batch_size: int,
                seq_len: int, *, domain: str, seed: int = 0, device: str = "cpu", log=print) -> dict:
    """Draw ``n_samples`` sequences for sampling run ``run`` at ``steps`` steps and write them to ``out_path``.

    ``inputs``: ``tokenizer`` dir, one checkpoint file per model role, ``data`` for the data run;
    ``domain``: the toy world's domain of the exact proxy (``ar_context: exact``): the training domain."""
    entry = SAMPLERS[spec["sampler"]]
    opts = entry.options(spec.get("options", {}), where=f"sampling.runs.{run}.options")
    tok = load_tokenizer(inputs["tokenizer"])
    models = {}
    for role in spec.get("models", {}):
        path = inputs[role]
        path = path[0] if isinstance(path, (list, tuple)) else path
        models[role] = load_wrapped(str(Path(path).parent), tok, device)
    models.update(oracle_models(opts, tok, domain))
    if spec["sampler"] == "data":
        models["data"] = load_tokens(inputs["data"], n_samples).long()  # the first n rows
    g = torch.Generator(device=device).manual_seed(sampling_seed(seed, run, steps))
    t0 = time.perf_counter()
    x, stats = entry(models, n_samples, seq_len, steps, g, opts, batch_size=batch_size, device=device)
    seconds = time.perf_counter() - t0
    x = x.cpu()
    for bad in blocked_ids(tok.info()):
        if (x == bad).any():
            raise RuntimeError(f"run {run}: {(x == bad).sum().item()} tokens with id {bad} (mask/bos) in the samples")
    if x.shape != (n_samples, seq_len):
        raise RuntimeError(f"run {run}: samples have shape {tuple(x.shape)}, expected {(n_samples, seq_len)}")
    meta = {"run": run, "sampler": spec["sampler"], "steps": steps, "seconds": seconds, "models": spec.get("models", {}),
            "options": dataclasses.asdict(opts), "n_samples": n_samples, **stats}
    write_tokens(x, out_path, extra={"unie": json.dumps(meta)})
    log(json.dumps(meta))
    return meta


def read_sample_meta(path) -> dict:
    md = pq.read_schema(path).metadata or {}
    raw = md.get(b"unie")
    return json.loads(raw) if raw else {}


def load_hf_evaluator(path, eos_rule: str = "first", max_length: int = 1024, dtype: str = "float32",
                      device: str = "cpu", batch_size: int = 8):
    """An :class:`~unie.eval.genppl.HFEvaluator` from a local snapshot (the workflow never downloads it here)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not Path(path).exists():
        raise FileNotFoundError(f"evaluator {path} does not exist locally (the workflow never downloads it here)")
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=getattr(torch, dtype)).to(device)
    return EVALUATORS["hf"](model, tok, eos_rule=eos_rule, max_length=max_length, batch_size=batch_size)


def make_evaluator(ev: dict, path, tokenizer, eos_rule: str, domain: str, device: str):
    """Build the evaluator of config entry ``ev`` (``genppl.evaluators.<name>``) once."""
    kind = ev["kind"]
    if kind == "exact":
        return EVALUATORS["exact"](tokenizer, domain=domain, eos_rule=eos_rule)
    if kind == "model":
        model = load_wrapped(path, tokenizer, device)
        if not hasattr(model, "logp_next"):
            raise ValueError(f"evaluator {path}: trained as {model.method_name!r}, not an AR model")
        return EVALUATORS["model"](tokenizer, model, eos_rule=eos_rule)
    if kind == "hf":
        return load_hf_evaluator(path, eos_rule, ev.get("max_length", 1024), ev.get("dtype", "float32"), device,
                                 ev.get("batch_size", 8))
    raise KeyError(EVALUATORS.unknown_message(kind))


def evaluate_samples(samples_path, tokenizer_dir, evaluators: dict, eos_rule: str, evaluator_paths: dict, *,
                     domain: str, device: str = "cpu", log=print) -> dict:
    """Gen PPL of the samples under each evaluator (decode -> re-encode with the evaluator's tokenizer)."""
    tok = load_tokenizer(tokenizer_dir)
    x = load_tokens(samples_path).long()
    texts = [tok.decode(row) for row in x.tolist()]
    result = {"samples": str(samples_path), "n_samples": len(texts), "entropy_bits": mean_entropy_bits(x),
              "sampling": read_sample_meta(samples_path), "eos_rule": eos_rule, "genppl": {}}
    for name, ev in evaluators.items():
        t0 = time.perf_counter()
        evaluator = make_evaluator(ev, evaluator_paths.get(name), tok, eos_rule, domain, device)
        nll, ntok = evaluator.score(texts)
        del evaluator
        result["genppl"][name] = {**ppl_with_se(nll, ntok), "seconds": time.perf_counter() - t0}
        log(f"{name}: Gen PPL {result['genppl'][name]['ppl']:.3f}")
    log(f"entropy {result['entropy_bits']:.3f} bits")
    return result
