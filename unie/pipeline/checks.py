"""Config cross-checks the JSON schema cannot do, and the deterministic lists of targets.

:func:`check_config` runs at parse time (``workflow/rules/common.smk``), before any job, and names the
offending key.  Every check comes from what the registries record: a method's ``Options`` dataclass and
``kind``, a sampler's options dataclass and model roles (:class:`unie.core.registry.SamplerEntry`), the
energies and evaluators registered.  Nothing here is a hand-kept table of names.
"""

from __future__ import annotations

from ..core.config import ConfigError, from_dict


def _err(key: str, msg: str):
    raise ConfigError(f"config key '{key}': {msg}")


def _options(cls, d: dict | None, key: str):
    """``from_dict(cls, d, key)``; a value the class itself refuses (its ``__post_init__``'s ``ValueError``)
    becomes a :class:`ConfigError` naming ``key``."""
    try:
        return from_dict(cls, d, key)
    except ConfigError:
        raise
    except ValueError as e:
        _err(key, str(e))


def run_n_samples(config: dict, run: str) -> int:
    return config["sampling"]["runs"][run].get("n_samples", config["sampling"]["n_samples"])


def run_steps(config: dict, run: str) -> list[int]:
    """The step counts of a sampling run: ``[L]`` for samplers that always take ``L`` steps (AR, data)."""
    from ..core.registry import SAMPLERS

    spec = config["sampling"]["runs"][run]
    if SAMPLERS[spec["sampler"]].fixed_steps:
        return [config["data"]["seq_len"]]
    return list(spec.get("steps", config["sampling"]["steps"]))


DEFAULT_SELECTION = "argmin"  # Algorithm 2 as the paper writes it (EnergyOptions.selection's default)


def fig2_curves(fig: dict) -> dict:
    """Figure 2's energy curves: label -> ``{energy, selection}``.  ``figures.fig2_ablation.energies`` maps a
    label to an energy name (selection ``argmin``, the paper's rule) or to ``{energy, selection}`` (e.g. Uni-E
    with ``resample``, EDLM's own rule, beside it)."""
    out = {}
    for label, e in fig["energies"].items():
        e = {"energy": e} if isinstance(e, str) else dict(e)
        out[label] = {"energy": e.get("energy"), "selection": e.get("selection", DEFAULT_SELECTION)}
    return out


def _run_suffix(selection: str) -> str:
    """A generated run's name suffix for its selection rule: none for ``argmin`` (the names runs always had)."""
    return "" if selection == DEFAULT_SELECTION else f"_{selection}"


def _selection_option(selection: str) -> dict:
    """A generated run's ``selection`` option: written only when it is not the default ``argmin``, so that the
    generated argmin runs keep the exact spec (the rules' params) they always had and an existing result tree is
    not resampled for nothing; the samples' metadata records the resolved rule either way."""
    return {} if selection == DEFAULT_SELECTION else {"selection": selection}


def _fig2_spec(fig: dict, curve: dict, context: str) -> dict:
    models = {"dlm": fig["dlm"]} if context == "exact" else {"dlm": fig["dlm"], "proxy": fig["proxy"]}
    return {"sampler": "energy", "models": models,
            "options": {"energy": curve["energy"], "K": fig["K"], "w": fig["w"], "ar_context": context,
                        **_selection_option(curve["selection"])}}


def _resolved(spec: dict):
    """A run's identity for reuse: its sampler, models and its options resolved by the sampler's options class
    (defaults filled in, so ``selection: argmin`` written out or left to its default is the same run)."""
    import dataclasses

    from ..core.registry import SAMPLERS

    entry = SAMPLERS.get(spec.get("sampler"))
    options = spec.get("options", {}) or {}
    if entry is not None:
        try:
            options = dataclasses.asdict(entry.options(options))
        except (ValueError, TypeError):  # an invalid run is reported by check_config, by its key
            pass
    return spec.get("sampler"), spec.get("models", {}) or {}, options


def _same_run(own: dict, spec: dict) -> str | None:
    """The first configured run whose sampler, models and resolved options are ``spec``'s."""
    want = _resolved(spec)
    same = [n for n, r in own.items() if _resolved(r) == want]
    return same[0] if same else None


def fig2_runs(config: dict) -> dict:
    """Figure 2's sampling run per curve: context -> curve label -> run name.  A curve whose sampler, models and
    resolved options are those of a configured run (e.g. Uni-E with the mask-aware proxy and ``argmin`` = Table 2's
    Uni-EDLM-AR) reuses that run's samples; the others get a generated run ``fig2_{energy}_{context}``, with
    ``_{selection}`` appended for a rule other than ``argmin`` (``fig2_uni_masked_resample``)."""
    fig = config.get("figures", {}).get("fig2_ablation")
    if not fig:
        return {}
    own = {name: spec for name, spec in config["sampling"]["runs"].items() if not name.startswith(("fig2_", "fig3_"))}
    out = {}
    for context in fig["contexts"]:
        for label, curve in fig2_curves(fig).items():
            spec = _fig2_spec(fig, curve, context)
            out.setdefault(context, {})[label] = _same_run(own, spec) or \
                f"fig2_{curve['energy']}_{context}{_run_suffix(curve['selection'])}"
    return out


