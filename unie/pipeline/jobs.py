"""What the workflow's rules run, as plain functions of paths and specs (testable without Snakemake).

* :func:`train_from_spec`: build a model for a method, train it (resumable), save EMA weights.
* :func:`load_wrapped`: a saved checkpoint as the object samplers use (denoiser, AR proxy, ...).
* :func:`run_sampler`: one sampling run at one step count -> Parquet samples (+ timing metadata).
* :func:`evaluate_samples`: Gen PPL under every evaluator (each loaded once) and entropy in bits.
"""

from __future__ import annotations

import dataclasses
import json
import time
import zlib
from pathlib import Path

import pyarrow.parquet as pq
import torch

from ..core.config import ConfigError, from_dict, ModelConfig, TrainConfig
from ..core.registry import METHODS, SAMPLERS
from ..core.train import run_signature, train
from ..data.corpus import load_tokens, write_tokens
from ..data.tokenizer import blocked_ids, load_tokenizer
from ..eval.metrics import mean_entropy_bits, ppl_with_se
from ..models.checkpoint import CheckpointError, load_model, save_model
from ..models.transformer import Transformer


def build_method(method: str, tokenizer_info: dict, options: dict | None = None):
    cls = METHODS[method]
    try:
        return cls(tokenizer_info, **(options or {}))
    except TypeError as e:
        raise ConfigError(f"method {method!r}: bad options {options}: {e}") from None


def model_config(arch: dict, vocab_size: int, seq_len: int, method) -> ModelConfig:
    arch = dict(arch)
    if getattr(method, "time_conditioned", False):
        arch.setdefault("cond_dim", 64)
        if arch["cond_dim"] <= 0:
            raise ConfigError("a time-conditioned method needs arch.cond_dim > 0")
    return from_dict(ModelConfig, {**arch, "vocab_size": vocab_size, "max_len": seq_len,
                                   "causal": bool(method.causal)}, "arch")


def train_from_spec(name: str, spec: dict, train_path, tokenizer_dir, out_dir, ckpt_dir, seq_len: int,
                    device: str = "cpu", init_dir=None, log=print, stop_after: int | None = None,
                    partner_dirs: dict | None = None, dev_path=None, n_dev: int = 512):
    """Train model ``name`` of ``config['models']``; writes ``out_dir/{model.safetensors,config.json}``.

    ``partner_dirs`` (role -> checkpoint dir) are frozen models a method needs (NCE's proxy or DLM);
    ``dev_path`` is a held-out split for methods with ``dev_metrics`` (model selection on dev)."""
    tok = load_tokenizer(tokenizer_dir)
    options = spec.get("options", {})
    method = build_method(spec["method"], tok.info(), options)
    cfg = model_config(spec["arch"], tok.vocab_size, seq_len, method)
    tcfg = from_dict(TrainConfig, spec["train"], f"models.{name}.train")
    with torch.random.fork_rng(devices=[]):  # initial weights are a function of the config's seed
        torch.manual_seed(tcfg.seed)
        net = Transformer(cfg).to(device)
    if init_dir:
        init, meta = load_model(init_dir, device, tokenizer_info=tok.info())
        if meta["model"] != dataclasses.asdict(cfg):
            raise CheckpointError(f"init_from {init_dir}: architecture {meta['model']} differs from {dataclasses.asdict(cfg)}")
        net.load_state_dict(init.state_dict())
        log(f"initialised from {init_dir}")
    data = load_tokens(train_path)
    if data.shape[1] != seq_len:
        raise ConfigError(f"{train_path}: sequences have length {data.shape[1]}, config says seq_len={seq_len}")
    if data.max() >= tok.vocab_size:
        raise ConfigError(f"{train_path}: token ids exceed the tokenizer's vocabulary (tokenizer mismatch)")
    if hasattr(method, "prepare"):  # methods that need other models (e.g. NCE's frozen AR proxy)
        partners = {role: load_wrapped(d, tok, device) for role, d in (partner_dirs or {}).items()}
        method.prepare(net=net, models=partners, device=device, log=log)
    eval_fn = None
    if hasattr(method, "dev_metrics"):
        if dev_path is None:
            raise ConfigError(f"method {spec['method']!r} selects its checkpoint on a dev split: give dev_path")
        dev = load_tokens(dev_path, n_dev).to(device)
        eval_fn = lambda ema: method.dev_metrics(ema, dev, torch.Generator(device=device).manual_seed(tcfg.seed + 4242))
    sig = run_signature(tcfg, {"model": dataclasses.asdict(cfg), "method": spec["method"], "options": options,
                               "data": [str(train_path), list(data.shape)], "init": str(init_dir)})
    n_params = sum(p.numel() for p in net.parameters())
    log(f"training {name} ({spec['method']}): {n_params/1e6:.2f}M parameters, {len(data)} sequences of {seq_len}")
    params = method.parameters(net) if hasattr(method, "parameters") else None
    ema, history = train(net, method.loss, data, tcfg, ckpt_dir, sig, log=log, stop_after=stop_after, params=params,
                         eval_fn=eval_fn)
    if stop_after is not None and stop_after < tcfg.steps:
        return ema, history
    dev = [h for h in history if "dev" in h]
    extra = {"options": options, "train": spec["train"], "final": next((h for h in reversed(history) if "loss" in h), {})}
    if dev:
        best = min(dev, key=lambda h: h["dev"]["loss"])
        extra["dev"] = {"initial": dev[0], "selected": best, "dev_split": str(dev_path)}
        log(f"dev energy separation: initial {dev[0]['dev']['separation']:.3f} -> selected (step {best['step']}) "
            f"{best['dev']['separation']:.3f}; accuracy {dev[0]['dev']['accuracy']:.3f} -> {best['dev']['accuracy']:.3f}")
    save_model(ema, out_dir, spec["method"], tok.info(), extra=extra)
    Path(out_dir, "history.json").write_text(json.dumps(history, indent=1))
    return ema, history


