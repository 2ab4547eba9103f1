"""Data-parallel training: shards (micro-batches with their own loss streams), 2 gloo ranks under torchrun equal
one process with the same shards, resumption across world sizes, the errors, and the rules' launch path."""

from __future__ import annotations

import dataclasses
import json
import runpy
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from unie.core.options import TrainConfig
from unie.core.ranks import torchrun_command
from unie.core.train import _step_generator, run_signature, run_spec, shard_plan, train
from unie.data.corpus import tokenize_corpus, write_text_parquet
from unie.data.toy_world import generate_corpus
from unie.methods.mdlm import MDLM
from unie.pipeline import launch

REPO = Path(__file__).resolve().parents[1]
SEQ_LEN = 16
SPEC = {
    "method": "mdlm",
    "arch": {"d_model": 32, "n_layers": 1, "n_heads": 2, "mlp_ratio": 2, "dropout": 0.1},
    "train": {
        "steps": 10,
        "batch_size": 8,
        "shards": 2,
        "lr": 1e-3,
        "warmup": 2,
        "ema": 0.9,
        "ckpt_every": 5,
        "log_every": 1,
    },
}

# the loss history of the one-batch loop before shards existed (test_shards_one_is_the_old_loop's run, recorded with
# the code of the previous commit): shards=1 and shards=None in one process must reproduce it
OLD_LOSSES = [
    3.1718876361846924,
    5.041279315948486,
    6.448379039764404,
    7.319077968597412,
    5.7650837898254395,
    5.331338405609131,
    4.742602348327637,
    3.902259349822998,
]


def _quiet(_msg):
    pass


@pytest.fixture(scope="module")
def files(tmp_path_factory, tok):
    root = tmp_path_factory.mktemp("ddp")
    tok.save(root / "tokenizer")
    write_text_parquet(generate_corpus("owt", "train", 64, SEQ_LEN, seed=0), root / "raw.parquet")
    tokenize_corpus(root / "raw.parquet", tok, root / "train.parquet", SEQ_LEN, insert_eos=False, chunk_specials=False)
    return root


def _kwargs(files, out, ckpt, **extra) -> dict:
    return {
        "name": "m",
        "spec": SPEC,
        "train_path": str(files / "train.parquet"),
        "tokenizer_dir": str(files / "tokenizer"),
        "out_dir": str(out),
        "ckpt_dir": str(ckpt),
        "seq_len": SEQ_LEN,
        "device": "cpu",
        **extra,
    }


def _losses(out) -> list[float]:
    return [r["loss"] for r in json.loads(Path(out, "history.json").read_text()) if "loss" in r]


def _max_diffs(out_a, out_b) -> tuple[float, float]:
    """Max abs differences of the logged losses and of the saved EMA weights of two runs."""
    la, lb = torch.tensor(_losses(out_a)), torch.tensor(_losses(out_b))
    assert la.shape == lb.shape == (SPEC["train"]["steps"],)
    torch.testing.assert_close(la, lb, rtol=1e-5, atol=0)
    wa, wb = load_file(str(Path(out_a, "model.safetensors"))), load_file(str(Path(out_b, "model.safetensors")))
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=1e-6, msg=k)
    return float((la - lb).abs().max()), max(float((wa[k] - wb[k]).abs().max()) for k in wa)


@pytest.fixture(scope="module")
def one_process(files, tmp_path_factory):
    """The uninterrupted one-process run with shards=2: its output directory."""
    root = tmp_path_factory.mktemp("one")
    launch.run_training("models", _kwargs(files, root / "out", root / "ckpt"), nproc=1, log=_quiet)
    return root / "out"


# ---------------------------------------------------------------------- two ranks = one process
def test_two_ranks_equal_one_process(files, one_process, tmp_path, capsys):
    """2 gloo ranks (torchrun) with shards=2: the same loss history and final EMA weights as one process."""
    launch.run_training("models", _kwargs(files, tmp_path / "out", tmp_path / "ckpt"), nproc=2, log=_quiet)
    d_loss, d_weight = _max_diffs(tmp_path / "out", one_process)
    err = capsys.readouterr().err
    assert err.count("training m (mdlm)") == 1  # only rank 0 logs
    with capsys.disabled():
        print(f"2 ranks vs 1 process: max |d loss| = {d_loss:.3g}, max |d weight| = {d_weight:.3g}")