def _fig3_spec(fig: dict, K: int, w: float, energy: dict | None = None) -> dict:
    e = energy or {"energy": fig["energy"], "ar_context": fig["ar_context"], "proxy": fig["proxy"],
                   "selection": fig.get("selection", DEFAULT_SELECTION)}
    return {"sampler": "energy", "models": {"dlm": fig["dlm"], "proxy": e["proxy"]},
            "options": {"energy": e["energy"], "K": K, "w": w, "ar_context": e["ar_context"],
                        **_selection_option(e.get("selection", DEFAULT_SELECTION))}}


def fig3_runs(config: dict) -> dict:
    """Figure 3's sampling run per point: ``{"k": {K: run}, "w": {w: run}, "tradeoff": {label: run}}``.

    Panels 1-2 vary K (at the default w) and w (at the default K) of Uni-EDLM-AR; panels 3-4 put the AR and MDLM
    runs (``baselines``) beside EDLM-AR (``edlm``: Ind-E with its proxy, context and selection rule, at the same K
    and w) and Uni-EDLM-AR at the default K and w.  A point whose spec equals a configured run's reuses it (w = 1,
    K = 2 is Table 2's Uni-EDLM-AR); the others get ``fig3_{energy}_k{K}_w{100 w}``, with ``_{selection}``
    appended for a rule other than ``argmin`` (``fig3_ind_k2_w20_resample``)."""
    fig = config.get("figures", {}).get("fig3_tradeoff")
    if not fig:
        return {}
    own = {name: spec for name, spec in config["sampling"]["runs"].items() if not name.startswith(("fig2_", "fig3_"))}

    def name(K, w, energy=None):
        spec = _fig3_spec(fig, K, w, energy)
        o = spec["options"]
        return _same_run(own, spec) or \
            f"fig3_{o['energy']}_k{K}_w{round(100 * w)}{_run_suffix(o.get('selection', DEFAULT_SELECTION))}"

    K, w = fig["K"], fig["w"]
    return {"k": {k: name(k, w) for k in fig["Ks"]}, "w": {v: name(K, v) for v in fig["ws"]},
            "tradeoff": {**fig["baselines"], fig["edlm"]["label"]: name(K, w, fig["edlm"]),
                         fig["label"]: name(K, w)}}


def figure_runs(config: dict) -> dict:
    """The sampling runs Figures 2 and 3 add (``fig2_{energy}_{context}``, ``fig3_{energy}_k{K}_w{100 w}``),
    generated from their compact specs."""
    fig = config.get("figures", {}).get("fig2_ablation")
    fig3 = config.get("figures", {}).get("fig3_tradeoff")
    runs = {}
    if fig3:
        panels = fig3_runs(config)
        points = [(k, fig3["w"], None) for k in fig3["Ks"]] + [(fig3["K"], v, None) for v in fig3["ws"]]
        points.append((fig3["K"], fig3["w"], fig3["edlm"]))
        names = [*panels["k"].values(), *panels["w"].values(), panels["tradeoff"][fig3["edlm"]["label"]]]
        for (K, w, energy), name in zip(points, names):
            if name.startswith("fig3_"):
                spec = _fig3_spec(fig3, K, w, energy)
                if "n_samples" in fig3:
                    spec["n_samples"] = fig3["n_samples"]
                runs[name] = spec
    if not fig:
        return runs
    curves = fig2_curves(fig)
    for context, by_label in fig2_runs(config).items():
        for label, name in by_label.items():
            if name.startswith("fig2_"):
                spec = _fig2_spec(fig, curves[label], context)
                if "n_samples" in fig:
                    spec["n_samples"] = fig["n_samples"]
                runs[name] = spec
    return runs


def check_fig3(config: dict) -> None:
    """Figure 3's cross-checks, before its runs are generated (so the error names its key)."""
    from ..core.registry import ENERGIES
    from ..energy.energies import SELECTIONS

    fig3 = config.get("figures", {}).get("fig3_tradeoff")
    if fig3:
        if fig3["evaluator"] not in config["genppl"]["evaluators"]:
            _err("figures.fig3_tradeoff.evaluator", f"unknown evaluator {fig3['evaluator']!r}")
        if fig3["K"] not in fig3["Ks"] or fig3["w"] not in fig3["ws"]:
            _err("figures.fig3_tradeoff", f"the default K={fig3['K']} and w={fig3['w']} must be among Ks and ws")
        for label, run in fig3["baselines"].items():
            if run not in config["sampling"]["runs"]:
                _err(f"figures.fig3_tradeoff.baselines.{label}", f"unknown sampling run {run!r}")
        for key, e in (("energy", fig3["energy"]), ("edlm.energy", fig3["edlm"]["energy"])):
            if e not in ENERGIES:
                _err(f"figures.fig3_tradeoff.{key}", ENERGIES.unknown_message(e))
        for key, sel in (("selection", fig3.get("selection")), ("edlm.selection", fig3["edlm"].get("selection"))):
            if sel is not None and sel not in SELECTIONS:
                _err(f"figures.fig3_tradeoff.{key}", f"unknown selection {sel!r}; known: {', '.join(SELECTIONS)}")


