"""A Table 3 row (config ``dllm.rows``) or a sweep point (``dllm.sweeps``) as lm-eval ``model_args``
(:class:`~unie.dllm.decoder.ModelArgs`), and the profile's checkpoints written into the grid's rows
(:func:`resolve_checkpoints`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core.options import ConfigError, from_dict
from ..core.registry import DLLM_SAMPLERS

# how a row's model (and proxy) is loaded: copied from a Table 3 row into its model_args (:mod:`unie.dllm.decoder`
# reads them; they are here, with :func:`default_sampler`, so that resolving a profile imports no network code)
LOADING_KEYS = ("kind", "style", "trust_remote_code", "mask_token", "proxy_trust_remote_code", "attn_implementation")


def default_sampler(options=None) -> str:
    """The DLLM sampler that ``options`` name, decided here only: for a mapping (model_args, or a row's ``options``)
    its ``sampler``, else ``energy`` (Algorithm 3) when an ``energy`` is given, else ``plain`` (the backbone's own
    decoder); for a sampler's options object, the sampler whose options class it is; for none, ``plain``."""
    if options is None:
        return "plain"
    if isinstance(options, Mapping):
        return str(options.get("sampler", "energy" if "energy" in options else "plain"))
    owners = [name for name, entry in DLLM_SAMPLERS.items() if type(options) is entry.options_cls]
    if len(owners) != 1:
        raise ConfigError(f"{type(options).__name__} is the options class of no single DLLM sampler: give sampler=")
    return owners[0]


# the map proxy whose `model` names the oracle checkpoint written by rule dllm_oracle (not a model of dllm.models)
MAP_ORACLE = "oracle"


@dataclass(frozen=True)
class Checkpoint:
    """What a model name of the experiment grid's DLLM rows, sweeps and map stands for in a profile (config
    ``dllm.checkpoints.<name>``; the grid gives the label, a profile the rest).  ``None``: not set (a loading key
    left out of the rows, the model its own name)."""

    model: str | None = None  # a dllm.models or hf_models name (None: the grid's name itself)
    label: str | None = None  # the label of a row, curve or map backbone that gives none
    # the loading keys (LOADING_KEYS but the proxy's: a proxy's trust_remote_code reaches a row as
    # proxy_trust_remote_code); the schema's row keys and check_dllm check their values
    kind: str | None = None
    style: str | None = None
    trust_remote_code: bool | None = None
    mask_token: str | None = None
    attn_implementation: str | None = None

    def loading(self) -> dict:
        """The loading keys set, in :data:`LOADING_KEYS`'s order."""
        return {k: getattr(self, k) for k in LOADING_KEYS if getattr(self, k, None) is not None}


def resolve_checkpoints(dllm: dict) -> None:
    """The DLLM half's model names replaced by the profile's checkpoints (``dllm.checkpoints``: name ->
    :class:`Checkpoint`), in place, and ``dllm.checkpoints`` removed: the rows and sweep curves get the checkpoint's
    ``model`` and loading keys, their ``proxy`` its ``model`` (and ``proxy_trust_remote_code`` when the proxy's
    checkpoint trusts remote code), the map's backbones and proxies its ``model``; a row, curve or map backbone
    without a ``label`` gets its model's.  A row is then written as ``model``, the loading keys, ``proxy``, ``label``
    and its other keys in the grid's order (a profile's rows read as when each profile wrote its own)."""
    names = dllm.pop("checkpoints", None) or {}
    checkpoints = {
        name: from_dict(Checkpoint, spec, f"config key 'dllm.checkpoints.{name}'") for name, spec in names.items()
    }

    def resolve(where: str, spec: dict, loading: bool = True) -> dict:
        model = checkpoints.get(spec["model"], Checkpoint())
        out = {"model": model.model or spec["model"], **(model.loading() if loading else {})}
        if spec.get("proxy"):
            proxy = checkpoints.get(spec["proxy"], Checkpoint())
            out["proxy"] = proxy.model or spec["proxy"]
            if proxy.trust_remote_code:
                out["proxy_trust_remote_code"] = True
        clash = sorted((set(out) & set(spec)) - {"model", "proxy"})
        if clash:
            raise ConfigError(
                f"config key '{where}.{clash[0]}': a loading key of model {spec['model']!r}'s checkpoint "
                f"(dllm.checkpoints.{spec['model']}), not of a row"
            )
        label = spec.get("label", model.label)
        if label is None:
            raise ConfigError(
                f"config key '{where}.label': no label, and model {spec['model']!r} has none "
                f"(dllm.checkpoints.{spec['model']}.label)"
            )
        out["label"] = label
        out.update({k: v for k, v in spec.items() if k not in out})
        return out

    for name, row in list(dllm.get("rows", {}).items()):
        dllm["rows"][name] = resolve(f"dllm.rows.{name}", row)
    for sweep, curves in dllm.get("sweeps", {}).get("sets", {}).items():
        for curve, spec in list(curves.items()):
            curves[curve] = resolve(f"dllm.sweeps.sets.{sweep}.{curve}", spec)
    m = dllm.get("map") or {}
    for b, spec in list(m.get("backbones", {}).items()):
        m["backbones"][b] = resolve(f"dllm.map.backbones.{b}", spec, loading=False)  # trained models only (check_map)
    for p, spec in m.get("proxies", {}).items():
        spec["model"] = checkpoints.get(spec["model"], Checkpoint()).model or spec["model"]


def row_sampler(row: dict) -> str:
    """The DLLM sampler of a Table 3 row, as :func:`~unie.dllm.decoder.build_decoder` reads its ``model_args``:
    :func:`default_sampler` of the row's ``options``."""
    return default_sampler(row.get("options", {}))


def room_rows(rows: dict) -> dict[str, list[str]]:
    """Per backbone row, the Algorithm 3 rows compared with it (``delta_to``; Table 3's, the selection table's, the
    appendix's): the rows whose room one candidate tree measures (rule ``dllm_room_{backbone}``)."""
    out: dict[str, list[str]] = {}
    for name, row in rows.items():
        if row.get("delta_to") and row_sampler(row) == "energy":
            out.setdefault(row["delta_to"], []).append(name)
    return out


def selection_rows(dllm: dict) -> dict[str, dict]:
    """The selection-rule table's rows (``dllm.rows`` marked ``selection_table``), per backbone: the backbone, then
    its Algorithm 3 rows by energy (ind, inv, uni) and selection rule (argmin, resample), ``proxy_rerank`` last.
    ``{row name: row}`` in that order."""
    from ..energy.names import SELECTIONS

    rows = dllm.get("rows", {})
    shared = dllm.get("energy", {})

    def key(name):
        o = {**shared, **rows[name].get("options", {})}
        if "energy" not in o or "selection" not in o:  # Algorithm 3's defaults (torch), for a row leaving one out
            from .energy_decoding import DLLMEnergyOptions

            o = {"energy": DLLMEnergyOptions.energy, "selection": DLLMEnergyOptions.selection, **o}
        return (
            o["selection"] == "proxy_rerank",
            ("ind", "inv", "uni").index(o["energy"]),
            SELECTIONS.index(o["selection"]),
        )

    out = {}
    for base in dict.fromkeys(r["delta_to"] for r in rows.values() if r.get("selection_table")):
        energy_rows = [n for n, r in rows.items() if r.get("delta_to") == base and row_sampler(r) == "energy"]
        out[base] = rows[base]
        out.update({n: rows[n] for n in sorted(energy_rows, key=key)})
    return out


def eval_groups(rows: dict) -> dict[str, list[str]]:
    """Table 3's rows (config ``dllm.rows``) as the jobs of ``dllm.eval_job: model``: one group per backbone (a
    row's ``model``, named by it with every non-identifier character made ``_``), its rows in config order except
    that a row's ``delta_to`` comes before it when both are in the group (its effect compares with that row's
    completions).  Every row is in exactly one group."""
    import re

    groups: dict[str, list[str]] = {}
    for name, row in rows.items():
        groups.setdefault(re.sub(r"\W", "_", str(row["model"])), []).append(name)
    out = {}
    for group, names in groups.items():
        ordered: list[str] = []

        def place(n, seen=()):
            if n in ordered:
                return
            base = rows[n].get("delta_to")
            if base in names and base not in seen:
                place(base, (*seen, n))
            ordered.append(n)

        for n in names:
            place(n)
        out[group] = ordered
    return out


def row_model_args(name: str, row: dict, dllm: dict, inputs: dict, device: str, precision: str = "fp32") -> dict:
    """lm-eval ``model_args`` of a Table 3 row (config ``dllm.rows``): the model (and proxy) directories from
    the rule's inputs, the shared decoding options, the shared energy options (``dllm.energy``) for an
    Algorithm 3 row (:func:`row_sampler`), then the row's own ``options`` (``sampler`` and its options).
    ``precision`` (the job's, :func:`unie.pipeline.rule.job_precision`) is added when it is not ``fp32`` (the
    model_args of an fp32 row are those of before the option)."""

    def directory(path):
        p = Path(path)
        return str(p.parent if p.suffix else p)

    args = {"pretrained": directory(inputs["model"]), "name": name, "device": device}
    if precision != "fp32":
        args["precision"] = precision
    for key in LOADING_KEYS:
        if key in row:
            args[key] = row[key]
    args.update(dllm.get("decoding", {}))  # an AR row's decoder reads only gen_length
    if row.get("proxy"):
        args["proxy"] = directory(inputs["proxy"])
    if row_sampler(row) == "energy":
        args.update(dllm.get("energy", {}))  # Algorithm 3's shared options (dllm.energy)
    args.update(row.get("options", {}))
    return args


def sweep_points(dllm: dict, sweep: str) -> list[dict]:
    """The points of sweep ``sweep`` (config ``dllm.sweeps.sets``): per curve, per value of its one varied
    option, ``{name, curve, label, key, value, row}`` where ``row`` is the curve's row spec (a Table 3 row: model,
    proxy, options) with ``options[key] = value``.  ``name`` = ``{curve}__{key}_{value}`` is the point's
    directory under ``results/dllm/sweeps/{sweep}/``."""
    out = []
    for curve, spec in dllm["sweeps"]["sets"][sweep].items():
        base = {k: v for k, v in spec.items() if k != "vary"}
        ((key, values),) = spec["vary"].items()
        for value in values:
            row = {**base, "options": {**base.get("options", {}), key: value}}
            out.append(
                {
                    "name": f"{curve}__{key}_{value}",
                    "curve": curve,
                    "label": spec.get("label", curve),
                    "key": key,
                    "value": value,
                    "row": row,
                }
            )
    return out


# ---------------------------------------------------------------------- the proxy-strength map (beyond the paper)
def reads_proxy(options: dict) -> bool:
    """Whether an Algorithm 3 row's choices depend on its proxy.  Under ``ar_context: teacher_forced`` Inv-E's AR
    terms cancel exactly (``log p_AR(xs|xt) = A(xs) - A(xt)`` and ``log p_AR(x0|xt) - log p_AR(x0|xs) = A(xs) -
    A(xt)``, the same two numbers with opposite signs: :mod:`unie.energy.energies`), so ``inv`` with ``argmin`` or
    ``resample`` reads no proxy; every other energy, ``proxy_rerank`` and APD do (a test checks both)."""
    if default_sampler(options) != "energy":
        return True
    return not (
        options.get("energy") == "inv"
        and options.get("selection", "argmin") != "proxy_rerank"
        and options.get("ar_context", "teacher_forced") == "teacher_forced"
    )


def draw_label(draw: dict) -> str:
    """A candidate draw of the map (``dllm.map.draws``) in words: ``τ = 0.1``, ``τ = 1, greedy first``."""
    return f"τ = {draw['temperature']:g}" + (", greedy first" if draw.get("greedy_first") else "")


def map_tree_grid(dllm: dict) -> dict[str, tuple[dict, float]]:
    """The candidate trees of one map backbone (config ``dllm.map``), each a job of its own: name -> ``(draw, w)``,
    every candidate draw with every window (``dllm.map.windows``, else the energy's ``w``), in the map's order.  A
    name reads as its draw and window: ``T0.1_w0.2``, ``T1-greedy_w1``."""
    m = dllm["map"]
    windows = m.get("windows") or [dllm.get("energy", {}).get("w", 0.2)]
    out = {}
    for draw in m["draws"]:
        for w in windows:
            name = f"T{draw['temperature']:g}" + ("-greedy" if draw.get("greedy_first") else "") + f"_w{w:g}"
            out[name] = (dict(draw), w)
    return out


def map_points(dllm: dict, backbone: str) -> list[dict]:
    """The lm-eval points of the map for one backbone (config ``dllm.map``): the backbone itself (``rule:
    backbone``: its own decode of the map's items, the requests every candidate tree starts from), then APD per proxy
    (it draws its own drafts: no window, no candidate draw).  Algorithm 3's rules are read off the candidate trees
    (:mod:`unie.pipeline.map_runs`), not decoded one lm-eval run each.

    Each point is ``{name, backbone, rule, label, proxy, draw, temperature, greedy_first, row}``; ``row`` is a Table 3
    row spec (model, proxy, options) for :func:`row_model_args`."""
    m = dllm["map"]
    b = m["backbones"][backbone]
    base_opts = dict(b.get("options", {}))
    none = {"draw": None, "temperature": None, "greedy_first": None}
    out = [
        {
            "name": f"{backbone}__backbone",
            "backbone": backbone,
            "rule": "backbone",
            "label": b.get("label", backbone),
            "proxy": None,
            **none,
            "row": {"model": b["model"], "options": base_opts},
        }
    ]
    apd = m.get("apd")
    if apd:
        for p in m["proxies"]:
            out.append(
                {
                    "name": f"{backbone}__apd__{p}",
                    "backbone": backbone,
                    "rule": "apd",
                    "label": apd.get("label", "APD"),
                    "proxy": p,
                    **none,
                    "row": {
                        "model": b["model"],
                        "proxy": m["proxies"][p]["model"],
                        "options": {
                            **{k: v for k, v in base_opts.items() if k != "confidence"},
                            **apd.get("options", {"sampler": "apd"}),
                        },
                    },
                }
            )
    return out


def map_proxy_points(dllm: dict) -> list[dict]:
    """The map's proxies decoded on their own (their accuracy on the map's items: the x axis of the map), one point
    per proxy that is a model of ``dllm.models`` (an oracle checkpoint is no decoder)."""
    m = dllm["map"]
    return [
        {
            "name": f"proxy__{p}",
            "backbone": None,
            "rule": "proxy_alone",
            "label": spec.get("label", p),
            "proxy": p,
            "draw": None,
            "temperature": None,
            "greedy_first": None,
            "row": {"model": spec["model"]},
        }
        for p, spec in m["proxies"].items()
        if spec["model"] in dllm.get("models", {})
    ]