def test_resume_across_world_sizes(files, one_process, tmp_path):
    """2 ranks stopped after 5 steps, resumed in one process to 10 steps = the uninterrupted one-process run."""
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    launch.run_training("models", _kwargs(files, out, ckpt, stop_after=5), nproc=2, log=_quiet)
    assert torch.load(ckpt / "last.pt", weights_only=True)["step"] == 5 and not out.exists()
    logs = []
    launch.run_training("models", _kwargs(files, out, ckpt), nproc=1, log=logs.append)
    assert any("resumed" in m and "step 5" in m for m in logs), logs
    d_loss, d_weight = _max_diffs(out, one_process)
    print(
        f"resumed (2 ranks -> 1 process) vs uninterrupted: max |d loss| = {d_loss:.3g}, max |d weight| = {d_weight:.3g}"
    )


# ---------------------------------------------------------------------- shards in one process
CFG = TrainConfig(steps=8, batch_size=4, lr=1e-2, warmup=3, ckpt_every=3, log_every=1, ema=0.9, seed=0)


@pytest.mark.parametrize("shards", [None, 1])
def test_shards_one_is_the_old_loop(net_factory, tok_info, random_words, tmp_path, shards):
    """One shard is the one-batch loop of before (stream 1, the whole batch): the same losses as recorded then."""
    cfg = dataclasses.replace(CFG, shards=shards)
    _, history = train(
        net_factory(max_len=8),
        MDLM(tok_info).loss,
        random_words(32, 8, seed=0),
        cfg,
        tmp_path,
        "s",
        log=_quiet,
        progress=False,
    )
    assert [r["loss"] for r in history] == pytest.approx(OLD_LOSSES, rel=1e-6, abs=0)


