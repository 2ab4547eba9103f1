"""Config cross-checks the JSON schema cannot do.

:func:`check_config` runs at parse time (:func:`unie.config.validate.workflow_config`), before any job, and
names the offending key.  It is one function per section of the config, called in this order: the restarting
rules' runtimes, data, models, sampling runs, Gen-PPL evaluators, likelihoods, Table 1, the DLLM half, Table 2,
the figures.  :func:`expand_config`, which runs before it, checks the figures' specs (:func:`check_fig2`,
:func:`check_fig3`) and then adds the sampling runs they generate.  Every check comes from what the registries
record: a method's ``Options`` dataclass and ``kind``, a sampler's options dataclass and model roles
(:class:`unie.core.registry.SamplerEntry`), the energies and evaluators registered.  Nothing here is a hand-kept
table of names.  The facts the checks read from the resolved config (which models are released, a model's kind,
the runs the figures add) are :mod:`unie.config.expand`'s.
"""

from __future__ import annotations

import dataclasses

from ..core.options import ConfigError, ModelConfig, TrainConfig, from_dict, key_error
from ..core.registry import DLLM_SAMPLERS, ENERGIES, EVALUATORS, METHODS, SAMPLERS
from ..data.dllm_format import LAYOUTS
from ..data.tasks import TASKS
from ..data.toy_world import DOMAINS
from ..dllm.backbone import DecodeOptions
from ..dllm.decoder import check_proxy, unread_keys
from ..dllm.rows import MAP_ORACLE, map_points, row_sampler, sweep_points
from ..energy.energies import AR_CONTEXTS, SELECTIONS
from ..eval.local_tasks import BUILTIN_UNSAFE, LOCAL_KINDS, LOCAL_SPEC_KEYS
from ..methods.released_methods import GPT2_MASKED
from ..models.dit import DIT_ARCH_KEYS
from ..models.released import SOURCES
from ..models.standins import FORMATS
from .expand import (
    DEFAULT_SELECTION,
    add_figure_runs,
    dit_root,
    has_likelihood,
    is_dit_model,
    likelihood_sources,
    method_options,
    model_kind,
    released_models,
    source_format,
)
from .settings import LmEvalSettings


def _options(cls, d: dict | None, key: str):
    """``from_dict(cls, d, key)``; a value the class itself refuses (its ``__post_init__``'s ``ValueError``)
    becomes a :class:`ConfigError` naming ``key``."""
    try:
        return from_dict(cls, d, key)
    except ConfigError:
        raise
    except ValueError as e:
        key_error(key, str(e))


