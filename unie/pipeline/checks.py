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

from ..core.config import ConfigError


FIXED_LENGTH_SAMPLERS = ("ar", "data")  # samplers whose step count is always L

# which trained methods each sampler accepts in each model role (checked at parse time)
ABSORBING = {"mdlm", "nce"}
SAMPLER_ROLES = {
    "data": {},
    "ar": {"ar": {"ar", "nce"}},
    "ancestral": {"dlm": ABSORBING},
    "energy": {"dlm": ABSORBING, "proxy": {"ar", "nce"}},
    "remdm": {"dlm": ABSORBING},
    "dcd": {"dlm": ABSORBING, "proxy": {"ar", "nce"}},
    "sedd": {"dlm": {"sedd"}},
    "duo": {"dlm": {"duo"}},
    "bd3lm": {"dlm": {"bd3lm"}},
}


def _err(key: str, msg: str):
    raise ConfigError(f"config key '{key}': {msg}")


def run_n_samples(config: dict, run: str) -> int:
    return config["sampling"]["runs"][run].get("n_samples", config["sampling"]["n_samples"])


def run_steps(config: dict, run: str) -> list[int]:
    spec = config["sampling"]["runs"][run]
    L = config["data"]["seq_len"]
    if spec["sampler"] in FIXED_LENGTH_SAMPLERS:
        return [L]
    return list(spec.get("steps", config["sampling"]["steps"]))


def figure_runs(config: dict) -> dict:
    """The sampling runs Figure 2 needs (``fig2_{energy}_{context}``), generated from its compact spec."""
    fig = config.get("figures", {}).get("fig2_ablation")
    if not fig:
        return {}
    runs = {}
    for context in fig["contexts"]:
        for energy in fig["energies"].values():
            models = {"dlm": fig["dlm"]} if context == "exact" else {"dlm": fig["dlm"], "proxy": fig["proxy"]}
            spec = {"sampler": "energy", "models": models,
                    "options": {"energy": energy, "K": fig["K"], "w": fig["w"], "ar_context": context}}
            if "n_samples" in fig:
                spec["n_samples"] = fig["n_samples"]
            runs[f"fig2_{energy}_{context}"] = spec
    return runs


def expand_config(config: dict) -> None:
    """Add generated sampling runs (Figure 2's) to ``config['sampling']['runs']`` in place."""
    for name, spec in figure_runs(config).items():
        if name in config["sampling"]["runs"] and config["sampling"]["runs"][name] != spec:
            _err(f"sampling.runs.{name}", "this name is reserved for a run generated from figures.fig2_ablation")
        config["sampling"]["runs"][name] = spec


def likelihood_sources(config: dict) -> dict[str, str]:
    """Every name a Table 1 row may use -> its kind: ``exact``, ``model`` or ``energy``."""
    from ..core.registry import METHODS

    out = {"exact": "exact"}
    for name, spec in config["models"].items():
        if getattr(METHODS[spec["method"]], "has_likelihood", False):
            out[name] = "model"
    for name in config.get("likelihood", {}):
        out[name] = "energy"
    return out


