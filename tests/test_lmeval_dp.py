"""lm-eval data parallel (:mod:`unie.dllm.lmeval` under torchrun): two CPU ranks (gloo) against one process on a
tiny random AR checkpoint over two generative toy tasks and one log-likelihood (multiple-choice) task, 7
documents each so that lm-eval pads one rank; and the ``dllm_eval`` rule's choice of launch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason="the dllm extra: pip install -e '.[dllm]'")
import torch

from unie.core.options import ModelConfig
from unie.data.tokenizer import word_tokenizer
from unie.dllm.lmeval import padding_copies, run_evaluation
from unie.models.checkpoint import save_model
from unie.models.transformer import Transformer
from unie.pipeline.task_files import write_lmeval_tasks

N_TEST = 7  # odd: rank 0 gets documents 0, 2, 4, 6 and rank 1 gets 1, 3, 5 plus one padding copy per task
TASKS = ["toy_math", "toy_mmlu", "toy_mmlu_mc"]
MC_YAML = """task: toy_mmlu_mc
dataset_path: json
dataset_name: null
dataset_kwargs:
  data_files:
    test: "{test}"
output_type: multiple_choice
test_split: test
doc_to_text: "{{{{question}}}}"
doc_to_choice: ["A", "B", "C", "D"]
doc_to_target: "{{{{['A', 'B', 'C', 'D'].index(gold)}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


pytestmark = pytest.mark.usefixtures("hf_offline")  # conftest: no network, a private cache the ranks inherit


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """The toy tasks (+ a multiple-choice variant of toy_mmlu) and a tiny random AR checkpoint over their words."""
    root = tmp_path_factory.mktemp("dp")
    task_dir = root / "tasks"
    write_lmeval_tasks(task_dir, 1, N_TEST, 0)
    (task_dir / "toy_mmlu_mc.yaml").write_text(MC_YAML.format(test=task_dir / "data" / "toy_mmlu_test.jsonl"))
    docs = [
        json.loads(line)
        for t in ("toy_math", "toy_mmlu")
        for line in (task_dir / "data" / f"{t}_test.jsonl").read_text().splitlines()
    ]
    tok = word_tokenizer(sorted({w for d in docs for w in d["question"].split() + d["answer"].split()}), unk=True)
    torch.manual_seed(2)  # a random model that gets some but not all of the 7 choices right
    net = Transformer(
        ModelConfig(vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2, mlp_ratio=2, max_len=48, causal=True)
    ).eval()
    ckpt = root / "tiny_ar"
    save_model(
        net,
        ckpt,
        "ar",
        tok.info(),
        extra={
            "layout": {"kind": "ar", "tokenizer": "word", "prompt_len": None, "gen_length": 4, "pad_to_batch": False}
        },
    )
    tok.save(ckpt / "tokenizer")
    return {"tasks": task_dir, "ckpt": ckpt}


def _kwargs(world, out: Path) -> dict:
    # batch 1: a prompt's logits do not depend on what it was batched with, whatever the BLAS
    return {
        "model_args": {"pretrained": str(world["ckpt"]), "name": "tiny_ar", "device": "cpu"},
        "tasks": TASKS,
        "include_path": str(world["tasks"]),
        "output_path": str(out),
        "batch_size": 1,
        "seed": 0,
    }


