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