def check_config(config: dict) -> None:
    """Raise :class:`ConfigError` naming the key for any dangling reference or unknown name."""
    import unie  # noqa: F401  (fills the registries)
    from ..core.registry import METHODS, SAMPLERS

    data = config["data"]
    L = data["seq_len"]
    if data["train_domain"] not in data["domains"]:
        _err("data.train_domain", f"{data['train_domain']!r} is not in data.domains {data['domains']}")
    if data["source"] == "toy":
        from ..data.toy_world import DOMAINS

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

    from ..core.registry import ENERGIES

    def is_ar(m):
        method = models[m]["method"]
        if method == "nce":
            return models[m].get("options", {}).get("train", "dlm") == "ar"
        return getattr(METHODS[method], "causal", False) is True

    def is_dlm(m):  # an absorbing-state denoiser with SUBS (what energies, NCE and ReMDM/DCD use)
        return models[m]["method"] in ABSORBING and not is_ar(m)

    for name, spec in models.items():
        for role, check in (("proxy", is_ar), ("dlm", is_dlm)):
            partner = spec.get("options", {}).get(role)
            if partner is not None and (partner not in models or not check(partner)):
                _err(f"models.{name}.options.{role}", f"{partner!r} is not a defined {'AR' if role == 'proxy' else 'diffusion'} model")

    runs = config["sampling"]["runs"]
    for name, spec in runs.items():
        if spec["sampler"] not in SAMPLERS:
            _err(f"sampling.runs.{name}.sampler", SAMPLERS.unknown_message(spec["sampler"]))
        sampler = SAMPLERS[spec["sampler"]]
        accepted = set(inspect.signature(sampler).parameters) - {"models", "n", "L", "steps", "generator",
                                                                  "batch_size", "device", "_"}
        for opt, val in spec.get("options", {}).items():
            if opt not in accepted:
                _err(f"sampling.runs.{name}.options.{opt}", f"not an option of sampler {spec['sampler']!r}; "
                     f"known: {', '.join(sorted(accepted)) or 'none'}")
        opts = spec.get("options", {})
        if spec["sampler"] == "energy":
            if opts.get("energy", "uni") not in ENERGIES:
                _err(f"sampling.runs.{name}.options.energy", ENERGIES.unknown_message(opts["energy"]))
            ctx = opts.get("ar_context", "masked")
            if ctx not in ("teacher_forced", "masked", "exact"):
                _err(f"sampling.runs.{name}.options.ar_context", f"unknown ar_context {ctx!r}")
            if ctx == "exact" and data["source"] != "toy":
                _err(f"sampling.runs.{name}.options.ar_context", "'exact' needs the toy world")
            needed = ("dlm",) if ctx == "exact" else ("dlm", "proxy")
            for role in needed:
                if role not in spec.get("models", {}):
                    _err(f"sampling.runs.{name}.models", f"the energy sampler needs a {role!r} model")
        for role, model in spec.get("models", {}).items():
            if model not in models:
                _err(f"sampling.runs.{name}.models.{role}", f"unknown model {model!r}; defined: {', '.join(models)}")
        roles = SAMPLER_ROLES.get(spec["sampler"])
        for role, model in spec.get("models", {}).items():
            if roles is not None and role not in roles:
                _err(f"sampling.runs.{name}.models.{role}", f"sampler {spec['sampler']!r} takes the roles "
                     f"{', '.join(roles) or 'none'}")
            if role in ("proxy", "ar") and not is_ar(model):
                _err(f"sampling.runs.{name}.models.{role}", f"{model!r} is not an AR model")
            if role == "dlm" and (models[model]["method"] not in roles["dlm"] or is_ar(model)):
                _err(f"sampling.runs.{name}.models.dlm", f"{model!r} (method {models[model]['method']!r}) cannot "
                     f"be the {spec['sampler']} sampler's diffusion model; it takes {sorted(roles['dlm'])}")
        for role in (roles or {}):
            if role not in spec.get("models", {}) and not (spec["sampler"] == "energy" and role == "proxy"):
                _err(f"sampling.runs.{name}.models", f"the {spec['sampler']} sampler needs a {role!r} model")
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

    for name, spec in config.get("likelihood", {}).items():
        if name == "exact" or (name in models and getattr(METHODS[models[name]["method"]], "has_likelihood", False)):
            _err(f"likelihood.{name}", "this name is already a model with a likelihood (results/ppl/ would clash)")
        if spec["dlm"] not in models or not is_dlm(spec["dlm"]):
            _err(f"likelihood.{name}.dlm", f"{spec['dlm']!r} is not a defined diffusion model")
        if spec["ar_context"] == "exact":
            if data["source"] != "toy":
                _err(f"likelihood.{name}.ar_context", "'exact' needs the toy world")
        elif spec.get("proxy") not in models or not is_ar(spec["proxy"]):
            _err(f"likelihood.{name}.proxy", f"{spec.get('proxy')!r} is not a defined AR model")
    sources = likelihood_sources(config)
    for label, src in config["tables"]["table1_ppl"].items():
        if src is None:  # a method without a likelihood: "--"
            continue
        if src == "exact" and data["source"] != "toy":
            _err(f"tables.table1_ppl.{label}", "'exact' needs the toy world")
        if src not in sources:
            why = (f"method {models[src]['method']!r} has no likelihood; add a `likelihood:` entry for it"
                   if src in models else f"unknown source {src!r}")
            _err(f"tables.table1_ppl.{label}", f"{why}; usable: {', '.join(sources)}")
    for label, run in config["tables"]["table2_genppl"].items():
        if run not in runs:
            _err(f"tables.table2_genppl.{label}", f"unknown sampling run {run!r}; defined: {', '.join(runs)}")
    fig = config.get("figures", {}).get("fig2_ablation")
    if fig:
        if fig["evaluator"] not in config["genppl"]["evaluators"]:
            _err("figures.fig2_ablation.evaluator", f"unknown evaluator {fig['evaluator']!r}")
        if fig["baseline"] not in runs:
            _err("figures.fig2_ablation.baseline", f"unknown sampling run {fig['baseline']!r}")
        for label, e in fig["energies"].items():
            if e not in ENERGIES:
                _err(f"figures.fig2_ablation.energies.{label}", ENERGIES.unknown_message(e))


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
