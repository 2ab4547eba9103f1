"""config/gpu-smoke.yaml: the whole DAG with the paper's model provenance (released checkpoints imported, only NCE
and the masked proxy fine-tuned from them), on stand-ins the workflow writes; and the `source:` config checks.

The lead runs the whole profile on a GPU (`device: cuda`); here it runs on the CPU (`--config device=cpu`), enough
of it to prove the sources path end to end (stand-ins -> import -> NCE fine-tunes from the imported MDLM -> Table 1)."""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
from snakemake_run import run_snakemake

pytest.importorskip("snakemake", reason="the workflow extra: pip install -e '.[workflow]'")
from unie.core.options import ConfigError
from unie.config.checks import check_config
from unie.config.profile import resolve_config

REPO = Path(__file__).resolve().parents[1]
GPU_SMOKE = REPO / "config" / "gpu-smoke.yaml"
PAPER = REPO / "config" / "paper.yaml"
RELEASED = ["ar", "bd3lm", "duo", "mdlm", "sedd"]
RUN = "runs/gpu-smoke+device-cpu"  # the gpu-smoke profile's run on a CPU (--config device=cpu): its own directory


def smk(*args, cwd, configfiles=(GPU_SMOKE,), config=()):
    """``snakemake ARGS --configfile FILES --config CONFIG`` (targets before the list-valued options)."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(cwd),
        *args,
        "--configfile",
        *map(str, configfiles),
        *(["--config", *config] if config else []),
    ]
    return run_snakemake(cmd[3:], cwd)  # in this process (tests/snakemake_run.py)


def job_counts(out: str) -> dict[str, int]:
    m = re.search(r"Job stats:\n(.*?)\n\n", out, re.S)
    return {
        p[0]: int(p[1])
        for line in m.group(1).splitlines()[2:]
        if len(p := line.split()) == 2 and p[1].isdigit() and p[0] != "total"
    }


def test_gpu_smoke_dry_run_all(tmp_path):
    cfg = resolve_config([GPU_SMOKE])
    assert cfg["device"] == "cuda" and cfg["data"]["source"] == "toy"
    r = smk("-n", "all", cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    jobs = job_counts(r.stdout)
    assert jobs["released_standin"] == jobs["import_released"] == 5
    assert jobs["train"] == 4  # ar_masked, edlm_nce, uni_edlm_nce (from the imports) and the toy oracle ar_long
    assert not {"download_released", "released_missing", "download_hf_model"} & set(jobs)  # nothing downloads
    assert {"table1", "table2", "table3", "fig2", "fig3", "fig4", "dllm_eval"} <= set(jobs)
    # bf16 on the GPU for every job that runs a model, the DLLM half's three trainings and its lm-eval runs included
    blocks = re.findall(r"^(?:local)?rule (\w+):\n(.*?)(?=^\[|\n\n|\Z)", r.stdout, re.S | re.M)
    runs_a_model = {"train", "ppl", "ppl_energy", "dllm_train", "dllm_eval", "timing"}
    checked = [
        (n, b) for n, b in blocks if n in runs_a_model or n.startswith(("sample_", "dllm_eval_", "dllm_sweep_eval"))
    ]
    assert {n for n, _ in checked} >= {"train", "dllm_train", "ppl"} and sum(n == "dllm_train" for n, _ in checked) == 3
    for name, block in checked:
        assert re.search(r"resources: .*\bprecision=bf16\b", block), (name, block)


@pytest.mark.slow
def test_gpu_smoke_sources_end_to_end_on_cpu(tmp_path):
    """Stand-ins in all five upstream formats -> import -> NCE fine-tunes (energy network on the released DiT,
    the DiT itself) and the masked proxy from the imported AR -> Table 1 on every row."""
    r = smk("table1", "--cores", "2", cwd=tmp_path, config=["device=cpu"])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert f"unie: run directory {RUN}/" in r.stderr
    models = tmp_path / RUN / "results" / "models"
    for name in RELEASED:
        meta = json.loads((models / name / "config.json").read_text())
        assert meta["arch"] == "dit" and meta["extra"]["released"]["standin"] and "sha256" in meta["weights"]
    assert json.loads((models / "ar" / "config.json").read_text())["extra"]["released"]["ema"]  # the .ckpt's EMA
    for name, backbone in (("edlm_nce", "energy_net"), ("uni_edlm_nce", "dit"), ("ar_masked", "dit")):
        meta = json.loads((models / name / "config.json").read_text())
        assert meta["arch"] == "dit" and meta["backbone"] == backbone, name
    assert (
        f"initialised from {RUN}/results/models/mdlm"
        in (tmp_path / RUN / "logs" / "train" / "edlm_nce.log").read_text()
    )
    t1 = pd.read_csv(tmp_path / RUN / "results" / "tables" / "table1_ppl.csv")
    scored = t1.dropna(subset=["ppl"])
    assert set(RELEASED) | {"edlm_nce", "uni_edlm_nce"} <= set(scored["source"])
    assert (scored["ppl"] > 1).all()
    r = smk("-n", f"{RUN}/results/tables/table1_ppl.csv", cwd=tmp_path, config=["device=cpu"])  # cached: nothing to do
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr


def test_missing_google_drive_file_is_one_line(tmp_path):
    text = GPU_SMOKE.read_text()
    standin = "source: {kind: ar, standin: ckpt, n_heads: 4}"
    assert standin in text
    profile = tmp_path / "by_hand.yaml"  # the AR placed by hand, as in the paper profile
    assert "base: smoke.yaml" in text  # an overlay of the smoke profile: named by its path from here
    profile.write_text(
        text.replace(
            standin,
            "source: {kind: ar, path: resources/released/ar.ckpt, tokenizer_info: "
            "{vocab_size: 201, mask_id: 200, bos_id: 199, eos_id: 198}}",
        ).replace("base: smoke.yaml", f"base: {GPU_SMOKE.parent / 'smoke.yaml'}")
    )
    from unie.config.rundir import run_directory

    run = run_directory([profile], {"device": "cpu"})  # another run than the profile's own: its own directory
    assert run.startswith("runs/gpu-smoke+")
    r = smk(
        f"{run}/results/models/ar/config.json",
        "--cores",
        "1",
        cwd=tmp_path,
        configfiles=(profile,),
        config=["device=cpu"],
    )
    assert r.returncode != 0
    line = next(x for x in r.stderr.splitlines() if x.startswith("unie: error:"))
    assert "resources/released/ar.ckpt is missing" in line and "MDLM's Google Drive" in line and "place it at" in line


def _with(cfg: dict, name: str, **changes) -> dict:
    cfg = copy.deepcopy(cfg)
    for key, value in changes.items():
        if value is None:
            cfg["models"][name].pop(key, None)
        else:
            cfg["models"][name][key] = value
    return cfg


@pytest.mark.parametrize(
    "name, changes, message",
    [
        ("mdlm", {"source": {"kind": "mdlm", "standin": "hf"}}, "trust_remote_code"),
        ("mdlm", {"source": {"kind": "sedd", "standin": "ckpt"}}, "is a 'sedd' model"),
        ("ar", {"source": {"kind": "ar", "standin": "hf"}}, "written as ckpt"),
        ("mdlm", {"train": {"steps": 1, "batch_size": 1, "lr": 1e-3}}, "imported, not trained"),
        ("edlm_nce", {"arch": {"d_model": 64, "n_layers": 1, "n_heads": 2}}, "fine-tuned from the released"),
        ("mdlm", {"source": {"kind": "mdlm", "path": "x", "hf_id": "y", "trust_remote_code": True}}, "exactly one of"),
        (
            "mdlm",
            {"source": {"kind": "mdlm", "path": "resources/released/mdlm", "trust_remote_code": True}},
            "reads GPT-2 + the appended mask",
        ),  # a real release on the toy tokenizer
    ],
)
def test_source_config_errors_before_any_job(name, changes, message):
    cfg = _with(resolve_config([GPU_SMOKE]), name, **changes)
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_config(cfg)


def test_paper_profile_sources():
    cfg = resolve_config([PAPER])
    check_config(cfg)
    sources = {n: s["source"] for n, s in cfg["models"].items() if s.get("source")}
    assert sorted(sources) == RELEASED
    assert sources["mdlm"] == {"kind": "mdlm", "hf_id": "kuleshov-group/mdlm-owt", "trust_remote_code": True}
    assert sources["ar"]["path"].endswith("ar.ckpt") and sources["sedd"]["path"].endswith("sedd.ckpt")
    for name in ("edlm_nce", "uni_edlm_nce"):
        assert cfg["models"][name]["init_from"] == "mdlm" and "arch" not in cfg["models"][name]
    with pytest.raises(ConfigError, match="trust_remote_code"):
        check_config(_with(cfg, "bd3lm", source={"kind": "bd3lm", "hf_id": "kuleshov-group/bd3lm-owt-block_size4"}))