def check_fig2(config: dict) -> None:
    """Figure 2's curves, before its runs are generated (so the error names its key): each
    ``figures.fig2_ablation.energies.<label>`` is a registered energy, or ``{energy, selection}`` with a known
    selection rule (:data:`unie.energy.energies.SELECTIONS`)."""
    from ..core.registry import ENERGIES
    from ..energy.energies import SELECTIONS

    fig = config.get("figures", {}).get("fig2_ablation")
    if not fig:
        return
    for label, e in fig["energies"].items():
        key = f"figures.fig2_ablation.energies.{label}"
        if not isinstance(e, (str, dict)):
            _err(key, f"an energy name or {{energy, selection}}, got {e!r}")
        if isinstance(e, dict):
            extra = sorted(set(e) - {"energy", "selection"})
            if extra:
                _err(f"{key}.{extra[0]}", "unknown key; allowed: energy, selection")
            if e.get("selection", DEFAULT_SELECTION) not in SELECTIONS:
                _err(f"{key}.selection", f"unknown selection {e['selection']!r}; known: {', '.join(SELECTIONS)}")
            e = e.get("energy")
        if e not in ENERGIES:
            _err(f"{key}{'' if isinstance(fig['energies'][label], str) else '.energy'}", ENERGIES.unknown_message(e))


def expand_config(config: dict) -> None:
    """Add generated sampling runs (Figures 2 and 3) to ``config['sampling']['runs']`` in place."""
    import unie  # noqa: F401  (fills the registries)

    check_fig2(config)
    check_fig3(config)
    for name, spec in figure_runs(config).items():
        if name in config["sampling"]["runs"] and config["sampling"]["runs"][name] != spec:
            _err(f"sampling.runs.{name}", "this name is reserved for a run generated from figures.fig2_ablation "
                 "or figures.fig3_tradeoff")
        config["sampling"]["runs"][name] = spec


