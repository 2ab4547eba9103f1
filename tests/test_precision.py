"""Mixed precision (:mod:`unie.core.precision`, docs/precision.md), on the CPU with bf16 autocast and tiny models:
fp32 is today's code path exactly; bf16 agrees with fp32 within the stated tolerances (NELBO, training loss,
sampled tokens); log-probabilities, losses and likelihoods stay float32/float64 under bf16."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from conftest import make_net
from unie.core.options import ConfigError, TrainConfig
from unie.core.precision import PRECISIONS, autocast, for_device, precision_record, widen
from unie.core.registry import SAMPLERS
from unie.core.train import train
from unie.data.toy_world import HMM
from unie.eval.likelihood import mc_nll
from unie.models.checkpoint import save_model
from unie.models.transformer import Transformer
from unie.pipeline.model_files import build_method, model_config

L = 16
# the bounds of docs/precision.md; measured here (CPU) and on an H200 at a larger size (the table there)
NELBO_REL = 1e-3  # same weights, bf16 vs fp32 evaluation, relative: measured 8e-6 (H200: 5e-6, 2e-5)
FIRST_LOSS_REL = 1e-3  # same weights, the first training step's loss, relative: measured 9e-6 (H200: 4e-6)
TRAINED_NELBO_REL = 1e-2  # a bf16-trained vs an fp32-trained model, both evaluated in fp32: 2e-4 (H200: 2e-3, 5e-3)
SAME_TOKENS = {"ancestral": 0.98, "energy": 0.90}  # final samples, same seed: 0.997-1 / 0.987-0.997 over 5 seeds
SAME_DECISIONS = {"tokens": 0.99, "argmin": 0.95}  # per step, same state and noise: 0.998 / 0.998 (H200: .995/.996)


# ---------------------------------------------------------------------------------------------- the module
def test_names_autocast_and_records():
    assert PRECISIONS == ("fp32", "tf32", "bf16")
    with pytest.raises(ValueError, match="known: fp32, tf32, bf16"):
        with autocast("cpu", "fp16"):
            pass
    with autocast("cpu", "fp32"):
        assert not torch.is_autocast_enabled("cpu")
    with autocast("cpu", "tf32"):  # TF32 is a CUDA matmul mode: nothing on the CPU
        assert not torch.is_autocast_enabled("cpu")
    with autocast(torch.device("cpu"), "bf16"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
        assert (torch.ones(2, 2, dtype=torch.float64) @ torch.ones(2, 2, dtype=torch.float64)).dtype == torch.float64
    assert not torch.is_autocast_enabled("cpu")
    assert for_device("bf16", "cpu") == "fp32" and for_device("bf16", "cuda:1") == "bf16"
    assert precision_record("fp32") == {} and precision_record("bf16") == {"precision": "bf16"}
    t = torch.ones(3)
    assert widen(t) is t and widen(t.double()).dtype == torch.float64 and widen(t.bfloat16()).dtype == torch.float32


# ------------------------------------------------------------------------------------ (a) fp32 is today's path
@pytest.fixture
def no_autocast(monkeypatch):
    """fp32 must never enter torch.autocast (so it runs exactly the code of before the option)."""

    def refuse(*a, **k):
        raise AssertionError("torch.autocast entered under fp32")

    monkeypatch.setattr(torch, "autocast", refuse)


def _train(tok, method: str, precision: str | None, steps: int, data, tmp):
    """``(method, EMA net, step losses)`` of ``steps`` training steps (precision None: the argument left out)."""
    m = build_method(method, tok.info())
    torch.manual_seed(0)
    net = Transformer(model_config({"d_model": 32, "n_layers": 1, "n_heads": 2}, tok.vocab_size, L, m))
    cfg = TrainConfig(steps=steps, batch_size=32, lr=3e-3, warmup=10, ckpt_every=10**6, log_every=1, seed=0)
    kw = {} if precision is None else {"precision": precision}
    ema, hist = train(net, m.loss, data, cfg, tmp, log=lambda *a: None, progress=False, **kw)
    return m, ema, [r["loss"] for r in hist if "loss" in r]


@pytest.fixture(scope="module")
def data():
    return HMM("owt").sample(512, L, torch.Generator().manual_seed(0)), HMM("owt").sample(
        256, L, torch.Generator().manual_seed(1)
    )


def test_fp32_training_is_the_default_path(tok, data, no_autocast, tmp_path):
    _, ema_a, loss_a = _train(tok, "mdlm", None, 4, data[0], tmp_path / "a")
    _, ema_b, loss_b = _train(tok, "mdlm", "fp32", 4, data[0], tmp_path / "b")
    assert loss_a == loss_b
    assert all(torch.equal(p, q) for p, q in zip(ema_a.parameters(), ema_b.parameters()))


@pytest.fixture(scope="module")
def job(tmp_path_factory, tok):
    from unie.pipeline.sample import SampleJob

    root = tmp_path_factory.mktemp("precision_job")
    tok.save(root / "tok")
    save_model(make_net(tok.vocab_size, max_len=8), root / "mdlm", "mdlm", tok.info())
    save_model(make_net(tok.vocab_size, max_len=8, causal=True, seed=1), root / "ar", "ar", tok.info())
    inputs = {
        "tokenizer": str(root / "tok"),
        "dlm": [str(root / "mdlm" / "model.safetensors")],
        "proxy": [str(root / "ar" / "model.safetensors")],
    }
    spec = {"sampler": "energy", "models": {"dlm": "mdlm", "proxy": "ar"}, "options": {"energy": "uni", "K": 2}}
    return SampleJob.from_spec("uni", spec, inputs, seq_len=8, n_samples=4, batch_size=2, domain="owt", seed=3), root


def _records(job, tmp_path, precision: str) -> tuple[dict, dict, dict]:
    """The sample metadata, Gen PPL result and Table 1 result of ``job`` run in ``precision``."""
    import dataclasses

    from unie.pipeline.ppl import model_ppl
    from unie.pipeline.sample import evaluate_samples, run_sampler

    job, root = job
    quiet = dict(log=lambda *a: None)
    samples = tmp_path / f"{precision}.parquet"
    meta = run_sampler(dataclasses.replace(job, precision=precision), 2, samples, **quiet)
    genppl = evaluate_samples(
        samples,
        root / "tok",
        {"ar": {"kind": "model"}},
        "all",
        {"ar": str(root / "ar")},
        domain="owt",
        precision=precision,
        **quiet,
    )
    from unie.data.tokenizer import load_tokenizer
    from unie.data.tokens import load_tokens, write_token_file

    tokens = tmp_path / "owt" / f"{precision}.parquet"  # the samples as a token file (rule tokenize's metadata)
    write_token_file(
        tokens, [load_tokens(samples).numpy()], 8, {"tokenizer": load_tokenizer(root / "tok").info()["fingerprint"]}
    )
    ppl = model_ppl("m", root / "mdlm", root / "tok", {"owt": tokens}, precision=precision, **quiet)
    return meta, genppl, ppl


def test_fp32_records_are_unchanged(job, tmp_path, no_autocast):
    for record in _records(job, tmp_path, "fp32"):
        assert "precision" not in record


def test_other_precisions_are_recorded(job, tmp_path):
    import dataclasses

    with pytest.raises(ValueError, match="precision"):
        dataclasses.replace(job[0], precision="half")
    for record in _records(job, tmp_path, "bf16"):
        assert record["precision"] == "bf16"


# ----------------------------------------------------------------------------- (b) bf16 agrees with fp32
@pytest.fixture(scope="module")
def trained(tok, data, tmp_path_factory):
    """A tiny MDLM trained 150 steps in fp32 and in bf16 from the same initial weights, and an AR proxy."""
    tmp = tmp_path_factory.mktemp("precision_train")
    fp32 = _train(tok, "mdlm", "fp32", 150, data[0], tmp / "fp32")
    bf16 = _train(tok, "mdlm", "bf16", 150, data[0], tmp / "bf16")
    ar = _train(tok, "ar", "fp32", 150, data[0], tmp / "ar")
    return fp32, bf16, ar


def test_bf16_training_loss_and_nelbo_agree(trained, data):
    (m, net, loss32), (_, net_b, loss16), _ = trained
    assert abs(loss16[0] - loss32[0]) / loss32[0] < FIRST_LOSS_REL  # the same weights at step 0
    assert all(isinstance(v, float) for v in loss16)
    x = data[1]

    def nelbo(model, precision):
        return mc_nll(x, lambda xb, g: m.nll(model, xb, g), 2, 128, 0, "owt", "cpu", precision)

    n32, n16 = nelbo(net, "fp32"), nelbo(net, "bf16")
    assert n16.dtype == torch.float64 and torch.isfinite(n16).all()
    assert abs(n16.sum() - n32.sum()) / n32.sum() < NELBO_REL
    trained_b = nelbo(net_b, "fp32")  # the bf16-trained model reaches the fp32-trained one's NELBO
    assert abs(trained_b.sum() - n32.sum()) / n32.sum() < TRAINED_NELBO_REL


@pytest.mark.parametrize("sampler", sorted(SAME_TOKENS))
def test_bf16_sampler_picks_the_same_tokens(trained, sampler):
    (m, net, _), _, (am, ar, _) = trained
    models = {"dlm": m.wrap(net), "proxy": am.wrap(ar)}
    kw = {"energy": "uni", "K": 2, "w": 1.0} if sampler == "energy" else {}
    out = {}
    for p in ("fp32", "bf16"):
        with torch.no_grad(), autocast("cpu", p):
            out[p], _ = SAMPLERS[sampler](models, 64, L, 16, torch.Generator().manual_seed(3), batch_size=64, **kw)
    share = (out["fp32"] == out["bf16"]).double().mean().item()
    assert share >= SAME_TOKENS[sampler], share


def step_decisions(dlm, proxy, x, reveal_step, steps: int, mask_id: int, device="cpu", K: int = 2):
    """Teacher-forced agreement of Algorithm 2's decisions, fp32 vs bf16: at every step ``k`` of an fp32 run (its
    state rebuilt from the samples ``x`` and their ``reveal_step``), the ``K`` proposals ``x0^j`` (Gumbel-max over
    ``p_theta``, the same noise in both precisions) and ``j* = argmin_j E^j`` (on the fp32 candidates).  Returns
    ``(share of proposed tokens at masked positions equal, share of argmin decisions equal)``."""
    from unie.core.gumbel import uniform
    from unie.core.sampling import time_grid
    from unie.core.schedule import make_schedule
    from unie.energy.energies import energy
    from unie.energy.sampler import propose
    from unie.methods.mdlm import transition

    ts, schedule = time_grid(steps), make_schedule("loglinear")
    same = {"tokens": [0, 0], "argmin": [0, 0]}
    for k in range(steps):
        xt = torch.where(reveal_step < k, x, torch.full_like(x, mask_id)).to(device)
        masked = (xt == mask_id)[:, None].expand(-1, K, -1)
        if not masked.any():
            continue
        out = {}
        for p in ("fp32", "bf16"):
            g = torch.Generator(device).manual_seed(k)
            with torch.no_grad(), autocast(device, p):
                logp = dlm.logp_x0(xt)
                x0 = propose(logp, xt, K, mask_id, g)
                s = uniform((len(xt),), g, device) * float(ts[k])
                xs = transition(xt, x0, float(schedule.alpha(ts[k])), schedule.alpha(s), mask_id, g)
            out[p] = logp, x0, xs
        _, x0, xs = out["fp32"]
        same["tokens"][0] += int((out["bf16"][1] == x0)[masked].sum())
        same["tokens"][1] += int(masked.sum())
        j = {}
        for p in ("fp32", "bf16"):
            with torch.no_grad(), autocast(device, p):
                j[p] = energy("uni", xt, x0, xs, out[p][0], proxy, "teacher_forced", mask_id, check=False).argmin(-1)
        same["argmin"][0] += int((j["fp32"] == j["bf16"]).sum())
        same["argmin"][1] += len(xt)
    return same["tokens"][0] / same["tokens"][1], same["argmin"][0] / same["argmin"][1]


def test_bf16_sampler_makes_the_same_decisions_step_by_step(trained):
    (m, net, _), _, (am, ar, _) = trained
    dlm, proxy = m.wrap(net), am.wrap(ar)
    from unie.energy.sampler import sample_energy

    x, stats = sample_energy(
        dlm,
        proxy,
        64,
        L,
        16,
        torch.Generator().manual_seed(3),
        batch_size=64,
        energy="uni",
        K=2,
        w=1.0,
        record_steps=True,
    )
    tokens, argmin = step_decisions(dlm, proxy, x, stats["reveal_step"], 16, dlm.mask_id)
    print(f"same decisions under bf16: tokens {tokens:.4f}, argmin {argmin:.4f}")
    assert tokens >= SAME_DECISIONS["tokens"] and argmin >= SAME_DECISIONS["argmin"], (tokens, argmin)


# ------------------------------------------------------------------- (c) log-probabilities stay float32
def test_log_probabilities_and_losses_are_float32_under_bf16(tok, random_words):
    x = random_words(4, 8)
    g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    with autocast("cpu", "bf16"):
        ar = build_method("ar", tok.info()).wrap(make_net(tok.vocab_size, causal=True, max_len=8))
        assert ar.logp_next(x).dtype == torch.float32 and ar.log_prob(x).dtype == torch.float64
        for method in ("mdlm", "ar", "sedd", "duo", "bd3lm"):
            m = build_method(method, tok.info(), {"block_size": 4} if method == "bd3lm" else {})
            torch.manual_seed(0)
            net = Transformer(model_config({"d_model": 16, "n_layers": 1, "n_heads": 2}, tok.vocab_size, 8, m))
            loss = m.loss(net, x, g())
            assert loss.dtype == torch.float32 and torch.isfinite(loss), method
            with torch.no_grad():
                assert m.nll(net, x, g()).dtype in (torch.float32, torch.float64), method
        mdlm = build_method("mdlm", tok.info()).wrap(make_net(tok.vocab_size, max_len=8))
        xt = x.clone()
        xt[:, ::2] = tok.mask_id
        assert mdlm.logp_x0(xt).dtype == torch.float32


def test_bfloat16_network_outputs_are_widened_before_log_softmax(tok):
    """A network whose output is bfloat16 (not ours: ours return float32) still gives float32 log-probabilities."""
    from unie.methods.duo import restricted_logits
    from unie.methods.sedd import sedd_log_score

    out = torch.randn(2, 8, tok.vocab_size).bfloat16()
    xt = torch.full((2, 8), tok.mask_id)
    assert sedd_log_score(out, xt, torch.ones(2), tok.mask_id).dtype == torch.float32
    net = lambda tokens, sigma=None, inputs_embeds=None: out  # noqa: E731
    assert restricted_logits(net, torch.arange(5), torch.ones(2), tokens=xt).dtype == torch.float32
    assert (
        build_method("ar", tok.info()).wrap(make_net(tok.vocab_size, causal=True)).normalise(out).dtype == torch.float32
    )


def test_evaluators_and_decoders_under_bf16(tok, random_words):
    from unie.dllm.backbone import DLLM, DecodeOptions
    from unie.dllm.decoder import ARDecoder, DLLMDecoder, ModelArgs
    from unie.eval.genppl import ModelEvaluator

    assert ModelArgs.parse({"pretrained": "m", "precision": "bf16"}).precision == "bf16"
    assert ModelArgs(pretrained="m").precision == "fp32"
    with pytest.raises(ConfigError, match="precision"):
        ModelArgs.parse({"pretrained": "m", "precision": "fp16"})
    ar = build_method("ar", tok.info()).wrap(make_net(tok.vocab_size, causal=True, max_len=32))
    texts = [tok.decode(r) for r in random_words(3, 8).tolist()]
    with autocast("cpu", "bf16"):
        nll16, _ = ModelEvaluator(tok, ar).score(texts)
    nll32, _ = ModelEvaluator(tok, ar).score(texts)
    assert nll16.dtype == torch.float64 and torch.allclose(nll16, nll32, rtol=1e-2)
    ll = {p: ARDecoder(ar, tok, 4, precision=p).loglikelihood(["the"], [texts[0]])[0] for p in ("fp32", "bf16")}
    assert isinstance(ll["bf16"], float) and abs(ll["bf16"] - ll["fp32"]) < 1e-2 * abs(ll["fp32"])
    backbone = DLLM(make_net(tok.vocab_size, max_len=32), tok.info(), shift=False)
    backbone.tokenizer = tok
    opts = DecodeOptions(gen_length=4, block_length=4, tokens_per_step=2)
    dec = DLLMDecoder(backbone, tok, 20, opts, precision="bf16")
    seen = []
    real = backbone.logits
    backbone.logits = lambda x: seen.append(torch.is_autocast_enabled("cpu")) or real(x)
    texts_out, _ = dec.generate(["the"], 4)
    assert len(texts_out) == 1 and seen and all(seen)


# ------------------------------------------------------------------ (e) one helper, every rule, the DLLM half too
def test_every_script_reads_the_precision_from_one_helper():
    """The scripts of the rules that run a model read their precision from unie.pipeline.rule.job_precision (the
    param precision_params() passes: WorkflowSettings.job_precision, the config's precision on the config's device):
    none calls for_device itself, none reads the param."""
    from types import SimpleNamespace

    from unie.pipeline.rule import job_precision
    from unie.config.settings import WorkflowSettings

    scripts = Path(__file__).resolve().parents[1] / "workflow" / "scripts"
    readers = {f.stem for f in scripts.glob("*.py") if "job_precision(snakemake" in f.read_text()}
    assert readers == {
        "train",
        "sample",
        "ppl",
        "ppl_energy",
        "timing",
        "dllm_train",
        "dllm_eval",
        "dllm_sweep_eval",
        "dllm_sweep",
        "dllm_map",
        "dllm_map_tree",
        "dllm_room",
    }
    for f in scripts.glob("*.py"):
        assert "for_device" not in f.read_text() and '"precision"' not in f.read_text(), f.name

    class Params(SimpleNamespace):
        def get(self, key, default=None):
            return getattr(self, key, default)

    job = lambda **p: SimpleNamespace(params=Params(**p))  # noqa: E731
    assert job_precision(job(device="cuda")) == "fp32"  # fp32 jobs get no precision param
    assert job_precision(job(device="cuda", precision="bf16")) == "bf16"
    with pytest.raises(ValueError, match="unknown precision 'bf61'"):
        job_precision(job(device="cuda", precision="bf61"))
    config = {"sampling": {}, "data": {}, "device": "cuda", "precision": "bf16"}
    assert WorkflowSettings.from_config(config).job_precision == "bf16"
    assert WorkflowSettings.from_config({**config, "device": "cpu"}).job_precision == "fp32"  # a CPU runs fp32
    assert WorkflowSettings.from_config({**config, "device": "cuda:1"}).job_precision == "bf16"
    assert WorkflowSettings.from_config({"sampling": {}, "data": {}, "device": "cuda"}).job_precision == "fp32"


def test_dllm_rows_and_training_carry_the_precision(tmp_path):
    from unie.dllm.rows import row_model_args
    from unie.pipeline.dllm_runs import prepare_dllm_data, train_dllm_model

    row = {"model": "llada", "options": {"confidence": "low_confidence"}}
    dllm = {"decoding": {"gen_length": 8}}
    inputs = {"model": "results/dllm/models/llada/model.safetensors"}
    assert "precision" not in row_model_args("llada", row, dllm, inputs, "cpu")  # fp32: model_args as before
    assert row_model_args("llada", row, dllm, inputs, "cuda", "bf16")["precision"] == "bf16"

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    rows = [{"question": f"question : sort [ {i} {i + 1} ]", "answer": f"[ {i} {i + 1} ]"} for i in range(8)]
    (tasks / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    data = tmp_path / "data"
    prepare_dllm_data(
        {"t": tasks / "t.jsonl"},
        {"t": tasks / "t.jsonl"},
        ["the baker bakes the pie"] * 4,
        data,
        gen_length=16,
        bpe_vocab_size=40,
        n_pretrain_texts=4,
        log=lambda m: None,
    )
    spec = {
        "method": "llada",
        "tokenizer": "word",
        "data": "sft",
        "arch": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "train": {"steps": 2, "batch_size": 4, "lr": 1e-3, "ckpt_every": 2, "log_every": 1},
    }
    entered = []
    real = torch.autocast

    def spy(*a, **k):
        entered.append(k.get("dtype"))
        return real(*a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "autocast", spy)
        train_dllm_model("m", spec, data, tmp_path / "bf16", tmp_path / "ckpt", precision="bf16", log=lambda m: None)
    assert torch.bfloat16 in entered  # the training passes ran under bf16 autocast
    meta = json.loads((tmp_path / "bf16" / "config.json").read_text())
    assert meta["extra"]["precision"] == "bf16"
    logs = []  # another precision is another run: the bf16 checkpoint is not resumed by an fp32 run
    train_dllm_model("m", spec, data, tmp_path / "fp32", tmp_path / "ckpt", log=logs.append)
    assert any("not resuming" in m for m in logs), logs
    assert "precision" not in json.loads((tmp_path / "fp32" / "config.json").read_text())["extra"]


# ------------------------------------------------------------------ the Gen PPL evaluators' weights in bfloat16
def test_genppl_with_bf16_evaluator_weights_stays_within_its_standard_error(tok):
    """The paper profile loads its Gen PPL evaluators (Llama-2-7B, Llama-3-8B, GPT-2-large) with bfloat16 weights
    (config/paper.yaml `dtype`) and scores under the job's bf16 autocast, which already runs their matmuls in
    bfloat16: on a stand-in (a small GPT-2 trained on the toy world, 64 held-out sequences) the Gen PPL moves by a
    tiny fraction of its standard error against float32 weights, with or without autocast (docs/precision.md:
    measured 2.5e-5 nats/token against an s.e. of 1.5e-2 with a larger stand-in)."""
    import copy

    from transformers import GPT2Config, GPT2LMHeadModel

    from unie.data.toy_world import HMM
    from unie.eval.genppl import HFEvaluator
    from unie.eval.metrics import ppl_with_se

    torch.manual_seed(0)
    hmm = HMM("owt")
    g = torch.Generator().manual_seed(0)
    x = hmm.sample(512, 32, g)
    m = GPT2LMHeadModel(
        GPT2Config(
            n_layer=2,
            n_embd=64,
            n_head=2,
            vocab_size=tok.vocab_size,
            n_positions=64,
            bos_token_id=tok.eos_id,
            eos_token_id=tok.eos_id,
        )
    )
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    for _ in range(60):
        idx = torch.randint(0, len(x), (32,), generator=g)
        loss = m(x[idx], labels=x[idx]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    m.eval()
    texts = [tok.decode(r) for r in hmm.sample(64, 32, torch.Generator().manual_seed(1)).tolist()]

    def genppl(model, bf16):
        with autocast("cpu", "bf16" if bf16 else "fp32"):
            return ppl_with_se(*HFEvaluator(model, tok.hf, eos_rule="first", batch_size=16).score(texts))

    fp32 = genppl(m, False)
    assert fp32["nll_per_token"] < 0.98 * math.log(tok.vocab_size)  # trained: not the uniform model
    half = copy.deepcopy(m).to(torch.bfloat16)
    for other in (genppl(m, True), genppl(half, True), genppl(half, False)):
        assert abs(other["nll_per_token"] - fp32["nll_per_token"]) < 0.05 * fp32["nll_se"], (other, fp32)
