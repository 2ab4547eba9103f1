"""The paper-scale bench (random weights, no download) runs end to end at a tiny size on a CPU."""

from __future__ import annotations

import json
import subprocess
import sys

from unie.pipeline.bench import PaperScale, paper_scale_bench, paper_scale_markdown, precision_mode

TINY = dict(vocab_size=60, d_model=16, n_layers=1, n_heads=2, seq_len=16, batch_size=2, train_steps=1)


def test_paper_scale_bench_tiny_record_and_markdown():
    res = paper_scale_bench(
        "cpu", PaperScale(**TINY, steps=(2, 4), skip=(("bf16", 4),)), ("fp32", "bf16"), log=lambda m: None
    )
    assert set(res["precisions"]) == {"fp32", "bf16"} and res["P"] == 3 and res["window_steps"] == 2
    fp = res["precisions"]["fp32"]
    assert fp["C_DLM_s"] > 0 and fp["C_AR_s"] > 0 and fp["train_tokens_per_s"] > 0
    assert [r["steps"] for r in fp["runs"]] == [2, 4] and [r["steps"] for r in res["precisions"]["bf16"]["runs"]] == [2]
    ws = fp["window_step"]
    assert ws["limit"] > 1 and ws["measured_to_limit"] == ws["measured"] / ws["limit"] and ws["draw"] == "gumbel"
    assert fp["ar"]["decode_path"] == "eager" and fp["ar"]["ms_per_token"] > 0
    assert "ar_bf16_weights" in res["precisions"]["bf16"]
    md = paper_scale_markdown(res)
    assert "| C_DLM" in md and "window step / its limit" in md and "ms/token" in md
    json.dumps(res)


def test_precision_mode_restores_the_backend_flags():
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    with precision_mode("tf32", "cpu"):
        assert torch.backends.cuda.matmul.allow_tf32
    with precision_mode("bf16", "cpu"):
        assert torch.is_autocast_enabled("cpu")
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_bench_module_imports_no_workflow_package_and_runs_standalone(tmp_path):
    code = (
        "import sys, unie.pipeline.bench; "
        "bad = [m for m in ('snakemake', 'lm_eval', 'datasets', 'jsonschema') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "unie.pipeline.bench",
            "--paper-scale",
            "--tiny",
            "--device",
            "cpu",
            "--precisions",
            "fp32",
            "--steps",
            "2",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "paper_scale.json").read_text())["precisions"]["fp32"]["runs"]
    assert "Paper-scale bench" in (tmp_path / "paper_scale.md").read_text()


def test_gpu_check_script_tiny_on_cpu(tmp_path):
    """scripts/gpu_check.py (the device check, docs/gpu-runs.md) works end to end at tiny size without a GPU."""
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"
    out = subprocess.run(
        [
            sys.executable,
            str(script),
            "--tiny",
            "--device",
            "cpu",
            "--precisions",
            "fp32",
            "--steps",
            "2",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    smoke = json.loads((tmp_path / "smoke.json").read_text())
    assert smoke["ok"], smoke
    # the released AR's chunk BOS on the device's decode paths (issue 45): BOS first, eager = eager on a CPU
    assert smoke["ar_chunk_bos"]["bos_first"] and smoke["ar_chunk_bos"]["graph_vs_eager_token_agreement"] == 1.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["paper_scale.json", "paper_scale.md", "smoke.json"]
