"""Rule ``sample``: one sampling run at one step count -> Parquet samples, then their Gen PPL and entropy.

* :class:`SampleJob`: the job spec of one sampling run (run, sampler, models, options, input files, sizes, seed,
  domain, device), shared by the sampling and the timing rules.
* :func:`run_sampler`: draw the samples with the run's registered sampler (options checked strictly) and
  write them with their identity (run, steps, resolved options, timing) in the Parquet metadata.
* :func:`evaluate_samples`: Gen PPL under every evaluator (each loaded once) and entropy in bits; the
  result JSON carries the sampling identity, so tables read it from there, never from a path.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import zlib
from pathlib import Path

import pyarrow.parquet as pq
import torch

from ..config.sampling_jobs import MARKER
from ..core.precision import autocast, check_precision, precision_record
from ..core.registry import EVALUATORS, SAMPLERS
from ..data.tokenizer import blocked_ids, load_tokenizer
from ..data.tokens import load_expected_tokens, load_tokens, write_tokens
from ..eval.metrics import entropy_se_bits, mean_entropy_bits, ppl_with_se
from .model_files import load_wrapped

# the text of a released Duo's [PAD] in a decoded sample: upstream decodes samples with its tokenizer's
# batch_decode (special tokens kept), which writes the added token [PAD] as this string (duo main.py, trainer_base.py)
PAD_TEXT = "[PAD]"


def sampling_seed(seed: int, run: str, steps: int) -> int:
    return zlib.crc32(f"{seed}/{run}/{steps}".encode())


@dataclasses.dataclass(frozen=True)
class SampleJob:
    """One sampling run as a job: what draws the samples, from which files, how many, where.  The rules
    ``sample``/``sample_run`` (:func:`sample_and_score`) and ``timing`` (:func:`~unie.pipeline.timing_runs.time_run`)
    build one from the config (:meth:`from_spec`); every step count of the run shares it.

    Fields:
        run: the run's name, the key of ``sampling.runs``; with ``seed`` and a step count it seeds the samples
            (:func:`sampling_seed`).
        sampler: the registered sampler (``SAMPLERS``) of the run.
        models: model role -> model name (``sampling.runs.<run>.models``): the identity the results carry; the
            files are in ``inputs``.
        options: the sampler's options as configured; :meth:`sampler_options` checks and resolves them.
        inputs: ``tokenizer`` (a directory), one checkpoint file per model role, and ``data`` (the token file of
            the held-out rows) for the data run.
        seq_len: the length ``L`` of every sample.
        n_samples: sequences drawn per step count (the data run: its first ``n_samples`` held-out rows).
        batch_size: sequences per sampler call (timing: the one batch that is timed).
        domain: the toy world's training domain (the exact proxy of ``ar_context: exact``); no default, so that
            the proxy is never built for a silent one.
        seed: the workflow's seed.
        device: the torch device the models run on.
        precision: ``fp32`` | ``tf32`` | ``bf16`` (:mod:`unie.core.precision`): the sampler's and the model
            evaluators' network passes; recorded in the samples' metadata and the Gen PPL result unless ``fp32``.
    """

    run: str
    sampler: str
    models: dict
    options: dict
    inputs: dict
    seq_len: int
    n_samples: int
    batch_size: int
    domain: str
    seed: int = 0
    device: str = "cpu"
    precision: str = "fp32"

    def __post_init__(self):
        check_precision(self.precision)

    @classmethod
    def from_spec(cls, run: str, spec: dict, inputs: dict, **fields) -> "SampleJob":
        """The job of run ``run`` whose config entry is ``spec`` (``sampler``, optional ``models`` and
        ``options``); ``fields``: the other fields by name."""
        return cls(
            run=run,
            sampler=spec["sampler"],
            models=spec.get("models", {}),
            options=spec.get("options", {}),
            inputs=inputs,
            **fields,
        )

    @property
    def entry(self):
        """The run's registered sampler."""
        return SAMPLERS[self.sampler]

    def sampler_options(self, where: str | None = None):
        """The sampler's options dataclass (unknown or invalid options are an error naming ``where``)."""
        return self.entry.options(self.options, where=where or f"sampling.runs.{self.run}.options")

    def seed_at(self, steps: int) -> int:
        """The seed of the samples at ``steps`` steps (:func:`sampling_seed`)."""
        return sampling_seed(self.seed, self.run, steps)


