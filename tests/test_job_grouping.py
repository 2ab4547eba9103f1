"""Job grouping switches (`sampling.job`, `dllm.eval_job`): the same files whichever jobs make them, and the
grouping of Table 3's rows by backbone model."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from snakemake_run import run_snakemake

from unie.dllm.rows import eval_groups

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "config" / "smoke.yaml"


def test_eval_groups_by_model_backbone_first():
    rows = {
        "e1": {"model": "m", "delta_to": "b"},
        "b": {"model": "m"},
        "ar": {"model": "ar"},
        "e2": {"model": "m", "delta_to": "b"},
        "hf": {"model": "GSAI-ML/LLaDA-8B", "delta_to": "b"},
    }
    groups = eval_groups(rows)
    assert groups == {"m": ["b", "e1", "e2"], "ar": ["ar"], "GSAI_ML_LLaDA_8B": ["hf"]}
    assert sorted(r for g in groups.values() for r in g) == sorted(rows)  # every row exactly once


def _planned(tmp_path, *config) -> tuple[dict[str, int], set[str]]:
    """A dry run of the smoke profile: {rule: jobs} and every output file the jobs would write."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(tmp_path),
        "-n",
        "--cores",
        "2",
        "--configfile",
        str(SMOKE),
        *(["--config", *config] if config else []),
    ]
    r = run_snakemake(cmd[3:], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout + r.stderr
    rules = {}
    for m in re.finditer(r"^(?:local)?rule (\w+):", out, re.M):
        rules[m.group(1)] = rules.get(m.group(1), 0) + 1
    files = {f.strip() for m in re.finditer(r"^\s+output: (.*)$", out, re.M) for f in m.group(1).split(",")}
    return rules, files


@pytest.mark.slow
def test_grouped_jobs_write_the_files_of_one_job_per_row_and_run(tmp_path):
    """The smoke profile (as the default: one job per table/figure and per backbone model) plans exactly the files
    of one job per (run, step count), per Table 3 row and per sweep (the paper profile's jobs), in fewer jobs."""
    grouped, files = _planned(tmp_path / "a")
    single, files_single = _planned(tmp_path / "b", "sampling={'job': 'step'}", "dllm={'eval_job': 'row'}")
    assert files == files_single and files
    assert {"sample_table2", "sample_fig2", "sample_fig3", "timing_fig3"} <= set(grouped)
    assert {r for r in grouped if r.startswith("dllm_eval_")} and "dllm_eval" not in grouped
    assert {"sample", "timing", "dllm_eval"} <= set(single) and not set(single) & {"sample_table2", "timing_fig3"}
    # a sweep is two jobs either way: its lm-eval runs beside other jobs, then its timing, which holds every core
    assert grouped["dllm_sweep_eval"] == grouped["dllm_sweep"] == single["dllm_sweep_eval"] == single["dllm_sweep"] == 3
    assert sum(grouped.values()) < sum(single.values())
