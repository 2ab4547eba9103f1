"""A Table 3 row (config ``dllm.rows``) or a sweep point (``dllm.sweeps``) as lm-eval ``model_args``
(:class:`~unie.dllm.decoder.ModelArgs`)."""

from __future__ import annotations

from pathlib import Path

from .decoder import LOADING_KEYS, default_sampler


def row_sampler(row: dict) -> str:
    """The DLLM sampler of a Table 3 row, as :func:`~unie.dllm.decoder.build_decoder` reads its ``model_args``:
    :func:`~unie.dllm.decoder.default_sampler` of the row's ``options``."""
    return default_sampler(row.get("options", {}))


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
            out.append({"name": f"{curve}__{key}_{value}", "curve": curve, "label": spec.get("label", curve),
                        "key": key, "value": value, "row": row})
    return out


# ---------------------------------------------------------------------- the proxy-strength map (beyond the paper)
def reads_proxy(options: dict) -> bool:
    """Whether an Algorithm 3 row's choices depend on its proxy.  Under ``ar_context: teacher_forced`` Inv-E's AR
    terms cancel exactly (``log p_AR(xs|xt) = A(xs) - A(xt)`` and ``log p_AR(x0|xt) - log p_AR(x0|xs) = A(xs) -
    A(xt)``, the same two numbers with opposite signs: :mod:`unie.energy.energies`), so ``inv`` with ``argmin`` or
    ``resample`` reads no proxy; every other energy, ``proxy_rerank`` and APD do (a test checks both)."""
    if default_sampler(options) != "energy":
        return True
    return not (options.get("energy") == "inv" and options.get("selection", "argmin") != "proxy_rerank"
                and options.get("ar_context", "teacher_forced") == "teacher_forced")


def draw_label(draw: dict) -> str:
    """A candidate draw of the map (``dllm.map.draws``) in words: ``τ = 0.1``, ``τ = 1, greedy first``."""
    return f"τ = {draw['temperature']:g}" + (", greedy first" if draw.get("greedy_first") else "")


def map_points(dllm: dict, backbone: str) -> list[dict]:
    """The points of the proxy-strength map for one backbone (config ``dllm.map``): first the backbone itself
    (``rule: backbone``), then per candidate draw (``dllm.map.draws``: the candidates' temperature and whether
    candidate 0 is the greedy one), per rule (``dllm.map.rules``: Algorithm 3's options) and per proxy
    (``dllm.map.proxies``, weakest first) one Algorithm 3 row, then APD per proxy (it draws its own drafts: no
    candidate draw).  A rule that reads no proxy (:func:`reads_proxy`: Inv-E) runs once per draw, with the first
    proxy, and stands for every proxy (``proxy: None``).

    Each point is ``{name, backbone, rule, label, proxy, draw, temperature, greedy_first, row}``; ``row`` is a Table 3
    row spec (model, proxy, options) for :func:`row_model_args` with ``dllm.energy``'s shared options under it."""
    m = dllm["map"]
    b = m["backbones"][backbone]
    base_opts = dict(b.get("options", {}))
    proxies = list(m["proxies"])
    shared = dict(dllm.get("energy", {}))
    none = {"draw": None, "temperature": None, "greedy_first": None}
    out = [{"name": f"{backbone}__backbone", "backbone": backbone, "rule": "backbone", "label": b.get("label", backbone),
            "proxy": None, **none, "row": {"model": b["model"], "options": base_opts}}]
    for draw in m["draws"]:
        tau, greedy = draw["temperature"], bool(draw.get("greedy_first", False))
        for rule, spec in m["rules"].items():
            options = {**base_opts, **spec.get("options", {}), "temperature": tau, "greedy_first": greedy}
            for p in (proxies if reads_proxy({**shared, **options}) else [None]):
                proxy = m["proxies"][p or proxies[0]]["model"]
                out.append({"name": f"{backbone}__{rule}__{p or 'any'}__t{tau}" + ("g" if greedy else ""),
                            "backbone": backbone, "rule": rule, "label": spec.get("label", rule), "proxy": p,
                            "draw": draw_label(draw), "temperature": tau, "greedy_first": greedy,
                            "row": {"model": b["model"], "proxy": proxy, "options": options}})
    apd = m.get("apd")
    if apd:
        for p in proxies:
            out.append({"name": f"{backbone}__apd__{p}", "backbone": backbone, "rule": "apd",
                        "label": apd.get("label", "APD"), "proxy": p, **none,
                        "row": {"model": b["model"], "proxy": m["proxies"][p]["model"],
                                "options": {**{k: v for k, v in base_opts.items() if k != "confidence"},
                                            **apd.get("options", {"sampler": "apd"})}}})
    return out


def map_proxy_points(dllm: dict) -> list[dict]:
    """The map's proxies decoded on their own (their accuracy on the map's items: the x axis of the map), one point
    per proxy that is a model of ``dllm.models`` (an oracle checkpoint is no decoder)."""
    m = dllm["map"]
    return [{"name": f"proxy__{p}", "backbone": None, "rule": "proxy_alone", "label": spec.get("label", p),
             "proxy": p, "draw": None, "temperature": None, "greedy_first": None, "row": {"model": spec["model"]}}
            for p, spec in m["proxies"].items() if spec["model"] in dllm.get("models", {})]