def _samples(results: Path, task: str) -> list[dict]:
    (path,) = results.parent.glob(f"samples_{task}_[0-9]*.jsonl")  # samples_<task>_<time>.jsonl
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_two_ranks_match_one_process(world, tmp_path):
    one = run_evaluation(_kwargs(world, tmp_path / "one"), 1, log=lambda s: None)
    two = run_evaluation(_kwargs(world, tmp_path / "two"), 2, log=lambda s: None, threads=2)
    r1, r2 = json.loads(one.read_text()), json.loads(two.read_text())
    for task in TASKS:  # every metric exactly; its standard error up to the order lm-eval sums the documents in
        m1, m2 = r1["results"][task], r2["results"][task]
        stderr = {k for k in m1 if "_stderr," in k}
        assert stderr and {k: m2[k] for k in m2 if k not in stderr} == {k: m1[k] for k in m1 if k not in stderr}
        assert {k: m2[k] for k in stderr} == pytest.approx({k: m1[k] for k in stderr}, rel=1e-12)
    assert r2["n-samples"] == r1["n-samples"] == {t: {"original": N_TEST, "effective": N_TEST} for t in TASKS}
    assert 0 < r1["results"]["toy_mmlu_mc"]["acc,none"] < 1  # a random model: a score that a lost document would move
    for task in TASKS:
        s1, s2 = _samples(one, task), _samples(two, task)
        assert [s["doc_id"] for s in s2] == list(range(N_TEST))  # every document exactly once, in order
        for a, b in zip(s1, s2):
            assert a["doc"] == b["doc"] and a["arguments"] == b["arguments"]
            if task == "toy_mmlu_mc":  # (log-likelihood, is_greedy) per choice
                assert [ll for ll, _ in b["filtered_resps"]] == pytest.approx([ll for ll, _ in a["filtered_resps"]])
            else:
                assert b["filtered_resps"] == a["filtered_resps"]
    # throughput: rank 0's record holds both ranks; lm-eval's padding copies were not generated
    tp1 = json.loads((tmp_path / "one" / "throughput.json").read_text())
    tp2 = json.loads((tmp_path / "two" / "throughput.json").read_text())
    assert "world_size" not in tp1 and "ranks" not in tp1 and tp1["requests"] == 2 * N_TEST
    assert tp2["world_size"] == 2 and [r["requests"] for r in tp2["ranks"]] == [8, 6]
    assert {k: tp2[k] for k in ("requests", "generated_tokens", "nfe")} == {
        k: tp1[k] for k in ("requests", "generated_tokens", "nfe")
    }
    assert tp2["seconds"] == pytest.approx(max(r["seconds"] for r in tp2["ranks"]))  # one generate_until call
    assert tp2["tokens_per_s"] == pytest.approx(tp2["generated_tokens"] / tp2["seconds"])


def test_padding_copies_are_the_extra_occurrences():
    from lm_eval.api.instance import Instance

    def inst(i, repeats):
        return Instance("generate_until", {}, (f"p{i}", {}), 0, metadata=("t", i, repeats))

    a, b, c = inst(0, 1), inst(1, 2), inst(2, 1)
    assert padding_copies([a, b, b, c]) == {}
    assert padding_copies([a, b, b, c, c, c]) == {4: 3, 5: 3}  # two copies of the last request
    assert padding_copies([a, b, b, b, b]) == {3: 1, 4: 1}  # repeats 2: the 3rd and 4th occurrences
    assert padding_copies([Instance("loglikelihood", {}, ("x", " y"), 0)] * 2) == {1: 0}  # repeats unset: 1


def test_rule_launcher_torchrun_for_two_gpus_in_process_otherwise(monkeypatch, tmp_path, fake_torchrun):
    """What workflow/scripts/dllm_eval.py does: ``run_evaluation(kwargs, processes(resources.gpu, device))``."""
    from unie.dllm import lmeval
    from unie.pipeline.launch import processes

    in_process = []
    monkeypatch.setattr(lmeval, "evaluate", lambda log, **kw: in_process.append(kw) or Path("here.json"))
    kwargs = {"tasks": ["toy_math"], "output_path": str(tmp_path), "limit": 3}
    for gpu in (0, 1):
        assert lmeval.run_evaluation(kwargs, processes(gpu, "cuda")) == Path("here.json")
    assert in_process == [kwargs, kwargs]
    assert processes(2, "cpu") == 1  # the default profile: one process whatever the resources say

    # the torchrun command's stand-in (conftest): rank 0 reports its results file
    fake_torchrun.on_launch = lambda args: Path(args["result_file"]).write_text("rank0/results.json")
    assert lmeval.run_evaluation(kwargs, processes(2, "cuda"), log=lambda s: None, threads=8) == Path(
        "rank0/results.json"
    )
    ((cmd, args, threads),) = fake_torchrun.launched
    assert cmd[:-1] == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        "--nproc_per_node=2",
        "-m",
        "unie.dllm.lmeval",
        "--evaluate-json",
    ]
    assert args["kwargs"] == kwargs and args["threads"] == 4 and threads == "4"
    assert len(in_process) == 2  # nothing ran in this process
    fake_torchrun.rc = 1
    with pytest.raises(RuntimeError, match="2 processes exited with status 1"):
        lmeval.run_evaluation(kwargs, 2, log=lambda s: None)
