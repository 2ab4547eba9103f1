"""The experiment grid (config/experiments.yaml) under a profile: what a profile may override, and the merge."""

from pathlib import Path

import pytest
import yaml

from unie.core.config import ConfigError
from unie.pipeline.profile import GRID, PROFILE_CHOICES, PROFILE_KEYS, _matches, check_overlay, resolve_config
from unie.dllm.decoder import default_sampler as dllm_sampler
from unie.pipeline.settings import EvaluatorSettings, LmEvalSettings, WorkflowSettings

REPO = Path(__file__).resolve().parents[1]
PROFILES = ["config.yaml", "smoke.yaml", "paper.yaml"]


def _leaves(d, path=()):
    if isinstance(d, dict) and d:
        for k, v in d.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path


@pytest.mark.parametrize("name", PROFILES)
def test_profile_overrides_only_allowed_keys(name):
    overlay = yaml.safe_load((REPO / "config" / name).read_text())
    for path in _leaves({k: v for k, v in overlay.items() if k != "exclude"}):
        assert _matches(path, PROFILE_KEYS) or _matches(path, PROFILE_CHOICES), path
    grid = yaml.safe_load(GRID.read_text())
    check_overlay(overlay, grid, name)


@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_resolves_validates_and_checks(name):
    from snakemake.utils import validate

    from unie.pipeline.checks import check_config, expand_config

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


@pytest.mark.parametrize("overlay, key", [
    ({"tables": {"table1_ppl": {"MDLM": "ar"}}}, "tables.table1_ppl.MDLM"),
    ({"sampling": {"runs": {"foo": {"sampler": "ancestral"}}}}, "sampling.runs.foo.sampler"),
    ({"figures": {"fig3_tradeoff": {"K": 3}}}, "figures.fig3_tradeoff.K"),
    ({"dllm": {"energy": {"w": 0.5}}}, "dllm.energy.w"),
    ({"likelihood": {"edlm_coar": {"energy": "uni"}}}, "likelihood.edlm_coar.energy"),
])
def test_profile_changing_the_grid_is_refused(tmp_path, overlay, key):
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump({**yaml.safe_load((REPO / "config" / "smoke.yaml").read_text()), **overlay}))
    with pytest.raises(ConfigError, match=f"key '{key}' is part of the experiment grid"):
        resolve_config([f])


@pytest.mark.parametrize("exclude, msg", [
    ({"tables": {"table1_ppl": ["Nope"]}}, "'Nope' is not in the grid"),
    ({"figures": {"fig3_tradeoff": {"Ks": [7]}}}, "7 is not in the grid's list"),
])
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
    assert (ev.max_length, ev.dtype, ev.batch_size) == (1024, "float32", 8)
    assert WorkflowSettings.from_config(toy).sampling_job == "table"
    assert WorkflowSettings.from_config(paper).sampling_job == "step"
    assert (WorkflowSettings.from_config(toy).dllm_eval_job, WorkflowSettings.from_config(paper).dllm_eval_job) == \
        ("model", "row")
    assert [dllm_sampler(o) for o in ({}, {"energy": "uni"}, {"sampler": "apd", "energy": "uni"})] == \
        ["plain", "energy", "apd"]


def test_check_config_cli_prints_resolved(capsys):
    from unie.cli import main

    assert main(["check-config", "--resolved", "--configfile", str(REPO / "config" / "smoke.yaml")]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == resolve_config([REPO / "config" / "smoke.yaml"])