def test_shards_cut_the_batch_and_streams(net_factory, tmp_path):
    """shards=2: micro-batch s is rows [s*m, (s+1)*m) of the global batch (stream 0, as with one shard), its loss
    generator is stream 1 + s, and the logged loss is the mean of the micro-batch losses."""
    data = torch.arange(64).view(32, 2)  # row r: [2r, 2r+1]
    seen = []

    def loss(net, x0, g):
        seen.append((x0[:, 0] // 2, torch.rand(1, generator=g).item()))
        return sum(p.sum() for p in net.parameters()) * 0.0 + float(len(seen) % 2)  # 1.0 for s=0, 0.0 for s=1

    one, two = dataclasses.replace(CFG, steps=2), dataclasses.replace(CFG, steps=2, shards=2)
    train(net_factory(max_len=8), loss, data, one, tmp_path / "a", "s", log=_quiet, progress=False)
    batches = [rows for rows, _ in seen]
    seen.clear()
    _, history = train(net_factory(max_len=8), loss, data, two, tmp_path / "b", "s", log=_quiet, progress=False)
    for step in range(2):
        rows, u = zip(*seen[2 * step : 2 * step + 2])
        assert torch.equal(torch.cat(rows), batches[step]) and all(len(r) == 2 for r in rows)
        for s in range(2):
            assert u[s] == torch.rand(1, generator=_step_generator(0, step, 1 + s, "cpu")).item()
    assert [r["loss"] for r in history] == [0.5, 0.5]


def test_shards_errors():
    with pytest.raises(ValueError, match="batch_size=6 is not divisible by shards=4"):
        TrainConfig(batch_size=6, shards=4)
    with pytest.raises(ValueError, match="shards=3 is not a multiple of the world size 2"):
        shard_plan(TrainConfig(batch_size=6, shards=3), rank=0, world_size=2)
    with pytest.raises(ValueError, match="batch_size=8 is not divisible by shards=3.*world size 3"):
        shard_plan(TrainConfig(batch_size=8), rank=0, world_size=3)
    assert shard_plan(TrainConfig(batch_size=8, shards=4), rank=1, world_size=2) == (4, range(1, 4, 2))
    assert shard_plan(TrainConfig(batch_size=8), rank=0, world_size=1) == (1, range(1))


def test_signature_has_shards_only_when_set():
    """An unset shards count (one micro-batch per process) is not part of the run specification, so a checkpoint
    resumes on any number of processes; an explicit shards count is part of the run."""
    base = TrainConfig()
    assert "shards" not in run_spec(base, {"m": 1})["train"]
    assert run_spec(dataclasses.replace(base, shards=2), {"m": 1})["train"]["shards"] == 2
    assert run_signature(base, {"m": 1}) != run_signature(dataclasses.replace(base, shards=2), {"m": 1})


# ---------------------------------------------------------------------- the rules' launch path
def test_processes_and_torchrun_command():
    assert [launch.processes(g, "cuda") for g in (0, 1, 2, 4)] == [1, 1, 2, 4]
    assert launch.processes(4, "cuda:0") == 4 and launch.processes(2, "cpu") == 1  # GPUs count only on CUDA
    assert launch.processes(0, "cpu", forced=2) == 2
    with pytest.raises(ValueError, match="processes must be >= 1"):
        launch.processes(0, "cpu", forced=0)
    assert torchrun_command(2, "a.json", launch.ENTRY) == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        "--nproc_per_node=2",
        "-m",
        "unie.pipeline.launch",
        "a.json",
    ]
    with pytest.raises(KeyError, match="unknown trainer 'nope'"):
        launch.run_training("nope", {}, nproc=2)


class _Named(dict):
    """Stands in for Snakemake's named lists (attribute and ``get``/``items`` access)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _fake_snakemake(script: str, gpu: int, device: str, log_path, processes=None):
    params = {
        "spec": SPEC,
        "ckpt_dir": "ckpt",
        "device": device,
        "processes": processes,
        "seq_len": SEQ_LEN,
        "token_cache": "resources/cache/tokenized/owt",
    }
    if script == "train":
        wildcards, inputs = {"model": "m"}, {"train": "t.parquet", "tokenizer": "tok"}
        output = {"weights": "results/models/m/model.safetensors"}
    else:
        wildcards, inputs = {"dmodel": "d"}, {"meta": "resources/dllm/meta.json"}
        output = {"weights": "results/dllm/models/d/model.safetensors"}
    return _Named(
        wildcards=_Named(wildcards),
        params=_Named(params),
        input=_Named(inputs),
        output=_Named(output),
        resources=_Named(gpu=gpu),
        log=[str(log_path)],
        threads=4,
    )


@pytest.mark.parametrize("script,trainer", [("train", "models"), ("dllm_train", "dllm")])
@pytest.mark.parametrize(
    "gpu,device,forced,nproc", [(0, "cpu", None, 1), (1, "cuda", None, 1), (2, "cuda", None, 2), (0, "cpu", 2, 2)]
)
def test_rule_scripts_launch(monkeypatch, tmp_path, fake_torchrun, script, trainer, gpu, device, forced, nproc):
    """A training rule's script runs its trainer in-process for 0 or 1 GPU, and under torchrun (the command of
    :func:`unie.core.ranks.torchrun_command`, the arguments in a JSON file) for 2 GPUs or a forced process count."""
    calls, popens = [], fake_torchrun.launched  # the torchrun command's stand-in (conftest) records its launches
    monkeypatch.setattr(launch, "trainer", lambda name: lambda **kw: calls.append((name, kw)))
    smk = _fake_snakemake(script, gpu, device, tmp_path / "rule.log", forced)
    threads = torch.get_num_threads()
    try:
        runpy.run_path(str(REPO / "workflow" / "scripts" / f"{script}.py"), init_globals={"snakemake": smk})
    finally:
        torch.set_num_threads(threads)  # the script's job() set the rule's 4 threads
    if nproc == 1:
        assert not popens and len(calls) == 1 and calls[0][0] == trainer and callable(calls[0][1].pop("log"))
        kwargs = calls[0][1]
    else:
        ((cmd, args, threads),) = popens
        assert cmd == torchrun_command(2, cmd[-1], launch.ENTRY) and args["trainer"] == trainer and threads == "2"
        kwargs = args["kwargs"]
        assert "rank 0 says hello" in (tmp_path / "rule.log").read_text()  # the ranks' output is in the rule's log
    assert kwargs["device"] == device and kwargs["spec"] == SPEC and kwargs["ckpt_dir"] == "ckpt"
    assert kwargs["name"] == ("m" if script == "train" else "d")
    assert kwargs.get("token_cache") == ("resources/cache/tokenized/owt" if script == "train" else None)