def check_arch_train(spec: dict, where: str) -> None:
    """A model's ``arch`` and ``train`` blocks against :class:`~unie.core.options.ModelConfig` and
    :class:`~unie.core.options.TrainConfig` (the single home of their keys, types and defaults): an unknown key, a
    wrong type or a value the dataclass refuses names its config key, before any job starts."""
    _options(TrainConfig, spec["train"], f"{where}.train")
    arch = dict(spec["arch"])
    for key in ("d_model", "n_layers", "n_heads"):
        if key not in arch:
            key_error(f"{where}.arch", f"missing {key!r} (a model trained from scratch states its size)")
    for fixed in ("vocab_size", "max_len", "causal"):  # set by the workflow from the tokenizer, data and method
        if fixed in arch:
            key_error(
                f"{where}.arch.{fixed}", "is set by the workflow (tokenizer, data.seq_len, method), not the config"
            )
    d, h = arch.get("d_model", 0), arch.get("n_heads", 1)
    if isinstance(d, int) and isinstance(h, int) and h > 0 and (d % h or (d // h) % 2):
        key_error(f"{where}.arch", f"d_model={d} must be divisible by n_heads={h} into an even head size")
    _options(ModelConfig, {**arch, "vocab_size": 2}, f"{where}.arch")


# -- released checkpoints as models (`source:`), docs/released-checkpoints.md
SOURCE_KEYS = (
    "kind",
    "path",
    "hf_id",
    "standin",
    "trust_remote_code",
    "use_ema",
    "n_heads",
    "block_size",
    "tokenizer_info",
)


CUSTOM_CODE_KINDS = ("mdlm", "bd3lm", "duo")  # their HF folders name custom code (auto_map)


def check_sources(config: dict) -> None:
    """Each ``models.NAME.source``: a known kind of the model's method, exactly one of ``path``, ``hf_id`` or
    ``standin`` in a format the authors publish, the custom-code grant where the HF folder needs it, no ``train``,
    ``arch`` or ``init_from`` (the weights are the release's), a tokenizer of the release's layout."""
    for name, source in released_models(config).items():
        where = f"models.{name}.source"
        spec = config["models"][name]
        if not isinstance(source, dict):
            key_error(where, "a mapping {kind, path | hf_id | standin, trust_remote_code, ...}")
        unknown = sorted(set(source) - set(SOURCE_KEYS))
        if unknown:
            key_error(f"{where}.{unknown[0]}", f"unknown key; allowed: {', '.join(SOURCE_KEYS)}")
        kind = source.get("kind")
        if kind not in SOURCES:
            key_error(f"{where}.kind", f"{kind!r} is not a released checkpoint kind ({', '.join(SOURCES)})")
        if SOURCES[kind].method != spec["method"]:
            key_error(f"models.{name}.method", f"a released {kind} checkpoint is a {SOURCES[kind].method!r} model")
        given = [k for k in ("path", "hf_id", "standin") if source.get(k)]
        if len(given) != 1:
            key_error(
                where,
                f"give exactly one of path (a local HF folder or .ckpt), hf_id (downloaded) or standin "
                f"(a tiny stand-in the workflow writes), got {given or 'none'}",
            )
        fmt = source_format(source)
        if source.get("standin"):
            std = FORMATS[kind]
            if source["standin"] not in std:
                key_error(
                    f"{where}.standin", f"a {kind} stand-in is written as {' or '.join(std)}, not {source['standin']!r}"
                )
        elif fmt not in SOURCES[kind].formats:
            key_error(
                where,
                f"{kind} is published as {' or '.join(SOURCES[kind].formats)} only "
                f"({SOURCES[kind].identifier}), not as {'an HF folder' if fmt == 'hf' else 'a .ckpt'}",
            )
        if kind in CUSTOM_CODE_KINDS and fmt == "hf" and source.get("trust_remote_code") is not True:
            key_error(
                f"{where}.trust_remote_code",
                f"the released {kind} HF folder names custom code (auto_map); set "
                "trust_remote_code: true to load it (our own DiT reads its weights, its code is never run)",
            )
        for key in ("train", "arch", "init_from"):
            if spec.get(key) is not None:
                key_error(
                    f"models.{name}.{key}",
                    "a model with a `source` is the released checkpoint: it is imported, "
                    "not trained (drop the key, or drop `source` to train it)",
                )
        info = source.get("tokenizer_info")
        if info is not None:
            bad = sorted(set(info) - {"vocab_size", "mask_id", "bos_id", "eos_id"})
            if bad:
                key_error(
                    f"{where}.tokenizer_info.{bad[0]}", "unknown key; allowed: vocab_size, mask_id, bos_id, eos_id"
                )
        elif not source.get("standin") and (
            config["tokenizer"].get("kind") != "hf"
            or config["tokenizer"].get("path") not in ("gpt2", "openai-community/gpt2")
        ):
            key_error(
                where,
                f"a released {kind} checkpoint reads GPT-2 + the appended mask ({GPT2_MASKED}): set "
                "tokenizer: {kind: hf, path: gpt2}, or state the checkpoint's layout in "
                "source.tokenizer_info",
            )


# Rules whose job starts over from nothing when a retry runs it again: a Table 3 row's lm-eval run (training resumes
# from its checkpoint, tokenisation from its last part, a sweep from its last finished point)
RESTARTING_RULES = ("dllm_eval",)


def check_runtimes(config: dict) -> None:
    """A rule that starts over on a retry must fit in one attempt: its configured runtime above ``max_runtime``
    (the partition's time limit) would be cut at every attempt, the work lost each time."""
    cap = config.get("max_runtime")
    for rule in RESTARTING_RULES:
        minutes = ((config.get("resources") or {}).get(rule) or {}).get("runtime")
        if cap and minutes and minutes > cap:
            key_error(
                f"resources.{rule}.runtime",
                f"{minutes} min is more than max_runtime {cap}: this job starts over when a retry runs it "
                f"again, so every attempt would be killed at {cap} min; run it on more GPUs (resources.{rule}."
                f"gpu: N, lm-eval's documents split between them) with a runtime that fits, or raise "
                f"max_runtime to the partition's limit",
            )


def check_config(config: dict) -> None:
    """Raise :class:`ConfigError` naming the key for any dangling reference, unknown name or bad option: the
    sections below, in this order (the first error found is the one raised)."""
    check_runtimes(config)
    _check_data(config)
    _check_models(config)
    check_sources(config)
    _check_trained_models(config)
    _check_partners(config)
    _check_sampling(config)
    _check_genppl(config)
    _check_likelihood(config)
    _check_table1(config)
    check_dllm(config)
    _check_table2(config)
    _check_figures(config)


def _toy(config: dict) -> bool:
    return config["data"]["source"] == "toy"


def _kinds(config: dict) -> dict[str, str]:
    """Model name -> what it is to a sampler role (:func:`unie.config.expand.model_kind`)."""
    return {name: model_kind(config, name) for name in config["models"]}


def _check_data(config: dict) -> None:
    """``data``: the training domain among the domains, toy-world domains and the word tokenizer, or an HF
    dataset spec per domain and split and an HF tokenizer."""
    data = config["data"]
    if data["train_domain"] not in data["domains"]:
        key_error("data.train_domain", f"{data['train_domain']!r} is not in data.domains {data['domains']}")
    if _toy(config):
        for i, d in enumerate(data["domains"]):
            if d not in DOMAINS:
                key_error(f"data.domains[{i}]", f"unknown toy-world domain {d!r}; known: {', '.join(DOMAINS)}")
        if config["tokenizer"]["kind"] != "word":
            key_error("tokenizer.kind", "the toy world needs the word-level tokenizer ('word')")
    else:
        hf = data.get("hf", {})
        for d in data["domains"]:
            needed = {config["ppl"]["split"]} | ({"train", "valid"} if d == data["train_domain"] else set())
            for split in sorted(needed):
                if split not in hf.get(d, {}):
                    key_error(f"data.hf.{d}.{split}", "missing dataset spec for this domain and split")
        if config["tokenizer"]["kind"] != "hf" or "path" not in config["tokenizer"]:
            key_error("tokenizer", "the hf data source needs tokenizer.kind 'hf' and tokenizer.path")


def _check_models(config: dict) -> None:
    """``models``: a registered method, options of its ``Options`` dataclass, ``chunk_bos`` where the data and the
    ``init_from`` model need it, ``init_from`` a defined model."""
    data = config["data"]
    models = config["models"]
    for name, spec in models.items():
        if spec["method"] not in METHODS:
            key_error(f"models.{name}.method", METHODS.unknown_message(spec["method"]))
        method_options(config, name)
        if (spec.get("options") or {}).get("chunk_bos") and not data.get("chunk_specials", True):
            key_error(
                f"models.{name}.options.chunk_bos",
                "reads chunks that begin with their own BOS: it needs data.chunk_specials: true",
            )
        if spec.get("init_from") is not None and spec["init_from"] not in models:
            key_error(f"models.{name}.init_from", f"unknown model {spec['init_from']!r}")
        init = models.get(spec.get("init_from")) or {}
        if (
            spec["method"] == "ar" == init.get("method")
            and (init.get("options") or {}).get("chunk_bos")
            and not (spec.get("options") or {}).get("chunk_bos")
        ):
            key_error(
                f"models.{name}.options.chunk_bos",
                f"initialised from {spec['init_from']!r}, which reads chunks "
                "that begin with their own BOS: set chunk_bos: true",
            )


def _check_trained_models(config: dict) -> None:
    """The models without a ``source``: their ``train`` block, and their ``arch`` (only the keys a released
    checkpoint's architecture leaves free when fine-tuned from one, else a whole one: :func:`check_arch_train`)."""
    for name, spec in config["models"].items():
        if spec.get("source"):
            continue
        if "train" not in spec:
            key_error(f"models.{name}", "a trained model needs `train` (or a `source`: a released checkpoint)")
        if is_dit_model(config, name):  # fine-tuned from a released checkpoint: its architecture
            extra = sorted(set(spec.get("arch") or {}) - set(DIT_ARCH_KEYS))
            if extra:
                key_error(
                    f"models.{name}.arch",
                    f"{extra} cannot be set: the model is fine-tuned from the released checkpoint of "
                    f"{dit_root(config, name)!r}, whose architecture it keeps (only {list(DIT_ARCH_KEYS)})",
                )

            _options(TrainConfig, spec["train"], f"models.{name}.train")
            continue
        if "arch" not in spec:
            key_error(
                f"models.{name}", "a model trained from scratch needs `arch` (or a `source`: a released checkpoint)"
            )
        check_arch_train(spec, f"models.{name}")


def _check_partners(config: dict) -> None:
    """A model's partners (the frozen models a method trains against, e.g. NCE's proxy): defined models of the
    kind the method accepts."""
    models = config["models"]
    kinds = _kinds(config)
    for name, spec in models.items():
        cls = METHODS[spec["method"]]
        for role, (partner, accepted) in getattr(cls, "partners", lambda o: {})(method_options(config, name)).items():
            if partner not in models or kinds[partner] not in accepted:
                key_error(
                    f"models.{name}.options.{role}",
                    f"{partner!r} is not a defined model of kind {' or '.join(accepted)}",
                )


def _check_sampling(config: dict) -> None:
    """``sampling.runs``: a registered sampler, its options, its model roles and their kinds, its steps; the data
    run's sample count within the test split."""
    data = config["data"]
    toy = _toy(config)
    L = data["seq_len"]
    models = config["models"]
    kinds = _kinds(config)
    runs = config["sampling"]["runs"]
    for name, spec in runs.items():
        if spec["sampler"] not in SAMPLERS:
            key_error(f"sampling.runs.{name}.sampler", SAMPLERS.unknown_message(spec["sampler"]))
        entry = SAMPLERS[spec["sampler"]]
        try:
            opts = entry.options(spec.get("options", {}), where=f"config key 'sampling.runs.{name}.options'")
        except ConfigError as e:  # a value the options class refuses (e.g. an unknown selection): name the key
            if f"sampling.runs.{name}." in str(e):
                raise
            key_error(f"sampling.runs.{name}.options", str(e))
        if getattr(opts, "ar_context", None) == "exact" and not toy:
            key_error(f"sampling.runs.{name}.options.ar_context", "'exact' needs the toy world")
        named = spec.get("models", {})
        for role, model in named.items():
            if role not in entry.roles:
                key_error(
                    f"sampling.runs.{name}.models.{role}",
                    f"sampler {entry.name!r} takes the roles {', '.join(entry.roles) or 'none'}",
                )
            if model not in models:
                key_error(
                    f"sampling.runs.{name}.models.{role}", f"unknown model {model!r}; defined: {', '.join(models)}"
                )
            if kinds[model] not in entry.roles[role]:
                key_error(
                    f"sampling.runs.{name}.models.{role}",
                    f"{model!r} (method {models[model]['method']!r}, a {kinds[model]} model) cannot be the "
                    f"{entry.name} sampler's {role}; it takes {' or '.join(entry.roles[role])}",
                )
        for role in entry.required_roles(opts):
            if role not in named:
                key_error(f"sampling.runs.{name}.models", f"the {entry.name} sampler needs a {role!r} model")
        if entry.fixed_steps and spec.get("steps") not in (None, [L]):
            key_error(f"sampling.runs.{name}.steps", f"the {entry.name} sampler always takes L={L} steps")
    if (
        toy
        and any(r["sampler"] == "data" for r in runs.values())
        and config["sampling"]["n_samples"] > data["splits"][config["ppl"]["split"]]
    ):
        key_error("sampling.n_samples", "the data run needs at least n_samples sequences in the test split")


def _check_genppl(config: dict) -> None:
    """``genppl.evaluators``: a registered evaluator kind, ``exact`` only in the toy world, a ``model``
    evaluator's AR model, an ``hf`` evaluator's model in ``hf_models``."""
    toy = _toy(config)
    models = config["models"]
    kinds = _kinds(config)
    for name, ev in config["genppl"]["evaluators"].items():
        if ev["kind"] not in EVALUATORS:
            key_error(f"genppl.evaluators.{name}.kind", EVALUATORS.unknown_message(ev["kind"]))
        if ev["kind"] == "exact" and not toy:
            key_error(f"genppl.evaluators.{name}.kind", "'exact' needs the toy world (data.source: toy)")
        if ev["kind"] == "model":
            m = ev.get("model")
            if m not in models:
                key_error(f"genppl.evaluators.{name}.model", f"unknown model {m!r}; defined: {', '.join(models)}")
            if kinds[m] != "ar":
                key_error(f"genppl.evaluators.{name}.model", f"{m!r} is not an AR model")
        if ev["kind"] == "hf" and ev.get("model") not in config.get("hf_models", {}):
            key_error(f"genppl.evaluators.{name}.model", f"{ev.get('model')!r} is not a key of hf_models")


def _check_likelihood(config: dict) -> None:
    """``likelihood``: Table 1's estimators built from a diffusion model and a proxy (or an energy network): a
    name no model's likelihood has, a registered energy, a masked diffusion model, a proxy and context the energy
    can score with."""
    toy = _toy(config)
    models = config["models"]
    kinds = _kinds(config)
    for name, spec in config.get("likelihood", {}).items():
        if name == "exact" or (name in models and has_likelihood(config, name)):
            key_error(f"likelihood.{name}", "this name is already a model with a likelihood (results/ppl/ would clash)")
        if spec["energy"] not in ENERGIES:
            key_error(f"likelihood.{name}.energy", ENERGIES.unknown_message(spec["energy"]))
        if spec["dlm"] not in models or kinds[spec["dlm"]] != "absorbing":
            key_error(f"likelihood.{name}.dlm", f"{spec['dlm']!r} is not a defined masked diffusion model")
        ctx = spec.get("ar_context")
        if ENERGIES[spec["energy"]].scorer == "ebm":
            if spec.get("ebm") not in models or kinds[spec["ebm"]] != "ebm":
                key_error(
                    f"likelihood.{name}.ebm",
                    f"{spec.get('ebm')!r} is not a defined energy network "
                    "(a model trained with nce, train: energy_net)",
                )
            if ctx is not None or spec.get("proxy") is not None:
                key_error(f"likelihood.{name}", "energy 'ebm' takes no proxy and no ar_context")
            continue
        if ctx == "teacher_forced":
            key_error(
                f"likelihood.{name}.ar_context",
                "a likelihood needs log p_AR(xt), which teacher forcing cannot "
                "compute; 'teacher_forced_carry_over' is EDLM's CoAR estimator (its plug-in)",
            )
        if ctx not in AR_CONTEXTS:
            key_error(f"likelihood.{name}.ar_context", f"unknown ar_context {ctx!r}; known: {', '.join(AR_CONTEXTS)}")
        if ctx == "exact":
            if not toy:
                key_error(f"likelihood.{name}.ar_context", "'exact' needs the toy world")
        elif spec.get("proxy") not in models or kinds[spec["proxy"]] != "ar":
            key_error(f"likelihood.{name}.proxy", f"{spec.get('proxy')!r} is not a defined AR model")


def _check_table1(config: dict) -> None:
    """``tables.table1_ppl``: each row's source has a likelihood (a model's own, ``exact`` in the toy world, or a
    ``likelihood`` entry)."""
    toy = _toy(config)
    models = config["models"]
    sources = likelihood_sources(config)
    for label, src in config["tables"]["table1_ppl"].items():
        if src is None:  # a method without a likelihood: "--"
            continue
        if src == "exact" and not toy:
            key_error(f"tables.table1_ppl.{label}", "'exact' needs the toy world")
        if src not in sources:
            why = (
                f"method {models[src]['method']!r} has no likelihood; add a `likelihood:` entry for it"
                if src in models
                else f"unknown source {src!r}"
            )
            key_error(f"tables.table1_ppl.{label}", f"{why}; usable: {', '.join(sources)}")


def _check_table2(config: dict) -> None:
    """``tables.table2_genppl``: each row a defined sampling run."""
    runs = config["sampling"]["runs"]
    for label, run in config["tables"]["table2_genppl"].items():
        if run not in runs:
            key_error(f"tables.table2_genppl.{label}", f"unknown sampling run {run!r}; defined: {', '.join(runs)}")


# -- figures: checked before their runs are generated (expand_config), Figure 2 again with the others (check_config)


def _check_figures(config: dict) -> None:
    """``figures.fig2_ablation``: its evaluator and baseline run defined, its curves valid (:func:`check_fig2`).
    Figure 3's spec is checked before its runs are generated (:func:`check_fig3`, by :func:`expand_config`)."""
    fig = config.get("figures", {}).get("fig2_ablation")
    if fig:
        if fig["evaluator"] not in config["genppl"]["evaluators"]:
            key_error("figures.fig2_ablation.evaluator", f"unknown evaluator {fig['evaluator']!r}")
        if fig["baseline"] not in config["sampling"]["runs"]:
            key_error("figures.fig2_ablation.baseline", f"unknown sampling run {fig['baseline']!r}")
    check_fig2(config)


def check_fig2(config: dict) -> None:
    """Figure 2's curves, before its runs are generated (so the error names its key): each
    ``figures.fig2_ablation.energies.<label>`` is a registered energy, or ``{energy, selection}`` with a known
    selection rule (:data:`unie.energy.energies.SELECTIONS`)."""
    fig = config.get("figures", {}).get("fig2_ablation")
    if not fig:
        return
    for label, e in fig["energies"].items():
        key = f"figures.fig2_ablation.energies.{label}"
        if not isinstance(e, (str, dict)):
            key_error(key, f"an energy name or {{energy, selection}}, got {e!r}")
        if isinstance(e, dict):
            extra = sorted(set(e) - {"energy", "selection"})
            if extra:
                key_error(f"{key}.{extra[0]}", "unknown key; allowed: energy, selection")
            if e.get("selection", DEFAULT_SELECTION) not in SELECTIONS:
                key_error(f"{key}.selection", f"unknown selection {e['selection']!r}; known: {', '.join(SELECTIONS)}")
            e = e.get("energy")
        if e not in ENERGIES:
            key_error(
                f"{key}{'' if isinstance(fig['energies'][label], str) else '.energy'}", ENERGIES.unknown_message(e)
            )


def check_fig3(config: dict) -> None:
    """Figure 3's cross-checks, before its runs are generated (so the error names its key)."""
    fig3 = config.get("figures", {}).get("fig3_tradeoff")
    if fig3:
        if fig3["evaluator"] not in config["genppl"]["evaluators"]:
            key_error("figures.fig3_tradeoff.evaluator", f"unknown evaluator {fig3['evaluator']!r}")
        if fig3["K"] not in fig3["Ks"] or fig3["w"] not in fig3["ws"]:
            key_error("figures.fig3_tradeoff", f"the default K={fig3['K']} and w={fig3['w']} must be among Ks and ws")
        for label, run in fig3["baselines"].items():
            if run not in config["sampling"]["runs"]:
                key_error(f"figures.fig3_tradeoff.baselines.{label}", f"unknown sampling run {run!r}")
        for key, e in (("energy", fig3["energy"]), ("edlm.energy", fig3["edlm"]["energy"])):
            if e not in ENERGIES:
                key_error(f"figures.fig3_tradeoff.{key}", ENERGIES.unknown_message(e))
        for key, sel in (("selection", fig3.get("selection")), ("edlm.selection", fig3["edlm"].get("selection"))):
            if sel is not None and sel not in SELECTIONS:
                key_error(f"figures.fig3_tradeoff.{key}", f"unknown selection {sel!r}; known: {', '.join(SELECTIONS)}")


def expand_config(config: dict) -> None:
    """Add generated sampling runs (Figures 2 and 3) to ``config['sampling']['runs']`` in place
    (:func:`unie.config.expand.add_figure_runs`), after the checks of the specs they are generated from, so that
    an error names the figure's key."""
    check_fig2(config)
    check_fig3(config)
    add_figure_runs(config)


def check_dllm(config: dict) -> None:
    """Cross-checks of ``config['dllm']`` (Table 3), before any job: task names, methods and their options,
    ``init_from`` targets, rows' models and proxies, decoding and energy options, Hugging Face rows'
    ``trust_remote_code``.  Each error names its key."""
    d = config.get("dllm")
    if not d:
        return

    lm_eval = LmEvalSettings.from_config(config)
    toy_tasks = lm_eval.task_source == "toy"
    for i, t in enumerate(d["tasks"]["names"]):
        if toy_tasks and t not in TASKS:
            key_error(f"dllm.tasks.names[{i}]", f"unknown task {t!r}; known: {', '.join(TASKS)}")
        if not toy_tasks:
            for key in ("metrics", "columns"):
                if t not in d["tasks"].get(key, {}):
                    key_error(
                        f"dllm.tasks.{key}", f"built-in task {t!r} needs an entry (its lm-eval result key / column)"
                    )
    for i, t in enumerate(d["tasks"].get("average") or []):
        if t not in d["tasks"]["names"]:
            key_error(
                f"dllm.tasks.average[{i}]", f"{t!r} is not one of dllm.tasks.names ({', '.join(d['tasks']['names'])})"
            )
    local = d["tasks"].get("local", {})
    if local and toy_tasks:
        key_error("dllm.tasks.local", "local paper tasks belong to the built-in source (dllm.tasks.source: builtin)")
    for t in local:
        if t not in d["tasks"]["names"]:
            key_error(f"dllm.tasks.local.{t}", f"{t!r} is written but not evaluated: add it to dllm.tasks.names")

    unsafe = [t for t, spec in local.items() if LOCAL_KINDS.get(spec.get("kind"), {}).get("unsafe_code", True)]
    unsafe += [t for t in d["tasks"]["names"] if not toy_tasks and t in BUILTIN_UNSAFE]
    if unsafe and not lm_eval.allow_code_execution:
        key_error(
            "dllm.tasks.allow_code_execution", f"{unsafe} execute model-written code; set it to true to grant that"
        )
    for t, spec in local.items():
        options = LOCAL_KINDS.get(spec.get("kind"), {}).get("options", ())
        foreign = sorted(set(spec) - set(LOCAL_SPEC_KEYS) - set(options))
        if foreign:
            key_error(f"dllm.tasks.local.{t}", f"{foreign} are not options of kind {spec.get('kind')!r}")
    gen = d.get("decoding", {}).get("gen_length")
    for t, spec in local.items():
        if gen is not None and spec.get("max_gen_toks", 0) > gen:
            key_error(
                f"dllm.tasks.local.{t}.max_gen_toks",
                f"{spec['max_gen_toks']} > dllm.decoding.gen_length {gen}: "
                "the decoders write at most gen_length tokens",
            )
    models = d.get("models", {})
    for name, spec in models.items():
        where = f"dllm.models.{name}"
        if spec["method"] not in LAYOUTS:
            key_error(f"{where}.method", f"{spec['method']!r} is not a DLLM-half method; known: {', '.join(LAYOUTS)}")
        _options(METHODS[spec["method"]].Options, spec.get("options", {}), f"{where}.options")
        init = spec.get("init_from")
        if init and init not in models and init not in config.get("models", {}):
            key_error(f"{where}.init_from", f"unknown model {init!r} (neither in dllm.models nor in models)")
        if init == name:
            key_error(f"{where}.init_from", "a model cannot start from itself")
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
            key_error(f"{where}.{ignored[0]}", f"{ignored} do not apply to kind={kind!r}: nothing would read them")
        for role in ("model", "proxy"):
            m = row.get(role)
            if m is None or (role == "proxy" and m == oracle):
                continue
            if m in models:
                if role == "proxy" and LAYOUTS[models[m]["method"]] != "ar":
                    key_error(f"{where}.proxy", f"{m!r} is not an autoregressive model")
            elif m not in hf:
                key_error(f"{where}.{role}", f"unknown model {m!r}: not in dllm.models nor in hf_models")
        opts = dict(row.get("options", {}))
        sampler = row_sampler(row)
        if sampler not in DLLM_SAMPLERS:
            key_error(f"{where}.options.sampler", DLLM_SAMPLERS.unknown_message(sampler))
        entry = DLLM_SAMPLERS[sampler]
        s_fields = set(entry.option_names())
        unknown = sorted(set(opts) - dec_fields - s_fields - {"seed", "mc_num", "sampler"})
        if unknown:
            key_error(
                f"{where}.options",
                f"unknown option(s) {unknown} for DLLM sampler {sampler!r}; decoding: "
                f"{sorted(dec_fields)}, {sampler}: {sorted(s_fields)}",
            )
        try:
            check_proxy(sampler, bool(row.get("proxy")))
        except ConfigError as e:
            key_error(f"{where}.proxy", f"{e} (row key `proxy`)")
        _options(
            DecodeOptions,
            {**dataclasses.asdict(base), **{k: v for k, v in opts.items() if k in dec_fields}},
            f"{where}.options",
        )
        shared = energy if sampler == "energy" else {}
        _options(entry.options_cls, {**shared, **{k: v for k, v in opts.items() if k in s_fields}}, f"{where}.options")
        if sampler == "energy" and {**shared, **opts}.get("ar_context") == "masked":
            # the masked reading feeds the DLLM's ids to the proxy: a model and proxy of dllm.models must share their
            # tokenizer (a Hugging Face pair is checked when the decoder is built: the energy sampler's preflight)
            tokenizers = [models.get(row.get(role), {}).get("tokenizer") for role in ("model", "proxy")]
            if None not in tokenizers and tokenizers[0] != tokenizers[1]:
                key_error(
                    f"{where}.options.ar_context" if "ar_context" in opts else "dllm.energy.ar_context",
                    f"'masked' (for {where}) reads the DLLM's ids and masks as they are, so the proxy must share "
                    f"its tokenizer: model {row['model']!r} uses {tokenizers[0]!r}, proxy {row['proxy']!r} "
                    f"{tokenizers[1]!r}; use teacher_forced (read through the tokenizer bridge)",
                )
        if kind != "unie" and row["model"] not in hf:
            key_error(f"{where}.kind", f"a Hugging Face row needs its model in hf_models, got {row['model']!r}")

    for name, row in d["rows"].items():
        check_row(f"dllm.rows.{name}", row)
        if row.get("delta_to") and row["delta_to"] not in d["rows"]:
            key_error(f"dllm.rows.{name}.delta_to", f"unknown row {row['delta_to']!r}")
        if row.get("delta_to") and not row.get("appendix_only") and d["rows"][row["delta_to"]].get("appendix_only"):
            key_error(
                f"dllm.rows.{name}.delta_to",
                f"row {row['delta_to']!r} is appendix_only, so Table 3 (which this "
                "row is in) has no backbone to take its delta to",
            )
        if row.get("selection_table"):
            backbone = d["rows"].get(row.get("delta_to"), {})
            if not row.get("delta_to") or backbone.get("appendix_only") or backbone.get("selection_table"):
                key_error(f"dllm.rows.{name}.delta_to", "a selection_table row needs delta_to: a Table 3 backbone")
            if row_sampler(row) != "energy":
                key_error(
                    f"dllm.rows.{name}.options", "a selection_table row is an Algorithm 3 row (give it an energy)"
                )
    check_sweeps(d, check_row)
    check_map(d, check_row, toy_tasks)


def check_map(d: dict, check_row, toy_tasks: bool) -> None:
    """``dllm.map`` (the proxy-strength map, beyond the paper): toy tasks of ``dllm.tasks.names`` (the oracle knows
    only their answers), backbones that are DLLMs of ``dllm.models``, proxies that are its ARs or the oracle, and
    every point a valid row (``check_row``)."""
    m = d.get("map")
    if not m:
        return
    if not toy_tasks:
        key_error(
            "dllm.map",
            "the proxy-strength map needs the toy tasks (its oracle knows their answers); drop it "
            "with exclude: {dllm: {map: true}}",
        )
    for i, t in enumerate(m["tasks"]):
        if t not in d["tasks"]["names"]:
            key_error(f"dllm.map.tasks[{i}]", f"{t!r} is not in dllm.tasks.names")
    models = d.get("models", {})
    for b, spec in m["backbones"].items():
        if models.get(spec["model"], {}).get("method") not in ("llada", "dream"):
            key_error(f"dllm.map.backbones.{b}.model", f"{spec['model']!r} is not a DLLM of dllm.models")
    for p, spec in m["proxies"].items():
        if spec["model"] != MAP_ORACLE and models.get(spec["model"], {}).get("method") != "ar":
            key_error(
                f"dllm.map.proxies.{p}.model", f"{spec['model']!r} is neither an AR of dllm.models nor {MAP_ORACLE!r}"
            )
    for b in m["backbones"]:
        for point in map_points(d, b):
            check_row(f"dllm.map ({point['name']})", point["row"], oracle=MAP_ORACLE)
    items, whole, n_test = m.get("items"), m.get("whole"), d.get("tasks", {}).get("n_test")
    if items is not None and n_test is not None and items < n_test:
        key_error(
            "dllm.map.items", f"{items} is fewer than Table 3's dllm.tasks.n_test = {n_test} (its items come first)"
        )
    if whole is not None and items is not None and whole > items:
        key_error("dllm.map.whole", f"{whole} is more than the map's dllm.map.items = {items}")


def check_sweeps(d: dict, check_row) -> None:
    """``dllm.sweeps`` (Figure 4, the appendix k/w tables): a known task, every curve a valid row, one varied
    option per curve, and every point's options valid (``check_row`` on the row each point runs)."""
    sweeps = d.get("sweeps")
    if not sweeps:
        return
    if sweeps["task"] not in d["tasks"]["names"]:
        key_error("dllm.sweeps.task", f"{sweeps['task']!r} is not in dllm.tasks.names")
    for sweep, curves in sweeps["sets"].items():
        for curve, spec in curves.items():
            vary = spec.get("vary", {})
            if len(vary) != 1 or not all(isinstance(v, list) and v for v in vary.values()):
                key_error(
                    f"dllm.sweeps.sets.{sweep}.{curve}.vary", "needs exactly one option with a non-empty list of values"
                )
        for point in sweep_points(d, sweep):
            check_row(f"dllm.sweeps.sets.{sweep}.{point['curve']} ({point['key']}={point['value']})", point["row"])
