"""The experiment grid (config/experiments.yaml) under a profile: what a profile may override, and the merge."""

from pathlib import Path

import pytest
import yaml

from unie.core.options import ConfigError
from unie.config.profile import (
    GRID,
    PROFILE_ADDITIONS,
    PROFILE_CHOICES,
    PROFILE_KEYS,
    _matches,
    check_overlay,
    load_profile,
    resolve_config,
)
from unie.dllm.decoder import default_sampler as dllm_sampler
from unie.config.settings import EvaluatorSettings, LmEvalSettings, WorkflowSettings

REPO = Path(__file__).resolve().parents[1]
PROFILES = ["config.yaml", "smoke.yaml", "gpu-smoke.yaml", "paper.yaml"]


def _leaves(d, path=()):
    if isinstance(d, dict) and d:
        for k, v in d.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path


@pytest.mark.parametrize("name", PROFILES)
def test_profile_overrides_only_allowed_keys(name):
    overlay = load_profile(REPO / "config" / name)  # with its base profile's settings (gpu-smoke: smoke's)
    for path in _leaves({k: v for k, v in overlay.items() if k != "exclude"}):
        assert _matches(path, PROFILE_KEYS) or _matches(path, PROFILE_CHOICES) or _matches(path, PROFILE_ADDITIONS), (
            path
        )
    grid = yaml.safe_load(GRID.read_text())
    check_overlay(overlay, grid, name)


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_resolves_validates_and_checks(name):
    from snakemake.utils import validate

    from unie.config.checks import check_config, expand_config

    cfg = resolve_config([REPO / "config" / name])
    validate(cfg, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    expand_config(cfg)
    check_config(cfg)


def test_grid_is_shared():
    """The Table 2 runs, likelihood rows and Table 2 rows are the same object in every profile."""
    grid = yaml.safe_load(GRID.read_text())
    for name in PROFILES:
        cfg = resolve_config([REPO / "config" / name])
        assert cfg["sampling"]["runs"] == grid["sampling"]["runs"]
        assert cfg["likelihood"] == grid["likelihood"]
        assert cfg["tables"]["table2_genppl"] == grid["tables"]["table2_genppl"]
    assert resolve_config() == resolve_config([REPO / "config" / "config.yaml"])


def test_exclude_drops_grid_entries():
    paper = resolve_config([REPO / "config" / "paper.yaml"])
    assert "Data ($\\pi$, exact)" not in paper["tables"]["table1_ppl"]
    assert "exact" not in paper["figures"]["fig2_ablation"]["contexts"]
    assert "case_studies" not in paper["figures"]
    smoke = resolve_config([REPO / "config" / "smoke.yaml"])
    assert smoke["figures"]["fig3_tradeoff"]["Ks"] == [1, 2] and smoke["figures"]["fig3_tradeoff"]["ws"] == [0.2, 1.0]


@pytest.mark.parametrize(
    "overlay, key",
    [
        ({"tables": {"table1_ppl": {"MDLM": "ar"}}}, "tables.table1_ppl.MDLM"),
        ({"sampling": {"runs": {"foo": {"sampler": "ancestral"}}}}, "sampling.runs.foo.sampler"),
        ({"figures": {"fig3_tradeoff": {"K": 3}}}, "figures.fig3_tradeoff.K"),
        ({"dllm": {"energy": {"w": 0.5}}}, "dllm.energy.w"),
        ({"likelihood": {"edlm_coar": {"energy": "uni"}}}, "likelihood.edlm_coar.energy"),
    ],
)
def test_profile_changing_the_grid_is_refused(tmp_path, overlay, key):
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump({**yaml.safe_load((REPO / "config" / "smoke.yaml").read_text()), **overlay}))
    with pytest.raises(ConfigError, match=f"key '{key}' is part of the experiment grid"):
        resolve_config([f])


@pytest.mark.parametrize(
    "exclude, msg",
    [
        ({"tables": {"table1_ppl": ["Nope"]}}, "'Nope' is not in the grid"),
        ({"figures": {"fig3_tradeoff": {"Ks": [7]}}}, "7 is not in the grid's list"),
    ],
)
def test_bad_exclude_names_the_entry(tmp_path, exclude, msg):
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump({**yaml.safe_load((REPO / "config" / "smoke.yaml").read_text()), "exclude": exclude}))
    with pytest.raises(ConfigError, match=msg):
        resolve_config([f])


def test_later_files_and_cli_win(tmp_path):
    f = tmp_path / "more.yaml"
    f.write_text("sampling: {n_samples: 8}\n")
    cfg = resolve_config([REPO / "config" / "smoke.yaml", f], {"seed": 1, "resources": {"train": {"runtime": "30"}}})
    assert cfg["sampling"]["n_samples"] == 8 and cfg["sampling"]["batch_size"] == 32
    assert cfg["seed"] == 1 and cfg["resources"]["train"]["runtime"] == 30  # --config values read as YAML