def oracle_models(options, tokenizer, domain: str) -> dict:
    """Models the toy world supplies instead of a checkpoint: the exact AR for ``ar_context: exact``."""
    if getattr(options, "ar_context", None) != "exact":
        return {}
    from ..data.toy_world import HMM, OracleAR

    return {"proxy": OracleAR(HMM(domain), tokenizer)}


def load_models(job: SampleJob, tok) -> dict:
    """The models of ``job`` (role -> wrapped model), the toy world's exact proxy where the options ask for it,
    and for the data run its first ``job.n_samples`` held-out rows."""
    opts = job.sampler_options(where="sampling run options")
    models = {}
    for role in job.models:
        path = job.inputs[role]
        path = path[0] if isinstance(path, (list, tuple)) else path
        models[role] = load_wrapped(str(Path(path).parent), tok, job.device)
    models.update(oracle_models(opts, tok, job.domain))
    if job.sampler == "data":
        models["data"] = load_expected_tokens(
            job.inputs["data"], tok.info()["fingerprint"], limit=job.n_samples
        ).long()  # the first n rows
    return models


def run_sampler(job: SampleJob, steps: int, out_path, *, log=print, models: dict | None = None) -> dict:
    """Draw ``job.n_samples`` sequences of ``job``'s run at ``steps`` steps and write them to ``out_path``.

    ``models``: the run's models already loaded (:func:`load_models`), e.g. once for all its step counts."""
    entry, opts = job.entry, job.sampler_options()
    tok = load_tokenizer(job.inputs["tokenizer"])
    if models is None:
        models = load_models(job, tok)
    g = torch.Generator(device=job.device).manual_seed(job.seed_at(steps))
    t0 = time.perf_counter()
    with autocast(job.device, job.precision):
        x, stats = entry(
            models, job.n_samples, job.seq_len, steps, g, opts, batch_size=job.batch_size, device=job.device
        )
    seconds = time.perf_counter() - t0
    x = x.cpu()
    states = {i for m in models.values() for i in getattr(m, "extra_states", ())}  # a released Duo's [PAD]
    for bad in blocked_ids(tok.info()):
        if bad not in states and (x == bad).any():
            raise RuntimeError(
                f"run {job.run}: {(x == bad).sum().item()} tokens with id {bad} (mask/bos) in the samples"
            )
    if x.shape != (job.n_samples, job.seq_len):
        raise RuntimeError(
            f"run {job.run}: samples have shape {tuple(x.shape)}, expected {(job.n_samples, job.seq_len)}"
        )
    meta = {
        "run": job.run,
        "sampler": job.sampler,
        "steps": steps,
        "seconds": seconds,
        "models": job.models,
        "options": dataclasses.asdict(opts),
        "n_samples": job.n_samples,
        **precision_record(job.precision),
        **stats,
    }
    if states:  # ids that are states of the sampler's process, written as text the way upstream decodes them
        meta["text_states"] = {str(i): PAD_TEXT for i in sorted(states)}
    write_tokens(x, out_path, extra={"unie": json.dumps(meta)})
    log(json.dumps(meta))
    return meta


def read_sample_meta(path) -> dict:
    md = pq.read_schema(path).metadata or {}
    raw = md.get(b"unie")
    return json.loads(raw) if raw else {}


def load_hf_evaluator(
    path,
    eos_rule: str = "first",
    max_length: int = 1024,
    dtype: str = "float32",
    device: str = "cpu",
    batch_size: int = 8,
):
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
        from ..config.settings import EvaluatorSettings
        from ..core.options import from_dict

        s = from_dict(EvaluatorSettings, ev, f"evaluator {ev.get('label')!r}")
        return load_hf_evaluator(path, eos_rule, s.max_length, s.dtype, device, s.batch_size)
    raise KeyError(EVALUATORS.unknown_message(kind))


