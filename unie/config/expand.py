"""The resolved config's derived facts: the sampling runs Figures 2 and 3 add, and what each model is.

:func:`add_figure_runs` adds Figures 2 and 3's generated sampling runs to ``config['sampling']['runs']`` (called by
:func:`unie.config.checks.expand_config` after the checks of the specs it expands, so that an error names the
figure's key); the other functions read the resolved config for the rules and the checks
(:mod:`unie.config.checks`): a run's step counts and sample count, which models are released or trained, where a
released checkpoint is read, a model's kind, partners and Table 1 sources.  Every answer comes from what the
registries record, not from a hand-kept table of names.  What the workflow's rules read of these answers for one config
(:class:`RuleFacts`) is computed once (:func:`rule_facts`) and remembered with the config (:mod:`unie.config.cache`):
a rerun that finds them there reads no registry, so its start-up and its DAG import no torch.
"""

from __future__ import annotations

import dataclasses
import os

from ..core.options import from_dict, key_error
from ..core.registry import METHODS, SAMPLERS


def run_n_samples(config: dict, run: str) -> int:
    return config["sampling"]["runs"][run].get("n_samples", config["sampling"]["n_samples"])


def run_steps(config: dict, run: str) -> list[int]:
    """The step counts of a sampling run: ``[L]`` for samplers that always take ``L`` steps (AR, data)."""
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
    return {
        "sampler": "energy",
        "models": models,
        "options": {
            "energy": curve["energy"],
            "K": fig["K"],
            "w": fig["w"],
            "ar_context": context,
            **_selection_option(curve["selection"]),
        },
    }


def _resolved(spec: dict):
    """A run's identity for reuse: its sampler, models and its options resolved by the sampler's options class
    (defaults filled in, so ``selection: argmin`` written out or left to its default is the same run)."""
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
            out.setdefault(context, {})[label] = (
                _same_run(own, spec) or f"fig2_{curve['energy']}_{context}{_run_suffix(curve['selection'])}"
            )
    return out


def _fig3_spec(fig: dict, K: int, w: float, energy: dict | None = None) -> dict:
    e = energy or {
        "energy": fig["energy"],
        "ar_context": fig["ar_context"],
        "proxy": fig["proxy"],
        "selection": fig.get("selection", DEFAULT_SELECTION),
    }
    return {
        "sampler": "energy",
        "models": {"dlm": fig["dlm"], "proxy": e["proxy"]},
        "options": {
            "energy": e["energy"],
            "K": K,
            "w": w,
            "ar_context": e["ar_context"],
            **_selection_option(e.get("selection", DEFAULT_SELECTION)),
        },
    }


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
        return (
            _same_run(own, spec)
            or f"fig3_{o['energy']}_k{K}_w{round(100 * w)}{_run_suffix(o.get('selection', DEFAULT_SELECTION))}"
        )

    K, w = fig["K"], fig["w"]
    return {
        "k": {k: name(k, w) for k in fig["Ks"]},
        "w": {v: name(K, v) for v in fig["ws"]},
        "tradeoff": {**fig["baselines"], fig["edlm"]["label"]: name(K, w, fig["edlm"]), fig["label"]: name(K, w)},
    }


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


def add_figure_runs(config: dict) -> None:
    """Add the sampling runs Figures 2 and 3 generate (:func:`figure_runs`) to ``config['sampling']['runs']`` in
    place, their specs checked first (:func:`unie.config.checks.expand_config`); a configured run of a generated
    name but another spec is refused."""
    for name, spec in figure_runs(config).items():
        if name in config["sampling"]["runs"] and config["sampling"]["runs"][name] != spec:
            key_error(
                f"sampling.runs.{name}",
                "this name is reserved for a run generated from figures.fig2_ablation or figures.fig3_tradeoff",
            )
        config["sampling"]["runs"][name] = spec


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


def method_options(config: dict, name: str):
    """The checked options object of model ``name`` (its method's ``Options`` dataclass)."""
    spec = config["models"][name]
    return from_dict(METHODS[spec["method"]].Options, spec.get("options", {}), f"config key 'models.{name}.options'")


def model_kind(config: dict, name: str) -> str:
    """What model ``name`` is to a sampler role: ``absorbing``, ``ar``, ``sedd``, ``duo``, ``bd3lm``, ``ebm``."""
    return METHODS[config["models"][name]["method"]].kind(method_options(config, name))


def partner_models(config: dict, name: str) -> dict[str, str]:
    """The frozen models model ``name`` trains against (NCE's proxy or DLM): role -> model name."""
    cls = METHODS[config["models"][name]["method"]]
    return {
        role: partner
        for role, (partner, _) in getattr(cls, "partners", lambda o: {})(method_options(config, name)).items()
    }


def selects_on_dev(config: dict, name: str) -> bool:
    """Whether model ``name``'s method selects its checkpoint on the dev split (``dev_metrics``)."""
    return hasattr(METHODS[config["models"][name]["method"]], "dev_metrics")


def has_likelihood(config: dict, name: str) -> bool:
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


@dataclasses.dataclass(frozen=True)
class RuleFacts:
    """What the workflow's rules read from the registries for one resolved config (:func:`rule_facts`); the rules
    read these fields and call none of the functions above that read a registry.  Treat as read-only: the rules share
    the objects."""

    run_steps: dict  # every sampling run (the figures' generated ones too) -> its step counts (:func:`run_steps`)
    likelihood_sources: dict  # Table 1's sources (:func:`likelihood_sources`)
    fig2_runs: dict  # Figure 2's run per curve (:func:`fig2_runs`)
    fig3_runs: dict  # Figure 3's run per point (:func:`fig3_runs`)
    partners: dict  # model -> its frozen partners (:func:`partner_models`)
    selects_on_dev: dict  # model -> whether it selects its checkpoint on the dev split (:func:`selects_on_dev`)


def rule_facts(config: dict) -> RuleFacts:
    """:class:`RuleFacts` of a resolved, checked config (after :func:`unie.config.checks.expand_config`)."""
    models = list(config["models"])
    return RuleFacts(
        run_steps={run: run_steps(config, run) for run in config["sampling"]["runs"]},
        likelihood_sources=likelihood_sources(config),
        fig2_runs=fig2_runs(config),
        fig3_runs=fig3_runs(config),
        partners={name: partner_models(config, name) for name in models},
        selects_on_dev={name: selects_on_dev(config, name) for name in models},
    )