def load_wrapped(model_dir, tokenizer, device: str = "cpu"):
    """A checkpoint as its method's sampler-facing object (``MDLMDenoiser``, ``ARModel``, ...)."""
    net, meta = load_model(model_dir, device=device, tokenizer_info=tokenizer.info())
    method = build_method(meta["method"], tokenizer.info(), meta.get("extra", {}).get("options", {}))
    wrapped = method.wrap(net)
    wrapped.method_name = meta["method"]
    return wrapped


def sampling_seed(seed: int, run: str, steps: int) -> int:
    return zlib.crc32(f"{seed}/{run}/{steps}".encode())


def run_sampler(run: str, spec: dict, steps: int, inputs: dict, out_path, n_samples: int, batch_size: int,
                seq_len: int, seed: int = 0, device: str = "cpu", log=print) -> dict:
    """Draw ``n_samples`` sequences for sampling run ``run`` at ``steps`` steps and write them to ``out_path``."""
    tok = load_tokenizer(inputs["tokenizer"])
    models = {}
    for role, files in spec.get("models", {}).items():
        path = inputs.get(role, files)
        path = path[0] if isinstance(path, (list, tuple)) else path
        models[role] = load_wrapped(str(Path(path).parent), tok, device)
    if spec["sampler"] == "data":
        models["data"] = load_tokens(inputs["data"])
    models["tokenizer"] = tok
    g = torch.Generator(device=device).manual_seed(sampling_seed(seed, run, steps))
    sampler = SAMPLERS[spec["sampler"]]
    t0 = time.perf_counter()
    x, stats = sampler(models, n_samples, seq_len, steps, g, batch_size=batch_size, device=device,
                       **spec.get("options", {}))
    seconds = time.perf_counter() - t0
    x = x.cpu()
    for bad in blocked_ids(tok.info()):
        if (x == bad).any():
            raise RuntimeError(f"run {run}: {(x == bad).sum().item()} tokens with id {bad} (mask/bos) in the samples")
    if x.shape != (n_samples, seq_len):
        raise RuntimeError(f"run {run}: samples have shape {tuple(x.shape)}, expected {(n_samples, seq_len)}")
    meta = {"run": run, "sampler": spec["sampler"], "steps": steps, "seconds": seconds, "models": spec.get("models", {}),
            "options": spec.get("options", {}), "n_samples": n_samples, **stats}
    write_tokens(x, out_path, extra={"unie": json.dumps(meta)})
    log(json.dumps(meta))
    return meta


def read_sample_meta(path) -> dict:
    md = pq.read_schema(path).metadata or {}
    raw = md.get(b"unie")
    return json.loads(raw) if raw else {}


def evaluate_samples(samples_path, tokenizer_dir, evaluators: dict, eos_rule: str, evaluator_paths: dict,
                     domain: str = "owt", device: str = "cpu", log=print) -> dict:
    """Gen PPL of the samples under each evaluator (decode -> re-encode with the evaluator's tokenizer)."""
    from ..eval.genppl import make_evaluator

    tok = load_tokenizer(tokenizer_dir)
    x = load_tokens(samples_path)
    texts = [tok.decode(row) for row in x.tolist()]
    result = {"samples": str(samples_path), "n_samples": len(texts), "entropy_bits": mean_entropy_bits(x),
              "sampling": read_sample_meta(samples_path), "eos_rule": eos_rule, "genppl": {}}
    for name, ev in evaluators.items():
        spec = {"kind": ev["kind"], "eos_rule": eos_rule}
        if ev["kind"] == "exact":
            spec["domain"] = domain
        elif ev["kind"] == "model":
            spec.update(path=evaluator_paths[name], tokenizer_dir=str(tokenizer_dir))
        elif ev["kind"] == "hf":
            spec.update(path=evaluator_paths[name], max_length=ev.get("max_length", 1024),
                        dtype=ev.get("dtype", "float32"))
        t0 = time.perf_counter()
        evaluator = make_evaluator(spec, tok, device=device)  # loaded once for all samples
        nll, ntok = evaluator.score(texts)
        del evaluator
        result["genppl"][name] = {**ppl_with_se(nll, ntok), "seconds": time.perf_counter() - t0}
        log(f"{name}: Gen PPL {result['genppl'][name]['ppl']:.3f}")
    log(f"entropy {result['entropy_bits']:.3f} bits")
    return result
