"""Glue between the Snakemake workflow and the package.

* :func:`check_config` cross-checks what a JSON schema cannot (model names, registered methods and
  samplers, evaluator references, table rows) at parse time, naming the offending key.
* :func:`run_steps` and friends compute the deterministic target paths.
* :func:`job` sets up a rule's script: log file, torch threads, device.
"""

from __future__ import annotations

import inspect
import logging
import sys
from contextlib import contextmanager

from .config import ConfigError

FIXED_LENGTH_SAMPLERS = ("ar", "data")  # samplers whose step count is always L


def _err(key: str, msg: str):
    raise ConfigError(f"config key '{key}': {msg}")


def run_steps(config: dict, run: str) -> list[int]:
    spec = config["sampling"]["runs"][run]
    L = config["data"]["seq_len"]
    if spec["sampler"] in FIXED_LENGTH_SAMPLERS:
        return [L]
    return list(spec.get("steps", config["sampling"]["steps"]))


def check_config(config: dict) -> None:
    """Raise :class:`ConfigError` naming the key for any dangling reference or unknown name."""
    import unie  # noqa: F401  (fills the registries)
    from .registry import METHODS, SAMPLERS

    data = config["data"]
    L = data["seq_len"]
    if data["train_domain"] not in data["domains"]:
        _err("data.train_domain", f"{data['train_domain']!r} is not in data.domains {data['domains']}")
    if data["source"] == "toy":
        from .toy_world import DOMAINS

        for i, d in enumerate(data["domains"]):
            if d not in DOMAINS:
                _err(f"data.domains[{i}]", f"unknown toy-world domain {d!r}; known: {', '.join(DOMAINS)}")
        if config["tokenizer"]["kind"] != "word":
            _err("tokenizer.kind", "the toy world needs the word-level tokenizer ('word')")
    else:
        hf = data.get("hf", {})
        for d in data["domains"]:
            needed = {config["ppl"]["split"]} | ({"train", "valid"} if d == data["train_domain"] else set())
            for split in sorted(needed):
                if split not in hf.get(d, {}):
                    _err(f"data.hf.{d}.{split}", "missing dataset spec for this domain and split")
        if config["tokenizer"]["kind"] != "hf" or "path" not in config["tokenizer"]:
            _err("tokenizer", "the hf data source needs tokenizer.kind 'hf' and tokenizer.path")

    models = config["models"]
    for name, spec in models.items():
        if spec["method"] not in METHODS:
            _err(f"models.{name}.method", METHODS.unknown_message(spec["method"]))
        cls = METHODS[spec["method"]]
        accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "tokenizer_info"}
        for opt in spec.get("options", {}):
            if opt not in accepted:
                _err(f"models.{name}.options.{opt}", f"not an option of method {spec['method']!r}; "
                     f"known: {', '.join(sorted(accepted)) or 'none'}")
        if spec.get("init_from") is not None and spec["init_from"] not in models:
            _err(f"models.{name}.init_from", f"unknown model {spec['init_from']!r}")
        d, h = spec["arch"]["d_model"], spec["arch"]["n_heads"]
        if d % h or (d // h) % 2:
            _err(f"models.{name}.arch", f"d_model={d} must be divisible by n_heads={h} into an even head size")

    runs = config["sampling"]["runs"]
    for name, spec in runs.items():
        if spec["sampler"] not in SAMPLERS:
            _err(f"sampling.runs.{name}.sampler", SAMPLERS.unknown_message(spec["sampler"]))
        for role, model in spec.get("models", {}).items():
            if model not in models:
                _err(f"sampling.runs.{name}.models.{role}", f"unknown model {model!r}; defined: {', '.join(models)}")
        if spec["sampler"] in FIXED_LENGTH_SAMPLERS and spec.get("steps") not in (None, [L]):
            _err(f"sampling.runs.{name}.steps", f"the {spec['sampler']} sampler always takes L={L} steps")
    if config["sampling"]["n_samples"] > data["splits"][config["ppl"]["split"]] and any(
            r["sampler"] == "data" for r in runs.values()) and data["source"] == "toy":
        _err("sampling.n_samples", "the data run needs at least n_samples sequences in the test split")

    for name, ev in config["genppl"]["evaluators"].items():
        if ev["kind"] == "exact" and data["source"] != "toy":
            _err(f"genppl.evaluators.{name}.kind", "'exact' needs the toy world (data.source: toy)")
        if ev["kind"] == "model":
            m = ev.get("model")
            if m not in models:
                _err(f"genppl.evaluators.{name}.model", f"unknown model {m!r}; defined: {', '.join(models)}")
            if models[m]["method"] != "ar":
                _err(f"genppl.evaluators.{name}.model", f"{m!r} is not an AR model")
        if ev["kind"] == "hf" and ev.get("model") not in config.get("hf_models", {}):
            _err(f"genppl.evaluators.{name}.model", f"{ev.get('model')!r} is not a key of hf_models")

    for label, src in config["tables"]["table1_ppl"].items():
        if src == "exact":
            if data["source"] != "toy":
                _err(f"tables.table1_ppl.{label}", "'exact' needs the toy world")
            continue
        if src not in models:
            _err(f"tables.table1_ppl.{label}", f"unknown model {src!r}; defined: {', '.join(models)}")
        if not getattr(METHODS[models[src]["method"]], "has_likelihood", False):
            _err(f"tables.table1_ppl.{label}", f"method {models[src]['method']!r} has no likelihood")
    for label, run in config["tables"]["table2_genppl"].items():
        if run not in runs:
            _err(f"tables.table2_genppl.{label}", f"unknown sampling run {run!r}; defined: {', '.join(runs)}")


@contextmanager
def job(snakemake, name: str | None = None):
    """Context for a rule's script: logs (stdout, stderr, logging) go to ``snakemake.log[0]``;
    torch uses the rule's threads.  Yields a ``log(str)`` function."""
    import torch

    torch.set_num_threads(max(1, int(snakemake.threads)))
    logpath = snakemake.log[0] if len(snakemake.log) else None
    stream = open(logpath, "w", buffering=1) if logpath else sys.stderr
    old_out, old_err = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = stream
    logging.basicConfig(stream=stream, level=logging.INFO, format="%(asctime)s %(message)s", force=True)
    log = logging.getLogger(name or "unie").info
    try:
        yield log
    except BaseException:
        import traceback

        traceback.print_exc(file=stream)
        raise
    finally:
        sys.stdout, sys.stderr = old_out, old_err
        if logpath:
            stream.close()