def test_settings_single_home_of_defaults():
    toy, paper = resolve_config(), resolve_config([REPO / "config" / "paper.yaml"])
    assert LmEvalSettings.from_config(toy).allow_code_execution is False
    assert LmEvalSettings.from_config(paper).allow_code_execution is True
    assert LmEvalSettings.from_config(paper).task_source == "builtin"
    ev = EvaluatorSettings.from_config(paper, "llama2")
    assert (ev.max_length, ev.dtype, ev.batch_size) == (1024, "bfloat16", 8)  # issue 45: bf16 evaluators
    assert WorkflowSettings.from_config(toy).sampling_job == "table"
    assert WorkflowSettings.from_config(paper).sampling_job == "step"
    assert (WorkflowSettings.from_config(toy).dllm_eval_job, WorkflowSettings.from_config(paper).dllm_eval_job) == (
        "model",
        "row",
    )
    assert [dllm_sampler(o) for o in ({}, {"energy": "uni"}, {"sampler": "apd", "energy": "uni"})] == [
        "plain",
        "energy",
        "apd",
    ]


def test_check_config_cli_prints_resolved(capsys):
    from unie.cli import main

    assert main(["check-config", "--resolved", "--configfile", str(REPO / "config" / "smoke.yaml")]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == resolve_config([REPO / "config" / "smoke.yaml"])


def test_check_config_reads_config_overrides_as_snakemake_does(capsys):
    """``unie check-config --config KEY=VALUE`` (not read as ``--configfile``): the override resolved and checked,
    the run directory it names; a bad value or a missing ``=`` is one line."""
    from unie.cli import main

    assert main(["check-config", "--config", "seed=1", "dllm={seed: 3}"]) == 0
    assert "its run directory: runs/toy+" in capsys.readouterr().out
    assert main(["check-config", "--config", "seed=abc"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'abc' is not of type 'integer'" in err[0]
    assert main(["check-config", "--config", "seed"]) == 1
    assert capsys.readouterr().err.strip() == "unie: error: --config seed: expected KEY=VALUE (e.g. seed=1)"


# ---------------------------------------------------------------- the DLLM rows and sweeps: in the grid, once
def test_table3_rows_and_sweeps_are_written_once():
    """Table 3's rows and the sweeps' curves are in config/experiments.yaml only: a profile names no row's model,
    proxy or label (it maps the grid's model names to checkpoints, adds options, sets a curve's values, excludes)."""
    grid = yaml.safe_load(GRID.read_text())
    for f in sorted((REPO / "config").glob("*.yaml")):
        if f.name in ("experiments.yaml", "paper_values.yaml"):
            continue
        d = (yaml.safe_load(f.read_text()) or {}).get("dllm", {})
        for row in d.get("rows", {}).values():
            assert set(row) <= {"options"}, (f.name, row)
        for curves in d.get("sweeps", {}).get("sets", {}).values():
            for curve in curves.values():
                assert set(curve) <= {"vary"}, (f.name, curve)
        assert set(d.get("map", {})) <= {"items", "whole", "limit", "cap"}, f.name
    # the labels of the CoRe rows' note, say, are in the grid alone
    texts = {f.name: f.read_text() for f in (REPO / "config").glob("*.yaml")}
    assert [n for n, t in texts.items() if "CoRe has no public code" in t] == ["experiments.yaml"]
    assert len(grid["dllm"]["rows"]) == 27


def test_profiles_map_model_names_to_checkpoints():
    paper = resolve_config([REPO / "config" / "paper.yaml"])["dllm"]
    assert "checkpoints" not in paper  # resolved into the rows
    rows = paper["rows"]
    assert list(rows)[:3] == ["ar_large2", "ar_large", "proxy"]  # the appendix table's order (Llama3.1-8B first)
    assert rows["ar_large"] == {"model": "qwen25_7b", "kind": "hf_ar", "label": "Qwen2.5-7B"}
    assert rows["llada_apd"] == {
        "model": "llada_8b_instruct",
        "kind": "hf_dllm",
        "style": "llada",
        "trust_remote_code": True,
        "mask_token": "<|mdm_mask|>",
        "proxy": "qwen25_05b",
        "label": "+APD",
        "delta_to": "llada",
        "options": {"sampler": "apd"},
    }
    assert rows["llada_dawn"]["options"] == {"sampler": "dawn", "attn_layers": 4, "tau_sink": 0.01, "tau_edge": 0.07}
    assert rows["dream"]["label"] == "Dream" and "mask_token" not in rows["dream"]
    assert not any(r.get("selection_table") for r in rows.values())
    # no released checkpoint is a mask-aware proxy: the masked reading's rows are the toy world's only
    assert not any(r.get("options", {}).get("ar_context") == "masked" for r in rows.values())
    fig4 = paper["sweeps"]["sets"]["fig4"]
    assert fig4["llada"]["label"] == "LLaDA" and fig4["llada"]["vary"] == {"tokens_per_step": [1, 2, 4, 8]}
    assert fig4["fast_dllm"]["vary"] == {"threshold": [0.99, 0.9, 0.7, 0.5]}  # the grid's values
    assert all(c["model"] == "llada_8b_instruct" for s in paper["sweeps"]["sets"].values() for c in s.values())
    smoke = resolve_config([REPO / "config" / "smoke.yaml"])["dllm"]
    assert smoke["rows"]["ar_large2"] == {"model": "proxy", "label": "AR proxy (appendix only)", "appendix_only": True}
    assert (
        smoke["map"]["proxies"]["paper"] == {"model": "proxy", "label": "paper's ratio"}
        and "weak" not in smoke["map"]["proxies"]
    )
    toy = resolve_config()["dllm"]
    assert toy["rows"]["llada"] == {
        "model": "llada",
        "label": "LLaDA-like",
        "options": {"confidence": "low_confidence"},
    }
    assert toy["map"]["backbones"]["dream"]["label"] == "Dream-like"


def test_checkpoint_loading_keys_are_the_decoders():
    import dataclasses

    from unie.dllm.decoder import LOADING_KEYS
    from unie.dllm.rows import Checkpoint

    fields = [f.name for f in dataclasses.fields(Checkpoint)]
    assert fields[:2] == ["model", "label"] and fields[2:] == [
        k for k in LOADING_KEYS if k != "proxy_trust_remote_code"
    ]


def test_a_proxy_that_trusts_remote_code_reaches_the_rows(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("dllm: {checkpoints: {proxy: {trust_remote_code: true}}}\n")
    rows = resolve_config([REPO / "config" / "smoke.yaml", f])["dllm"]["rows"]
    assert rows["llada_uni"]["proxy"] == "proxy" and rows["llada_uni"]["proxy_trust_remote_code"] is True
    assert rows["proxy"]["trust_remote_code"] is True and "proxy_trust_remote_code" not in rows["proxy"]


@pytest.mark.parametrize(
    "overlay, msg",
    [
        (
            {"dllm": {"checkpoints": {"lada": {"model": "proxy"}}}},
            r"'dllm.checkpoints.lada': 'lada' is not an entry of the grid",
        ),
        (
            {"dllm": {"checkpoints": {"llada": {"modle": "proxy"}}}},
            r"dllm.checkpoints.llada'.*unknown key.*'modle'.*did you mean 'model'",
        ),
        (
            {"dllm": {"checkpoints": {"llada": {"trust_remote_code": "yes"}}}},
            r"dllm.checkpoints.llada'.trust_remote_code",
        ),
        (
            {"dllm": {"rows": {"llada_dawn": {"options": {"sampler": "core"}}}}},
            r"'dllm.rows.llada_dawn.options.sampler' is set by the experiment grid .* to 'dawn'",
        ),
        (
            {"dllm": {"rows": {"llada_dwan": {"options": {"tau_sink": 0.1}}}}},
            r"'llada_dwan' is not an entry of the grid",
        ),
        (
            {"dllm": {"rows": {"llada_dawn": {"label": "x"}}}},
            r"key 'dllm.rows.llada_dawn.label' is part of the experiment grid",
        ),
        ({"dllm": {"rows": {"llada_new": {"model": "llada", "label": "x"}}}}, r"part of the experiment grid"),
        ({"dllm": {"sweeps": {"sets": {"fig4": {"llada": {"vary": {"K": [2]}}}}}}}, r"'K' is not an entry of the grid"),
        ({"dllm": {"sweeps": {"sets": {"fig4": {"llada": {"options": {"K": 2}}}}}}}, r"part of the experiment grid"),
    ],
)
def test_profile_checkpoints_and_additions_refused(tmp_path, overlay, msg):
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(overlay))
    with pytest.raises(ConfigError, match=msg):
        resolve_config([REPO / "config" / "smoke.yaml", f])


def test_a_row_needs_a_label_and_names_no_loading_key(tmp_path):
    grid = yaml.safe_load(GRID.read_text())
    grid["dllm"]["rows"]["llada_dawn"].pop("label")
    del grid["dllm"]["checkpoints"]["llada"]["label"]
    g = tmp_path / "grid.yaml"
    g.write_text(yaml.safe_dump(grid, sort_keys=False))
    with pytest.raises(ConfigError, match=r"'dllm.rows.llada.label': no label, and model 'llada' has none"):
        resolve_config(grid=g)
    grid = yaml.safe_load(GRID.read_text())
    grid["dllm"]["rows"]["llada_dawn"]["kind"] = "hf_dllm"
    g.write_text(yaml.safe_dump(grid, sort_keys=False))
    f = tmp_path / "p.yaml"
    f.write_text("dllm: {checkpoints: {llada: {kind: unie}}}\n")
    with pytest.raises(ConfigError, match=r"'dllm.rows.llada_dawn.kind': a loading key of model 'llada'"):
        resolve_config([REPO / "config" / "smoke.yaml", f], grid=g)