def check_arch_train(spec: dict, where: str) -> None:
    """A model's ``arch`` and ``train`` blocks against :class:`~unie.core.config.ModelConfig` and
    :class:`~unie.core.config.TrainConfig` (the single home of their keys, types and defaults): an unknown key, a
    wrong type or a value the dataclass refuses names its config key, before any job starts."""
    from ..core.config import ModelConfig, TrainConfig

    _options(TrainConfig, spec["train"], f"{where}.train")
    arch = dict(spec["arch"])
    for key in ("d_model", "n_layers", "n_heads"):
        if key not in arch:
            _err(f"{where}.arch", f"missing {key!r} (a model trained from scratch states its size)")
    for fixed in ("vocab_size", "max_len", "causal"):  # set by the workflow from the tokenizer, data and method
        if fixed in arch:
            _err(f"{where}.arch.{fixed}", "is set by the workflow (tokenizer, data.seq_len, method), not the config")
    d, h = arch.get("d_model", 0), arch.get("n_heads", 1)
    if isinstance(d, int) and isinstance(h, int) and h > 0 and (d % h or (d // h) % 2):
        _err(f"{where}.arch", f"d_model={d} must be divisible by n_heads={h} into an even head size")
    _options(ModelConfig, {**arch, "vocab_size": 2}, f"{where}.arch")


# -- released checkpoints as models (`source:`), docs/released-checkpoints.md
SOURCE_KEYS = ("kind", "path", "hf_id", "standin", "trust_remote_code", "use_ema", "n_heads", "block_size",
               "tokenizer_info")
CUSTOM_CODE_KINDS = ("mdlm", "bd3lm", "duo")  # their HF folders name custom code (auto_map)


def released_models(config: dict) -> dict[str, dict]:
    """Model name -> its ``source`` (a released checkpoint imported by rule ``import_released``, not trained)."""
    return {name: spec["source"] for name, spec in config["models"].items() if spec.get("source")}


def trained_models(config: dict) -> list[str]:
    return [name for name, spec in config["models"].items() if not spec.get("source")]


def source_format(source: dict) -> str:
    """``hf`` (an HF folder) or ``ckpt`` (a Lightning checkpoint file)."""
    if source.get("hf_id"):
        return "hf"
    if source.get("standin"):
        return "ckpt" if source["standin"] == "ckpt" else "hf"
    return "ckpt" if str(source.get("path", "")).endswith(".ckpt") else "hf"


def source_path(name: str, source: dict, run_dir: str = ".") -> str:
    """Where the import reads model ``name``'s released checkpoint: the download folder of ``hf_id``
    (``resources/released/NAME``, shared by every run), the stand-in the workflow writes in the run's directory
    ``run_dir`` (``RUN_DIR/resources/standins/NAME[/KIND.ckpt]``), or ``path`` as given."""
    import os

    if source.get("hf_id"):
        return f"resources/released/{name}"
    if source.get("standin"):
        folder = os.path.normpath(os.path.join(run_dir, "resources", "standins", name))
        return f"{folder}/{source['kind']}.ckpt" if source["standin"] == "ckpt" else folder
    return str(source["path"])


def dit_root(config: dict, name: str) -> str | None:
    """The released model at the root of model ``name``'s ``init_from`` chain, if any (the model is then a DiT)."""
    seen = set()
    while name is not None and name not in seen:
        seen.add(name)
        spec = config["models"].get(name, {})
        if spec.get("source"):
            return name
        name = spec.get("init_from")
    return None


def is_dit_model(config: dict, name: str) -> bool:
    return dit_root(config, name) is not None


def check_sources(config: dict) -> None:
    """Each ``models.NAME.source``: a known kind of the model's method, exactly one of ``path``, ``hf_id`` or
    ``standin`` in a format the authors publish, the custom-code grant where the HF folder needs it, no ``train``,
    ``arch`` or ``init_from`` (the weights are the release's), a tokenizer of the release's layout."""
    from ..methods.released import GPT2_MASKED
    from ..models.released import SOURCES
    from ..models.standins import FORMATS

    for name, source in released_models(config).items():
        where = f"models.{name}.source"
        spec = config["models"][name]
        if not isinstance(source, dict):
            _err(where, "a mapping {kind, path | hf_id | standin, trust_remote_code, ...}")
        unknown = sorted(set(source) - set(SOURCE_KEYS))
        if unknown:
            _err(f"{where}.{unknown[0]}", f"unknown key; allowed: {', '.join(SOURCE_KEYS)}")
        kind = source.get("kind")
        if kind not in SOURCES:
            _err(f"{where}.kind", f"{kind!r} is not a released checkpoint kind ({', '.join(SOURCES)})")
        if SOURCES[kind].method != spec["method"]:
            _err(f"models.{name}.method", f"a released {kind} checkpoint is a {SOURCES[kind].method!r} model")
        given = [k for k in ("path", "hf_id", "standin") if source.get(k)]
        if len(given) != 1:
            _err(where, f"give exactly one of path (a local HF folder or .ckpt), hf_id (downloaded) or standin "
                        f"(a tiny stand-in the workflow writes), got {given or 'none'}")
        fmt = source_format(source)
        if source.get("standin"):
            std = FORMATS[kind]
            if source["standin"] not in std:
                _err(f"{where}.standin", f"a {kind} stand-in is written as {' or '.join(std)}, not {source['standin']!r}")
        elif fmt not in SOURCES[kind].formats:
            _err(where, f"{kind} is published as {' or '.join(SOURCES[kind].formats)} only "
                        f"({SOURCES[kind].identifier}), not as {'an HF folder' if fmt == 'hf' else 'a .ckpt'}")
        if kind in CUSTOM_CODE_KINDS and fmt == "hf" and source.get("trust_remote_code") is not True:
            _err(f"{where}.trust_remote_code", f"the released {kind} HF folder names custom code (auto_map); set "
                 "trust_remote_code: true to load it (our own DiT reads its weights, its code is never run)")
        for key in ("train", "arch", "init_from"):
            if spec.get(key) is not None:
                _err(f"models.{name}.{key}", "a model with a `source` is the released checkpoint: it is imported, "
                                             "not trained (drop the key, or drop `source` to train it)")
        info = source.get("tokenizer_info")
        if info is not None:
            bad = sorted(set(info) - {"vocab_size", "mask_id", "bos_id", "eos_id"})
            if bad:
                _err(f"{where}.tokenizer_info.{bad[0]}", "unknown key; allowed: vocab_size, mask_id, bos_id, eos_id")
        elif not source.get("standin") and (config["tokenizer"].get("kind") != "hf"
                                            or config["tokenizer"].get("path") not in ("gpt2", "openai-community/gpt2")):
            _err(where, f"a released {kind} checkpoint reads GPT-2 + the appended mask ({GPT2_MASKED}): set "
                        "tokenizer: {kind: hf, path: gpt2}, or state the checkpoint's layout in source.tokenizer_info")


def method_options(config: dict, name: str):
    """The checked options object of model ``name`` (its method's ``Options`` dataclass)."""
    from ..core.registry import METHODS

    spec = config["models"][name]
    return from_dict(METHODS[spec["method"]].Options, spec.get("options", {}), f"config key 'models.{name}.options'")


def model_kind(config: dict, name: str) -> str:
    """What model ``name`` is to a sampler role: ``absorbing``, ``ar``, ``sedd``, ``duo``, ``bd3lm``, ``ebm``."""
    from ..core.registry import METHODS

    return METHODS[config["models"][name]["method"]].kind(method_options(config, name))


def partner_models(config: dict, name: str) -> dict[str, str]:
    """The frozen models model ``name`` trains against (NCE's proxy or DLM): role -> model name."""
    from ..core.registry import METHODS

    cls = METHODS[config["models"][name]["method"]]
    return {role: partner for role, (partner, _) in getattr(cls, "partners", lambda o: {})(method_options(config, name)).items()}


def selects_on_dev(config: dict, name: str) -> bool:
    """Whether model ``name``'s method selects its checkpoint on the dev split (``dev_metrics``)."""
    from ..core.registry import METHODS

    return hasattr(METHODS[config["models"][name]["method"]], "dev_metrics")


def has_likelihood(config: dict, name: str) -> bool:
    from ..core.registry import METHODS

    return bool(getattr(METHODS[config["models"][name]["method"]], "has_likelihood", False))


def likelihood_sources(config: dict) -> dict[str, str]:
    """Every name a Table 1 row may use -> its kind: ``exact``, ``model`` or ``energy``."""
    out = {"exact": "exact"}
    for name in config["models"]:
        if has_likelihood(config, name):
            out[name] = "model"
    for name in config.get("likelihood", {}):
        out[name] = "energy"
    return out


def check_config(config: dict) -> None:
    """Raise :class:`ConfigError` naming the key for any dangling reference, unknown name or bad option."""
    import unie  # noqa: F401  (fills the registries)
    import unie.eval.genppl  # noqa: F401  (the evaluators)

    from ..core.registry import ENERGIES, EVALUATORS, METHODS, SAMPLERS
    from ..energy.energies import AR_CONTEXTS

    data = config["data"]
    toy = data["source"] == "toy"
    L = data["seq_len"]
    if data["train_domain"] not in data["domains"]:
        _err("data.train_domain", f"{data['train_domain']!r} is not in data.domains {data['domains']}")
    if toy:
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

    # -- models: registered method, options of its Options dataclass, partners of the right kind
    models = config["models"]
    for name, spec in models.items():
        if spec["method"] not in METHODS:
            _err(f"models.{name}.method", METHODS.unknown_message(spec["method"]))
        method_options(config, name)
        if (spec.get("options") or {}).get("chunk_bos") and not data.get("chunk_specials", True):
            _err(f"models.{name}.options.chunk_bos", "reads chunks that begin with their own BOS: it needs "
                                                     "data.chunk_specials: true")
        if spec.get("init_from") is not None and spec["init_from"] not in models:
            _err(f"models.{name}.init_from", f"unknown model {spec['init_from']!r}")
    check_sources(config)
    for name, spec in models.items():
        if spec.get("source"):
            continue
        if "train" not in spec:
            _err(f"models.{name}", "a trained model needs `train` (or a `source`: a released checkpoint)")
        if is_dit_model(config, name):  # fine-tuned from a released checkpoint: its architecture
            from .models import DIT_ARCH_KEYS

            extra = sorted(set(spec.get("arch") or {}) - set(DIT_ARCH_KEYS))
            if extra:
                _err(f"models.{name}.arch", f"{extra} cannot be set: the model is fine-tuned from the released "
                     f"checkpoint of {dit_root(config, name)!r}, whose architecture it keeps (only {list(DIT_ARCH_KEYS)})")
            from ..core.config import TrainConfig

            _options(TrainConfig, spec["train"], f"models.{name}.train")
            continue
        if "arch" not in spec:
            _err(f"models.{name}", "a model trained from scratch needs `arch` (or a `source`: a released checkpoint)")
        check_arch_train(spec, f"models.{name}")
    kinds = {name: model_kind(config, name) for name in models}
    for name, spec in models.items():
        cls = METHODS[spec["method"]]
        for role, (partner, accepted) in getattr(cls, "partners", lambda o: {})(method_options(config, name)).items():
            if partner not in models or kinds[partner] not in accepted:
                _err(f"models.{name}.options.{role}",
                     f"{partner!r} is not a defined model of kind {' or '.join(accepted)}")

    # -- sampling runs: registered sampler, its options, its model roles and their kinds
    runs = config["sampling"]["runs"]
    for name, spec in runs.items():
        if spec["sampler"] not in SAMPLERS:
            _err(f"sampling.runs.{name}.sampler", SAMPLERS.unknown_message(spec["sampler"]))
        entry = SAMPLERS[spec["sampler"]]
        try:
            opts = entry.options(spec.get("options", {}), where=f"config key 'sampling.runs.{name}.options'")
        except ConfigError as e:  # a value the options class refuses (e.g. an unknown selection): name the key
            if f"sampling.runs.{name}." in str(e):
                raise
            _err(f"sampling.runs.{name}.options", str(e))
        if getattr(opts, "ar_context", None) == "exact" and not toy:
            _err(f"sampling.runs.{name}.options.ar_context", "'exact' needs the toy world")
        named = spec.get("models", {})
        for role, model in named.items():
            if role not in entry.roles:
                _err(f"sampling.runs.{name}.models.{role}",
                     f"sampler {entry.name!r} takes the roles {', '.join(entry.roles) or 'none'}")
            if model not in models:
                _err(f"sampling.runs.{name}.models.{role}", f"unknown model {model!r}; defined: {', '.join(models)}")
            if kinds[model] not in entry.roles[role]:
                _err(f"sampling.runs.{name}.models.{role}",
                     f"{model!r} (method {models[model]['method']!r}, a {kinds[model]} model) cannot be the "
                     f"{entry.name} sampler's {role}; it takes {' or '.join(entry.roles[role])}")
        for role in entry.required_roles(opts):
            if role not in named:
                _err(f"sampling.runs.{name}.models", f"the {entry.name} sampler needs a {role!r} model")
        if entry.fixed_steps and spec.get("steps") not in (None, [L]):
            _err(f"sampling.runs.{name}.steps", f"the {entry.name} sampler always takes L={L} steps")
    if toy and any(r["sampler"] == "data" for r in runs.values()) and \
            config["sampling"]["n_samples"] > data["splits"][config["ppl"]["split"]]:
        _err("sampling.n_samples", "the data run needs at least n_samples sequences in the test split")

    # -- Gen-PPL evaluators
    for name, ev in config["genppl"]["evaluators"].items():
        if ev["kind"] not in EVALUATORS:
            _err(f"genppl.evaluators.{name}.kind", EVALUATORS.unknown_message(ev["kind"]))
        if ev["kind"] == "exact" and not toy:
            _err(f"genppl.evaluators.{name}.kind", "'exact' needs the toy world (data.source: toy)")
        if ev["kind"] == "model":
            m = ev.get("model")
            if m not in models:
                _err(f"genppl.evaluators.{name}.model", f"unknown model {m!r}; defined: {', '.join(models)}")
            if kinds[m] != "ar":
                _err(f"genppl.evaluators.{name}.model", f"{m!r} is not an AR model")
        if ev["kind"] == "hf" and ev.get("model") not in config.get("hf_models", {}):
            _err(f"genppl.evaluators.{name}.model", f"{ev.get('model')!r} is not a key of hf_models")

    # -- Table 1 estimators built from a diffusion model and a proxy
    for name, spec in config.get("likelihood", {}).items():
        if name == "exact" or (name in models and has_likelihood(config, name)):
            _err(f"likelihood.{name}", "this name is already a model with a likelihood (results/ppl/ would clash)")
        if spec["energy"] not in ENERGIES:
            _err(f"likelihood.{name}.energy", ENERGIES.unknown_message(spec["energy"]))
        if spec["dlm"] not in models or kinds[spec["dlm"]] != "absorbing":
            _err(f"likelihood.{name}.dlm", f"{spec['dlm']!r} is not a defined masked diffusion model")
        ctx = spec.get("ar_context")
        if ENERGIES[spec["energy"]].scorer == "ebm":
            if spec.get("ebm") not in models or kinds[spec["ebm"]] != "ebm":
                _err(f"likelihood.{name}.ebm", f"{spec.get('ebm')!r} is not a defined energy network "
                     "(a model trained with nce, train: energy_net)")
            if ctx is not None or spec.get("proxy") is not None:
                _err(f"likelihood.{name}", "energy 'ebm' takes no proxy and no ar_context")
            continue
        if ctx == "teacher_forced":
            _err(f"likelihood.{name}.ar_context", "a likelihood needs log p_AR(xt), which teacher forcing cannot "
                 "compute; 'teacher_forced_carry_over' is EDLM's CoAR estimator (its plug-in)")
        if ctx not in AR_CONTEXTS:
            _err(f"likelihood.{name}.ar_context", f"unknown ar_context {ctx!r}; known: {', '.join(AR_CONTEXTS)}")
        if ctx == "exact":
            if not toy:
                _err(f"likelihood.{name}.ar_context", "'exact' needs the toy world")
        elif spec.get("proxy") not in models or kinds[spec["proxy"]] != "ar":
            _err(f"likelihood.{name}.proxy", f"{spec.get('proxy')!r} is not a defined AR model")

    # -- tables and figures
    sources = likelihood_sources(config)
    for label, src in config["tables"]["table1_ppl"].items():
        if src is None:  # a method without a likelihood: "--"
            continue
        if src == "exact" and not toy:
            _err(f"tables.table1_ppl.{label}", "'exact' needs the toy world")
        if src not in sources:
            why = (f"method {models[src]['method']!r} has no likelihood; add a `likelihood:` entry for it"
                   if src in models else f"unknown source {src!r}")
            _err(f"tables.table1_ppl.{label}", f"{why}; usable: {', '.join(sources)}")
    check_dllm(config)
    for label, run in config["tables"]["table2_genppl"].items():
        if run not in runs:
            _err(f"tables.table2_genppl.{label}", f"unknown sampling run {run!r}; defined: {', '.join(runs)}")
    fig = config.get("figures", {}).get("fig2_ablation")
    if fig:
        if fig["evaluator"] not in config["genppl"]["evaluators"]:
            _err("figures.fig2_ablation.evaluator", f"unknown evaluator {fig['evaluator']!r}")
        if fig["baseline"] not in runs:
            _err("figures.fig2_ablation.baseline", f"unknown sampling run {fig['baseline']!r}")
    check_fig2(config)


def check_dllm(config: dict) -> None:
    """Cross-checks of ``config['dllm']`` (Table 3), before any job: task names, methods and their options,
    ``init_from`` targets, rows' models and proxies, decoding and energy options, Hugging Face rows'
    ``trust_remote_code``.  Each error names its key."""
    import dataclasses

    from ..core.registry import DLLM_SAMPLERS, METHODS
    from ..data.tasks import TASKS
    from ..dllm.backbone import DecodeOptions
    from ..dllm.decoder import check_proxy, unread_keys
    from ..dllm.rows import row_sampler
    from .dllm import LAYOUTS

    d = config.get("dllm")
    if not d:
        return
    from .settings import LmEvalSettings

    lm_eval = LmEvalSettings.from_config(config)
    toy_tasks = lm_eval.task_source == "toy"
    for i, t in enumerate(d["tasks"]["names"]):
        if toy_tasks and t not in TASKS:
            _err(f"dllm.tasks.names[{i}]", f"unknown task {t!r}; known: {', '.join(TASKS)}")
        if not toy_tasks:
            for key in ("metrics", "columns"):
                if t not in d["tasks"].get(key, {}):
                    _err(f"dllm.tasks.{key}", f"built-in task {t!r} needs an entry (its lm-eval result key / column)")
    local = d["tasks"].get("local", {})
    if local and toy_tasks:
        _err("dllm.tasks.local", "local paper tasks belong to the built-in source (dllm.tasks.source: builtin)")
    for t in local:
        if t not in d["tasks"]["names"]:
            _err(f"dllm.tasks.local.{t}", f"{t!r} is written but not evaluated: add it to dllm.tasks.names")
    from .tasks import BUILTIN_UNSAFE, LOCAL_KINDS, LOCAL_SPEC_KEYS

    unsafe = [t for t, spec in local.items() if LOCAL_KINDS.get(spec.get("kind"), {}).get("unsafe_code", True)]
    unsafe += [t for t in d["tasks"]["names"] if not toy_tasks and t in BUILTIN_UNSAFE]
    if unsafe and not lm_eval.allow_code_execution:
        _err("dllm.tasks.allow_code_execution", f"{unsafe} execute model-written code; set it to true to grant that")
    for t, spec in local.items():
        options = LOCAL_KINDS.get(spec.get("kind"), {}).get("options", ())
        foreign = sorted(set(spec) - set(LOCAL_SPEC_KEYS) - set(options))
        if foreign:
            _err(f"dllm.tasks.local.{t}", f"{foreign} are not options of kind {spec.get('kind')!r}")
    gen = d.get("decoding", {}).get("gen_length")
    for t, spec in local.items():
        if gen is not None and spec.get("max_gen_toks", 0) > gen:
            _err(f"dllm.tasks.local.{t}.max_gen_toks", f"{spec['max_gen_toks']} > dllm.decoding.gen_length {gen}: "
                                                        "the decoders write at most gen_length tokens")
    models = d.get("models", {})
    for name, spec in models.items():
        where = f"dllm.models.{name}"
        if spec["method"] not in LAYOUTS:
            _err(f"{where}.method", f"{spec['method']!r} is not a DLLM-half method; known: {', '.join(LAYOUTS)}")
        _options(METHODS[spec["method"]].Options, spec.get("options", {}), f"{where}.options")
        init = spec.get("init_from")
        if init and init not in models and init not in config.get("models", {}):
            _err(f"{where}.init_from", f"unknown model {init!r} (neither in dllm.models nor in models)")
        if init == name:
            _err(f"{where}.init_from", "a model cannot start from itself")
        check_arch_train(spec, where)
    base = _options(DecodeOptions, d["decoding"], "dllm.decoding")
    energy = d.get("energy", {})
    hf = set(config.get("hf_models", {}))
    dec_fields = {f.name for f in dataclasses.fields(DecodeOptions)}

    def check_row(where: str, row: dict, oracle: str | None = None) -> None:
        """``oracle``: a proxy name that stands for the oracle checkpoint (the map's), accepted as a proxy."""
        kind = row.get("kind", "unie")
        ignored = unread_keys(row)
        if ignored:
            _err(f"{where}.{ignored[0]}", f"{ignored} do not apply to kind={kind!r}: nothing would read them")
        for role in ("model", "proxy"):
            m = row.get(role)
            if m is None or (role == "proxy" and m == oracle):
                continue
            if m in models:
                if role == "proxy" and LAYOUTS[models[m]["method"]] != "ar":
                    _err(f"{where}.proxy", f"{m!r} is not an autoregressive model")
            elif m not in hf:
                _err(f"{where}.{role}", f"unknown model {m!r}: not in dllm.models nor in hf_models")
        opts = dict(row.get("options", {}))
        sampler = row_sampler(row)
        if sampler not in DLLM_SAMPLERS:
            _err(f"{where}.options.sampler", DLLM_SAMPLERS.unknown_message(sampler))
        entry = DLLM_SAMPLERS[sampler]
        s_fields = set(entry.option_names())
        unknown = sorted(set(opts) - dec_fields - s_fields - {"seed", "mc_num", "sampler"})
        if unknown:
            _err(f"{where}.options", f"unknown option(s) {unknown} for DLLM sampler {sampler!r}; decoding: "
                                     f"{sorted(dec_fields)}, {sampler}: {sorted(s_fields)}")
        try:
            check_proxy(sampler, bool(row.get("proxy")))
        except ConfigError as e:
            _err(f"{where}.proxy", f"{e} (row key `proxy`)")
        _options(DecodeOptions, {**dataclasses.asdict(base), **{k: v for k, v in opts.items() if k in dec_fields}},
                 f"{where}.options")
        shared = energy if sampler == "energy" else {}
        _options(entry.options_cls, {**shared, **{k: v for k, v in opts.items() if k in s_fields}}, f"{where}.options")
        if kind != "unie" and row["model"] not in hf:
            _err(f"{where}.kind", f"a Hugging Face row needs its model in hf_models, got {row['model']!r}")

    for name, row in d["rows"].items():
        check_row(f"dllm.rows.{name}", row)
        if row.get("delta_to") and row["delta_to"] not in d["rows"]:
            _err(f"dllm.rows.{name}.delta_to", f"unknown row {row['delta_to']!r}")
        if row.get("delta_to") and not row.get("appendix_only") and d["rows"][row["delta_to"]].get("appendix_only"):
            _err(f"dllm.rows.{name}.delta_to", f"row {row['delta_to']!r} is appendix_only, so Table 3 (which this "
                 "row is in) has no backbone to take its delta to")
        if row.get("selection_table"):
            backbone = d["rows"].get(row.get("delta_to"), {})
            if not row.get("delta_to") or backbone.get("appendix_only") or backbone.get("selection_table"):
                _err(f"dllm.rows.{name}.delta_to", "a selection_table row needs delta_to: a Table 3 backbone")
            if row_sampler(row) != "energy":
                _err(f"dllm.rows.{name}.options", "a selection_table row is an Algorithm 3 row (give it an energy)")
    check_sweeps(d, check_row)
    check_map(d, check_row, toy_tasks)


MAP_ORACLE = "oracle"  # the model name of the map's oracle proxy (rule dllm_oracle)


def check_map(d: dict, check_row, toy_tasks: bool) -> None:
    """``dllm.map`` (the proxy-strength map, beyond the paper): toy tasks of ``dllm.tasks.names`` (the oracle knows
    only their answers), backbones that are DLLMs of ``dllm.models``, proxies that are its ARs or the oracle, and
    every point a valid row (``check_row``)."""
    from ..dllm.rows import map_points

    m = d.get("map")
    if not m:
        return
    if not toy_tasks:
        _err("dllm.map", "the proxy-strength map needs the toy tasks (its oracle knows their answers); drop it with "
                         "exclude: {dllm: {map: true}}")
    for i, t in enumerate(m["tasks"]):
        if t not in d["tasks"]["names"]:
            _err(f"dllm.map.tasks[{i}]", f"{t!r} is not in dllm.tasks.names")
    models = d.get("models", {})
    for b, spec in m["backbones"].items():
        if models.get(spec["model"], {}).get("method") not in ("llada", "dream"):
            _err(f"dllm.map.backbones.{b}.model", f"{spec['model']!r} is not a DLLM of dllm.models")
    for p, spec in m["proxies"].items():
        if spec["model"] != MAP_ORACLE and models.get(spec["model"], {}).get("method") != "ar":
            _err(f"dllm.map.proxies.{p}.model", f"{spec['model']!r} is neither an AR of dllm.models nor "
                                                f"{MAP_ORACLE!r}")
    for b in m["backbones"]:
        for point in map_points(d, b):
            check_row(f"dllm.map ({point['name']})", point["row"], oracle=MAP_ORACLE)


def check_sweeps(d: dict, check_row) -> None:
    """``dllm.sweeps`` (Figure 4, the appendix k/w tables): a known task, every curve a valid row, one varied
    option per curve, and every point's options valid (``check_row`` on the row each point runs)."""
    from ..dllm.rows import sweep_points

    sweeps = d.get("sweeps")
    if not sweeps:
        return
    if sweeps["task"] not in d["tasks"]["names"]:
        _err("dllm.sweeps.task", f"{sweeps['task']!r} is not in dllm.tasks.names")
    for sweep, curves in sweeps["sets"].items():
        for curve, spec in curves.items():
            vary = spec.get("vary", {})
            if len(vary) != 1 or not all(isinstance(v, list) and v for v in vary.values()):
                _err(f"dllm.sweeps.sets.{sweep}.{curve}.vary", "needs exactly one option with a non-empty list of values")
        for point in sweep_points(d, sweep):
            check_row(f"dllm.sweeps.sets.{sweep}.{point['curve']} ({point['key']}={point['value']})", point["row"])


# ---------------------------------------------------------------------- command line and cluster settings
def coerce_cli_config(config: dict, cli: dict) -> None:
    """Read the nested values given with ``--config`` as YAML, in place.

    Snakemake parses ``--config 'resources={train: {runtime: 30}}'`` with YAML's base loader, so every nested
    leaf arrives as a string (``'30'``) and the schema refuses it; a top-level scalar (``seed=1``) is already typed.
    Each string leaf that came from the command line (``cli``, the parsed ``--config``) becomes what YAML makes of
    it when that is a number, a boolean or null (``'30'`` -> 30, ``'true'`` -> True), else stays a string
    (``'a100'``); values from the config files are left as they are."""
    import yaml

    def coerce(value):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        return parsed if parsed is None or isinstance(parsed, (bool, int, float)) else value

    def walk(node, given):
        if isinstance(given, dict) and isinstance(node, dict):
            for k, v in given.items():
                if k in node:
                    node[k] = walk(node[k], v)
            return node
        if isinstance(given, list) and isinstance(node, list) and len(node) == len(given):
            return [walk(n, g) for n, g in zip(node, given)]
        if isinstance(given, str) and node == given:
            return coerce(given)
        return node

    for key, given in cli.items():
        if key in config and isinstance(given, (dict, list)):
            config[key] = walk(config[key], given)


def runtime_at(minutes: int, attempt: int, cap: int | None) -> int:
    """The Slurm runtime (minutes) of a job's ``attempt``: ``minutes`` x ``attempt`` (a job resubmitted after its
    time limit asks for more; a training job resumes from its checkpoint), never above ``cap`` (``max_runtime``:
    the partition's time limit, above which a job would stay pending forever)."""
    value = int(minutes) * max(1, int(attempt))
    return value if cap is None else min(value, int(cap))
