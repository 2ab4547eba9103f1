"""The DLLM half's job plan (unie.config.dllm_plan, read by workflow/rules/dllm.smk and dllm_map.smk): the files and
parameters of its rules on the smoke, default and paper profiles, as the rules' own helpers computed them before
they moved into the package (the dry-run plans of the three profiles were compared job by job then)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from unie.config.dllm_plan import EVAL_KEYS, ORACLE, DllmPlan
from unie.config.validate import workflow_config

REPO = Path(__file__).resolve().parents[1]
RUN = "runs/x"
TOY_TASKS = ["toy_math", "toy_gsm8k", "toy_mbpp", "toy_lcb", "toy_livebench", "toy_mmlu", "toy_hellaswag"]
YAMLS = [f"{RUN}/resources/dllm/tasks/{t}.yaml" for t in TOY_TASKS]


def _config(profile: str) -> dict:
    return workflow_config([REPO / "config" / profile], grid=REPO / "config" / "experiments.yaml")


@pytest.fixture(scope="module")
def smoke_config():
    return _config("smoke.yaml")


@pytest.fixture(scope="module")
def smoke(smoke_config):
    return DllmPlan(smoke_config, RUN)


@pytest.fixture(scope="module")
def default():
    return DllmPlan(_config("config.yaml"), RUN)


def _paths(value):
    return [value] if isinstance(value, str) else list(value)


def test_a_row_reads_the_tasks_its_model_proxy_and_backbone_results(default):
    assert default.row_inputs("dream_uni") == {
        "tasks": YAMLS,
        "model": f"{RUN}/results/dllm/models/dream/model.safetensors",
        "proxy": f"{RUN}/results/dllm/models/proxy/model.safetensors",
        "base": f"{RUN}/results/dllm/rows/dream/results.json",
    }
    assert default.row_inputs("dream") == {
        "tasks": YAMLS,
        "model": f"{RUN}/results/dllm/models/dream/model.safetensors",
    }


def test_one_eval_job_per_backbone_reads_its_rows_files_less_its_own_results(smoke):
    assert smoke.eval_groups == {
        "proxy": ["ar_large2", "proxy"],
        "llada": ["llada", "llada_dawn", "llada_core", "llada_uni", "llada_rerank"],
        "dream": ["dream", "dream_apd", "dream_ind", "dream_uni_masked"],
    }
    assert smoke.row_jobs == []  # dllm.eval_job: model, every row in its backbone's job
    inputs = smoke.group_inputs(smoke.eval_groups["dream"])  # rule dllm_eval_dream
    assert list(inputs) == [
        f"{row}_{k}"
        for row, keys in [
            ("dream", ["tasks", "model"]),
            ("dream_apd", ["tasks", "model", "proxy"]),
            ("dream_ind", ["tasks", "model", "proxy"]),
            ("dream_uni_masked", ["tasks", "model", "proxy"]),
        ]
        for k in keys
    ]  # no `base`: the backbone row is written by the same job
    assert inputs["dream_apd_tasks"] == YAMLS
    assert inputs["dream_uni_masked_proxy"] == f"{RUN}/results/dllm/models/proxy_masked/model.safetensors"
    assert smoke.row_outputs(["dream", "dream_apd"], "effect") == [
        f"{RUN}/results/dllm/rows/dream/effect.json",
        f"{RUN}/results/dllm/rows/dream_apd/effect.json",
    ]


def test_eval_params_carry_each_rows_spec_and_files_and_only_the_shared_keys(smoke, smoke_config):
    rows = smoke.eval_groups["dream"]
    params = smoke.eval_params(rows)
    assert list(params) == ["rows", "inputs", "dllm"]
    assert params["rows"] == {r: smoke_config["dllm"]["rows"][r] for r in rows}
    assert params["inputs"]["dream_apd"]["base"] == f"{RUN}/results/dllm/rows/dream/results.json"  # as rule dllm_eval
    assert params["inputs"] == {r: smoke.row_inputs(r) for r in rows}
    assert list(params["dllm"]) == list(EVAL_KEYS) and params["dllm"]["tasks"]["names"] == TOY_TASKS


def test_one_job_per_row_when_eval_job_is_row(smoke_config):
    cfg = copy.deepcopy(smoke_config)
    cfg["dllm"]["eval_job"] = "row"
    plan = DllmPlan(cfg, RUN)
    assert plan.eval_groups == {} and plan.row_jobs == list(cfg["dllm"]["rows"])
    assert plan.sweeps == DllmPlan(smoke_config, RUN).sweeps  # two jobs per sweep either way


def test_sweeps_read_each_curves_model_and_proxy_and_the_sweep_keys(smoke, default):
    assert smoke.sweeps == ["fig4", "app_k", "app_w"]
    assert {s: list(default.sweep_inputs(s)) for s in default.sweeps} == {
        "fig4": ["tasks", "llada_model", "apd_model", "apd_proxy", "uni_model", "uni_proxy", "fast_dllm_model"],
        "app_k": ["tasks", "uni_model", "uni_proxy"],
        "app_w": ["tasks", "uni_model", "uni_proxy"],
    }
    assert default.sweep_inputs("app_k")["uni_proxy"] == f"{RUN}/results/dllm/models/proxy/model.safetensors"
    dllm = default.sweep_params("app_k")  # rule dllm_sweep_eval's: its lm-eval runs
    assert list(dllm) == [
        "tasks",
        "decoding",
        "energy",
        "batch_size",
        "include_default_tasks",
        "limit",
        "seed",
        "sweeps",
    ]
    assert "average" not in dllm["tasks"]  # which columns Table 3 averages does not rerun a sweep
    # a sweep's jobs read only its own set: another sweep's settings rerun nothing of it
    sweeps = default.dllm["sweeps"]
    assert dllm["sweeps"] == {**sweeps, "sets": {"app_k": sweeps["sets"]["app_k"]}}
    timed = default.sweep_params("app_k", timed=True)  # rule dllm_sweep's: the timing's settings too
    assert list(timed) == [*dllm, "timing"] and {k: timed[k] for k in dllm} == dllm
    assert default.sweep_file("fig4") == f"{RUN}/results/dllm/sweeps/fig4/points.json"


def test_a_sweep_caption_says_what_is_fixed_and_what_varies(default):
    assert default.sweep_caption("app_k") == (
        "toy_math: +Uni-Energy on llada (w=0.2, ar_context=teacher_forced, selection=argmin, temperature=0.1, "
        "greedy_first=False, energy=uni), K varied. Accuracy $\\pm$ its s.e. (lm-eval), throughput in generated "
        "tokens/s (batch 64, warm-up and loading excluded)."
    )


def test_a_model_starts_from_a_dllm_half_model_a_dlm_half_model_or_nothing(default):
    assert default.init_inputs("dream") == {"init": f"{RUN}/results/dllm/models/ar_large/model.safetensors"}
    assert default.init_inputs("llada") == {
        "init": f"{RUN}/results/models/mdlm/model.safetensors",
        "init_tokenizer": f"{RUN}/resources/tokenizer",
    }
    assert default.init_inputs("proxy_weak") == {}


def test_tables_read_their_rows_results_effects_and_rooms(default, smoke):
    t3 = default.table_inputs(default.table3_rows)
    assert len(t3["results"]) == len(default.table3_rows) == 15
    assert len(t3["effects"]) == sum(1 for r in default.table3_rows.values() if r.get("delta_to")) == 11
    assert t3["rooms"] == [f"{RUN}/results/dllm/room/llada.json", f"{RUN}/results/dllm/room/dream.json"]
    assert "ar_large2" in default.full_rows and "ar_large2" not in default.table3_rows  # appendix only
    assert not set(default.full_rows) & {"llada_rerank", "dream_rerank"}  # the selection table's
    assert list(smoke.selection_rows) == ["llada", "llada_uni", "llada_rerank"]
    assert smoke.room_files({"proxy": {}}) == []  # no backbone of a room among the rows


def test_a_room_job_reads_its_rows_files_and_results(smoke):
    assert smoke.room == {"llada": ["llada_uni", "llada_rerank"], "dream": ["dream_ind", "dream_uni_masked"]}
    inputs = smoke.room_inputs("llada")
    assert not any(k.endswith("_base") for k in inputs)
    assert inputs["llada_rerank_results"] == f"{RUN}/results/dllm/rows/llada_rerank/results.json"
    params = smoke.room_params("llada")
    assert params["backbone"] == "llada" and list(params["rows"]) == ["llada_uni", "llada_rerank"]
    assert params["inputs"]["llada_uni"]["base"] == f"{RUN}/results/dllm/rows/llada/results.json"


def test_a_map_job_reads_the_backbone_every_proxy_and_the_oracle(default):
    assert default.map_jobs == ["llada", "dream", "proxies"]
    inputs = default.map_inputs("dream")
    # the map's own tasks (rule dllm_map_tasks: more items than Table 3's, Table 3's first), its averaged ones
    assert inputs["tasks"] == [f"{RUN}/resources/dllm/map_tasks/{t}.yaml" for t in default.map["tasks"]]
    assert default.map["tasks"] == default.dllm["tasks"]["average"]
    assert default.map_task_params() == {"names": default.map["tasks"], "n_test": 720, "seed": 0}
    assert 720 > default.dllm["tasks"]["n_test"] >= default.map["whole"]
    assert list(inputs)[1:] == ["model_dream", "model_proxy_weak", "model_proxy", "model_ar_large", f"model_{ORACLE}"]
    assert inputs["model_oracle"] == f"{RUN}/resources/dllm/oracle/oracle.json"
    assert ORACLE not in default.map_models("proxies")  # the ARs decoded alone
    assert default.map_params("proxies")["models"] == {
        m: f"{RUN}/results/dllm/models/{m}" for m in ["proxy_weak", "proxy", "ar_large"]
    }
    assert (
        default.map_file("proxies")
        == default.map_points_file("proxies")
        == f"{RUN}/results/dllm/map/proxies/points.json"
    )
    # a backbone's map: its lm-eval points, then each candidate tree (draw x window) a job, merged into points.json
    assert default.map_backbones == ["llada", "dream"]
    assert default.map_points_file("dream") == f"{RUN}/results/dllm/map/dream/lmeval.json"
    assert default.map_tree_names == [f"{t}_w{w}" for t in ("T0.1", "T1", "T1-greedy") for w in ("0.2", "0.5", "1")]
    assert default.map_tree_files("dream")[-1] == f"{RUN}/results/dllm/map/dream/trees/T1-greedy_w1.json"


def test_the_paper_profile_reads_lm_evals_record_local_tasks_and_hugging_face_checkpoints():
    plan = DllmPlan(_config("paper.yaml"), RUN, "resources/prefetch/lmeval_tasks.json")
    assert plan.eval_groups == {} and not plan.toy_tasks
    inputs = plan.row_inputs("dream_uni")
    assert inputs["lmeval_tasks"] == f"{RUN}/resources/prefetch/lmeval_tasks.json" and "tasks" not in inputs
    assert inputs["local_tasks"] == plan.local_task_yamls() and len(inputs["local_tasks"]) == len(plan.local_tasks)
    assert inputs["model"] == "resources/hf/dream_7b_instruct" and inputs["proxy"] == "resources/hf/qwen25_05b"
    task = next(iter(plan.local_tasks))
    files = plan.local_task_files(task)
    assert files and all(f.startswith(f"resources/paper_tasks/{task}/") for f in files)  # shared downloads
    assert plan.local_task_params()[task]["files"] == files


def test_every_path_is_in_the_run_directory_but_the_shared_downloads(smoke, default):
    shared = ("resources/hf/", "resources/paper_tasks/")
    for plan in (smoke, default):
        found = [
            *(f for r in plan.rows for v in plan.row_inputs(r).values() for f in _paths(v)),
            *(f for s in plan.sweeps for v in plan.sweep_inputs(s).values() for f in _paths(v)),
            *(f for j in plan.map_jobs for v in plan.map_inputs(j).values() for f in _paths(v)),
            *(f for m in plan.models for f in plan.init_inputs(m).values()),
        ]
        assert found and all(f.startswith(f"{RUN}/") or f.startswith(shared) for f in found)


def test_the_rules_write_a_run_path_one_way():
    """run_path("results/...") (workflow/rules/common.smk), never an f-string on RUN_DIR."""
    rules = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    found = [(p.name, m) for p in rules for m in re.findall(r"f\"\{RUN_DIR\}/[^\"]*\"", p.read_text())]
    bad = [f"{name}: {m}" for name, m in found if m != 'f"{RUN_DIR}/{path}"']  # run_path itself
    assert not bad, "\n".join(bad)