def evaluate_samples(
    samples_path,
    tokenizer_dir,
    evaluators: dict,
    eos_rule: str,
    evaluator_paths: dict,
    *,
    domain: str,
    device: str = "cpu",
    log=print,
    cache: dict | None = None,
    precision: str = "fp32",
) -> dict:
    """Gen PPL of the samples under each evaluator (decode -> re-encode with the evaluator's tokenizer).

    ``precision``: the evaluators' forward passes run under :func:`~unie.core.precision.autocast` (their weights
    keep the evaluator's ``dtype``; the log-probabilities are float32, the sums float64).

    ``cache``: a dict that keeps the evaluators built here (name -> evaluator) for the next call of the same
    job; without it each evaluator is built and freed.  ``seconds`` counts scoring only when it is reused."""
    tok = load_tokenizer(tokenizer_dir)
    x = load_tokens(samples_path).long()
    # a released Duo's [PAD] (a state at our mask id) is written "[PAD]", as upstream's batch_decode writes it
    as_text = {int(i): t for i, t in read_sample_meta(samples_path).get("text_states", {}).items()}
    texts = [tok.decode(row, as_text) for row in x.tolist()]
    result = {
        "samples": str(samples_path),
        "n_samples": len(texts),
        "entropy_bits": mean_entropy_bits(x),
        "entropy_se_bits": entropy_se_bits(x),
        "sampling": read_sample_meta(samples_path),
        "eos_rule": eos_rule,
        **precision_record(precision),
        "genppl": {},
    }
    for name, ev in evaluators.items():
        t0 = time.perf_counter()
        if cache is not None and name in cache:
            evaluator = cache[name]
        else:
            evaluator = make_evaluator(ev, evaluator_paths.get(name), tok, eos_rule, domain, device)
        with autocast(device, precision):
            nll, ntok = evaluator.score(texts)
        if cache is not None:
            cache[name] = evaluator
        del evaluator
        result["genppl"][name] = {**ppl_with_se(nll, ntok), "seconds": time.perf_counter() - t0}
        log(f"{name}: Gen PPL {result['genppl'][name]['ppl']:.3f}")
    log(f"entropy {result['entropy_bits']:.3f} bits")
    return result


def sample_and_score(
    job: SampleJob,
    steps: list[int],
    sample_paths: list,
    genppl_paths: list,
    *,
    evaluators: dict,
    eos_rule: str,
    evaluator_paths: dict,
    log=print,
) -> list[dict]:
    """Rule ``sample``/``sample_run``: for each step count (in order) draw the samples (:func:`run_sampler`) and score
    them (:func:`evaluate_samples`), loading the run's models and the evaluators once for all step counts.  The
    samples of step count ``s`` depend only on ``(seed, run, s)`` (:func:`sampling_seed`), so one job per step count
    or one per run give the same files."""
    from .rule import write_json

    if not len(steps) == len(sample_paths) == len(genppl_paths):
        raise ValueError(
            f"run {job.run}: {len(steps)} step counts but {len(sample_paths)} sample and "
            f"{len(genppl_paths)} Gen PPL paths"
        )
    models = load_models(job, load_tokenizer(job.inputs["tokenizer"]))
    cache, results = {}, []
    for s, samples_path, genppl_path in zip(steps, sample_paths, genppl_paths):
        run_sampler(job, int(s), samples_path, log=log, models=models)
        result = evaluate_samples(
            samples_path,
            job.inputs["tokenizer"],
            evaluators,
            eos_rule,
            evaluator_paths,
            domain=job.domain,
            device=job.device,
            log=log,
            cache=cache,
            precision=job.precision,
        )
        write_json(result, genppl_path, records=[samples_path])  # it vouches for the samples it scored
        results.append(result)
    return results


def mark_sampled(samples_path) -> None:
    """Record, beside a run's samples (``.../samples/{run}/steps{n}.parquet``), that the run was sampled here."""
    folder = os.path.dirname(str(samples_path))
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, MARKER)
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write("sampled in this run directory: a rerun of this run is its own job (unie.config.sampling_jobs)\n")
