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


def load_models(spec: dict, inputs: dict, tok, n_samples: int, *, domain: str, device: str = "cpu") -> dict:
    """The models of sampling run ``spec`` (role -> wrapped model), the toy world's exact proxy where the options
    ask for it, and for the data run its first ``n_samples`` held-out rows."""
    opts = SAMPLERS[spec["sampler"]].options(spec.get("options", {}), where="sampling run options")
    models = {}
    for role in spec.get("models", {}):
        path = inputs[role]
        path = path[0] if isinstance(path, (list, tuple)) else path
        models[role] = load_wrapped(str(Path(path).parent), tok, device)
    models.update(oracle_models(opts, tok, domain))
    if spec["sampler"] == "data":
        models["data"] = load_tokens(inputs["data"], n_samples).long()  # the first n rows
    return models


def run_sampler(run: str, spec: dict, steps: int, inputs: dict, out_path, n_samples: int, batch_size: int,
                seq_len: int, *, domain: str, seed: int = 0, device: str = "cpu", log=print,
                models: dict | None = None) -> dict:
    """Draw ``n_samples`` sequences for sampling run ``run`` at ``steps`` steps and write them to ``out_path``.

    ``inputs``: ``tokenizer`` dir, one checkpoint file per model role, ``data`` for the data run;
    ``domain``: the toy world's domain of the exact proxy (``ar_context: exact``): the training domain;
    ``models``: the run's models already loaded (:func:`load_models`), e.g. once for all its step counts."""
    entry = SAMPLERS[spec["sampler"]]
    opts = entry.options(spec.get("options", {}), where=f"sampling.runs.{run}.options")
    tok = load_tokenizer(inputs["tokenizer"])
    if models is None:
        models = load_models(spec, inputs, tok, n_samples, domain=domain, device=device)
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
        from ..core.config import from_dict
        from .settings import EvaluatorSettings

        s = from_dict(EvaluatorSettings, ev, f"evaluator {ev.get('label')!r}")
        return load_hf_evaluator(path, eos_rule, s.max_length, s.dtype, device, s.batch_size)
    raise KeyError(EVALUATORS.unknown_message(kind))


def evaluate_samples(samples_path, tokenizer_dir, evaluators: dict, eos_rule: str, evaluator_paths: dict, *,
                     domain: str, device: str = "cpu", log=print, cache: dict | None = None) -> dict:
    """Gen PPL of the samples under each evaluator (decode -> re-encode with the evaluator's tokenizer).

    ``cache``: a dict that keeps the evaluators built here (name -> evaluator) for the next call of the same
    job; without it each evaluator is built and freed.  ``seconds`` counts scoring only when it is reused."""
    tok = load_tokenizer(tokenizer_dir)
    x = load_tokens(samples_path).long()
    texts = [tok.decode(row) for row in x.tolist()]
    result = {"samples": str(samples_path), "n_samples": len(texts), "entropy_bits": mean_entropy_bits(x),
              "sampling": read_sample_meta(samples_path), "eos_rule": eos_rule, "genppl": {}}
    for name, ev in evaluators.items():
        t0 = time.perf_counter()
        if cache is not None and name in cache:
            evaluator = cache[name]
        else:
            evaluator = make_evaluator(ev, evaluator_paths.get(name), tok, eos_rule, domain, device)
        nll, ntok = evaluator.score(texts)
        if cache is not None:
            cache[name] = evaluator
        del evaluator
        result["genppl"][name] = {**ppl_with_se(nll, ntok), "seconds": time.perf_counter() - t0}
        log(f"{name}: Gen PPL {result['genppl'][name]['ppl']:.3f}")
    log(f"entropy {result['entropy_bits']:.3f} bits")
    return result


def sample_and_score(run: str, spec: dict, steps: list[int], inputs: dict, sample_paths: list, genppl_paths: list, *,
                     n_samples: int, batch_size: int, seq_len: int, evaluators: dict, eos_rule: str,
                     evaluator_paths: dict, domain: str, seed: int = 0, device: str = "cpu", log=print) -> list[dict]:
    """Rule ``sample``/``sample_run``: for each step count (in order) draw the samples (:func:`run_sampler`) and score
    them (:func:`evaluate_samples`), loading the run's models and the evaluators once for all step counts.  The
    samples of step count ``s`` depend only on ``(seed, run, s)`` (:func:`sampling_seed`), so one job per step count
    or one per run give the same files."""
    from .rule import write_json

    if not len(steps) == len(sample_paths) == len(genppl_paths):
        raise ValueError(f"run {run}: {len(steps)} step counts but {len(sample_paths)} sample and "
                         f"{len(genppl_paths)} Gen PPL paths")
    models = load_models(spec, inputs, load_tokenizer(inputs["tokenizer"]), n_samples, domain=domain, device=device)
    cache, results = {}, []
    for s, samples_path, genppl_path in zip(steps, sample_paths, genppl_paths):
        run_sampler(run, spec, int(s), inputs, samples_path, n_samples, batch_size, seq_len, domain=domain, seed=seed,
                    device=device, log=log, models=models)
        result = evaluate_samples(samples_path, inputs["tokenizer"], evaluators, eos_rule, evaluator_paths,
                                  domain=domain, device=device, log=log, cache=cache)
        write_json(result, genppl_path)
        results.append(result)
    return results
