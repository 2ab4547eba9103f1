"""The lm-eval adapter answers like lm-eval's own models: the same greedy decode, sampled decode and
log-likelihood for a request whatever its batch size (1, 8, 64), its neighbours or the order of the requests,
for both toy backbones (LLaDA-like: BPE tokenizer, ``pad_to_batch``; Dream-like: shifted, fixed ``prompt_len``)
and a Hugging Face stand-in (a causal tiny Llama as an ``hf_dllm``: it sees any left padding); ``is_greedy``;
the CUDA fallback; refusing ``loglikelihood_rolling`` tasks before any work; warnings for ``gen_kwargs`` that are
not applied; tokens produced; and what the results JSON records about the model."""

from __future__ import annotations

import json
import logging
import random

import pytest

pytest.importorskip("lm_eval", reason="the dllm extra: pip install -e '.[dllm]'")
import torch
from lm_eval.api.instance import Instance

from standins import tiny_llama
from unie.core.options import ConfigError, ModelConfig
from unie.data.tasks import generate_task
from unie.data.tokenizer import bpe_tokenizer, word_tokenizer
from unie.dllm.backbone import DLLM, DecodeOptions, decode, greedy_matches
from unie.dllm.bridge import ProxyBridge
from unie.dllm.decoder import ARDecoder, DLLMDecoder, build_decoder
from unie.dllm.energy_decoding import DLLMEnergyOptions
from unie.dllm.lmeval import UnieLM, evaluate, resolve_device
from unie.methods.ar import AR
from unie.models.transformer import Transformer
from unie.pipeline.task_files import write_lmeval_tasks

pytestmark = pytest.mark.usefixtures("hf_offline")

N = 64
BATCH_SIZES = (1, 8, 64)
GK = {"until": ["\n"], "max_gen_toks": 8}


def _docs():
    """64 prompts of several lengths (toy_math and toy_gsm8k questions) and likelihood pairs over them."""
    docs = generate_task("toy_math", "test", N // 2, seed=5) + generate_task("toy_gsm8k", "test", N // 2, seed=5)
    return [d["question"] for d in docs], [(d["question"], " " + d["answer"]) for d in docs]


PROMPTS, PAIRS = _docs()


def _net(vocab, causal=False, seed=0, T=96):
    torch.manual_seed(seed)
    return Transformer(
        ModelConfig(vocab_size=vocab, d_model=32, n_layers=2, n_heads=2, max_len=T, causal=causal)
    ).eval()


@pytest.fixture(scope="module")
def toks():
    texts = PROMPTS + [c + x for c, x in PAIRS]
    words = sorted({w for t in texts for w in t.split()})
    return {"bpe": bpe_tokenizer(texts * 4, 200), "word": word_tokenizer(words, unk=True)}


def _backbone(tok, shift, seed=0):
    b = DLLM(_net(tok.vocab_size, seed=seed), tok.info(), shift=shift)
    b.tokenizer = tok
    return b


def _llada(toks, **kw):
    """The LLaDA-like row: BPE tokenizer, trained on length buckets (prompts padded to their own length)."""
    tok = toks["bpe"]
    return DLLMDecoder(
        _backbone(tok, False),
        tok,
        64,
        DecodeOptions(gen_length=8, block_length=8, tokens_per_step=2),
        pad_to_batch=True,
        mc_num=8,
        name="llada",
        **kw,
    )


def _dream(toks):
    """The Dream-like row: shifted logits, entropy confidence, a fixed prompt_len."""
    tok = toks["word"]
    return DLLMDecoder(
        _backbone(tok, True, seed=1),
        tok,
        64,
        DecodeOptions(gen_length=8, block_length=4, tokens_per_step=2, confidence="entropy"),
        mc_num=8,
        name="dream",
    )


def _energy(toks):
    """Algorithm 3 with K=3 sampled candidates (temperature 1): the noise is per row."""
    tok = toks["bpe"]
    ar = AR(tok.info()).wrap(_net(tok.vocab_size, causal=True, seed=2))
    ar.tokenizer = tok
    return _llada(
        toks, options=DLLMEnergyOptions(K=3, w=1.0, temperature=1.0), proxy=ProxyBridge(ar, tok), sampler="energy"
    )


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_det") / "dllm"
    words = sorted({w for t in PROMPTS for w in t.split()})
    tok = word_tokenizer(words, unk=True)
    tok.hf.save_pretrained(root)
    tiny_llama(tok.vocab_size, 0).save_pretrained(root)  # 64 positions
    return root


def _hf_args(hf_dir, **kw):
    return {
        "pretrained": str(hf_dir),
        "kind": "hf_dllm",
        "style": "llada",
        "gen_length": 8,
        "block_length": 8,
        "tokens_per_step": 2,
        "mc_num": 8,
        **kw,
    }


def _gen_requests(prompts):
    return [Instance(request_type="generate_until", doc={}, arguments=(p, dict(GK)), idx=0) for p in prompts]


def _ll_requests(pairs):
    return [Instance(request_type="loglikelihood", doc={}, arguments=pair, idx=0) for pair in pairs]


def _answers(decoder, method, items, make):
    """``{item: answer}`` from the adapter at every batch size, in input order and shuffled (another task mix)."""
    runs = []
    for bs in BATCH_SIZES:
        for order in (list(range(len(items))), random.Random(bs).sample(range(len(items)), len(items))):
            lm = UnieLM(decoder=decoder, batch_size=bs)
            out = getattr(lm, method)(make([items[i] for i in order]), disable_tqdm=True)
            runs.append({order[k]: out[k] for k in range(len(order))})
    return runs


def _assert_invariant(runs):
    first = runs[0]
    for run in runs[1:]:
        diff = [i for i in first if first[i] != run[i]]
        assert not diff, f"{len(diff)} of {len(first)} answers changed with the batch or order: {diff[:5]}"


@pytest.mark.parametrize("make", [_llada, _dream, _energy], ids=["llada_like", "dream_like", "energy_sampled"])
def test_toy_decodes_do_not_depend_on_batch_or_order(toks, make):
    runs = _answers(make(toks), "generate_until", PROMPTS, _gen_requests)
    _assert_invariant(runs)
    assert len(set(runs[0].values())) > 1  # not a degenerate constant answer


@pytest.mark.parametrize("make", [_llada, _dream], ids=["llada_like", "dream_like"])
def test_toy_loglikelihoods_do_not_depend_on_batch_order_or_generation(toks, make):
    dec = make(toks)
    runs = _answers(dec, "loglikelihood", PAIRS, _ll_requests)
    _assert_invariant(runs)
    lm = UnieLM(decoder=dec, batch_size=8)  # generating first (another sampler state) changes nothing
    lm.generate_until(_gen_requests(PROMPTS[:5]), disable_tqdm=True)
    assert lm.loglikelihood(_ll_requests(PAIRS), disable_tqdm=True) == [runs[0][i] for i in range(len(PAIRS))]
    seeded = make(toks)
    seeded.seed = 1  # the model_args seed reaches the Monte-Carlo noise
    assert seeded.loglikelihood(*zip(*PAIRS[:4])) != [runs[0][i][0] for i in range(4)]


def test_hf_standin_decodes_and_loglikelihoods_do_not_depend_on_batch(hf_dir):
    dec = build_decoder(_hf_args(hf_dir))
    _assert_invariant(_answers(dec, "generate_until", PROMPTS, _gen_requests))
    pairs = [(c, x) for c, x in PAIRS if len(dec.tok.encode(c + x)) < 60][:16]
    _assert_invariant(_answers(dec, "loglikelihood", pairs, _ll_requests))


def test_the_forward_pass_of_a_row_is_the_same_in_any_batch(toks, hf_dir):
    """What batch invariance rests on, measured: a row's logits computed alone and inside a batch of 8 or 64 rows
    of the same length are bit-identical on this CPU (both toy networks and the tiny Llama)."""
    tok = toks["bpe"]
    rows = [ids[:12] for ids in tok.encode_batch(PROMPTS) if len(ids) >= 12][:N]
    x = torch.tensor(rows)
    hf = build_decoder(_hf_args(hf_dir)).backbone
    xh = torch.randint(0, 20, (N, 12), generator=torch.Generator().manual_seed(0))
    for model, inp in ((_backbone(tok, False), x), (_backbone(tok, True), x), (hf, xh)):
        full = model.logits(inp)
        for bs in (1, 8):
            part = torch.cat([model.logits(inp[s : s + bs]) for s in range(0, len(inp), bs)])
            assert torch.equal(part, full), float((part - full).abs().max())


# ---------------------------------------------------------------------- is_greedy
def test_is_greedy_ar_and_dllm(toks):
    tok = toks["word"]
    ar_model = AR(tok.info()).wrap(_net(tok.vocab_size, causal=True, seed=3))
    ar = ARDecoder(ar_model, tok, gen_length=4)
    found = None
    for ctx in PROMPTS:  # a context whose exact greedy continuation (two tokens) reads back as itself
        x = torch.tensor([[tok.bos_id] + tok.encode(ctx)])
        for _ in range(2):
            x = torch.cat([x, ar_model.logits(x)[:, -1].argmax(-1, keepdim=True)], dim=1)
        greedy = " " + tok.decode(x[0, -2:].tolist())
        if tok.encode(greedy) == x[0, -2:].tolist():
            found = ctx, greedy, x[0, -2:].tolist()
            break
    assert found is not None
    ctx, greedy, ids = found
    other = " " + tok.decode(
        [
            ids[0],
            next(
                v
                for v in range(tok.vocab_size)
                if v != ids[1] and tok.encode(" " + tok.decode([ids[0], v])) == [ids[0], v]
            ),
        ]
    )
    lm = UnieLM(decoder=ar, batch_size=2)
    (_, g), (_, o) = lm.loglikelihood(_ll_requests([(ctx, greedy), (ctx, other)]), disable_tqdm=True)
    assert g is True and o is False

    dec = _dream(toks)  # DLLM: LLaDA's rule, one token per step by confidence
    prefix = [tok.bos_id] + tok.encode(ctx)
    T = 3
    x = torch.tensor([prefix + [tok.mask_id] * T])
    out, _ = decode(
        dec.backbone, x, DecodeOptions(gen_length=T, block_length=T, tokens_per_step=1, confidence="entropy")
    )
    target = out[0, len(prefix) :].tolist()
    assert greedy_matches(dec.backbone, prefix, target, "entropy")
    wrong = target[:-1] + [next(v for v in range(4, tok.vocab_size) if v != target[-1])]
    assert not greedy_matches(dec.backbone, prefix, wrong, "entropy")
    text = " " + tok.decode(target)
    if tok.encode(text) == target:  # the decoded tokens read back as themselves
        ((_, flag),) = UnieLM(decoder=dec).loglikelihood(_ll_requests([(ctx, text)]), disable_tqdm=True)
        assert flag is True


# ---------------------------------------------------------------------- adapter behaviour
class Fake:
    """A decoder with ``gen_length``, per-row token counts and ``count_tokens`` (words)."""

    name, gen_length = "fake", 4

    def generate(self, prompts, max_new_tokens):
        return [p + " a b\nc d" for p in prompts], {"nfe": 1, "generated_tokens": 99, "row_tokens": [4] * len(prompts)}

    def count_tokens(self, text):
        return len(text.split())

    def loglikelihood(self, contexts, continuations):
        return [0.0] * len(contexts)


def test_cuda_without_cuda_falls_back_to_cpu_with_a_warning(caplog):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with caplog.at_level(logging.WARNING, logger="unie.dllm.lmeval"):
        assert resolve_device("cuda:0") == "cpu"
        lm = UnieLM(decoder=Fake(), device="cuda:0")
    assert str(lm.device) == "cpu" and "CUDA is not available" in caplog.text and "--device cpu" in caplog.text
    assert resolve_device(None) == "cpu" and resolve_device("cpu") == "cpu"


def test_unapplied_gen_kwargs_warn_once_and_tokens_are_counted_to_the_cut(caplog):
    lm = UnieLM(decoder=Fake(), batch_size=2)
    sampled = {"until": ["\n"], "max_gen_toks": 16, "do_sample": True, "temperature": 0.7}
    reqs = [
        Instance(request_type="generate_until", doc={}, arguments=(f"p{i}", dict(sampled)), idx=0) for i in range(4)
    ]
    with caplog.at_level(logging.WARNING, logger="unie.dllm.lmeval"):
        out = lm.generate_until(reqs, disable_tqdm=True)
        lm.generate_until(reqs[:1], disable_tqdm=True)
    assert out == [f"p{i} a b" for i in range(4)]
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("max_gen_toks=16 exceeds the decoder's gen_length 4" in w for w in warnings) == 1
    assert sum("'do_sample': True" in w and "not applied" in w for w in warnings) == 1
    assert lm.stats["generated_tokens"] == 5 * 3  # "pN a b": 3 tokens before the cut (not 4, not 99)
    greedy = {"until": ["\n"], "max_gen_toks": 4, "do_sample": False, "temperature": 0.0}
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="unie.dllm.lmeval"):
        UnieLM(decoder=Fake()).generate_until(
            [Instance(request_type="generate_until", doc={}, arguments=("q", greedy), idx=0)], disable_tqdm=True
        )
    assert not caplog.records  # greedy settings are what the greedy samplers do: nothing to warn about


def test_dllm_counts_tokens_up_to_the_first_eos_and_checks_positions_in_generate(toks, hf_dir):
    dec = _llada(toks)
    texts, counters = dec.generate(PROMPTS[:6], 8)
    assert counters["generated_tokens"] == sum(counters["row_tokens"]) and len(counters["row_tokens"]) == 6
    assert all(1 <= n <= 8 for n in counters["row_tokens"])
    _, short = dec.generate(PROMPTS[:6], 3)
    assert all(n <= 3 for n in short["row_tokens"])
    far = build_decoder(_hf_args(hf_dir, gen_length=62, block_length=62))
    with pytest.raises(ConfigError, match="exceeds the 64 positions"):
        far.generate(PROMPTS[:2], 8)  # a direct call (the sweeps' timing) is refused too, before any pass


ROLLING_YAML = """task: toy_rolling
dataset_path: json
dataset_kwargs:
  data_files:
    test: "{test}"
output_type: loglikelihood_rolling
test_split: test
doc_to_text: ""
doc_to_target: "{{{{question}}}}"
metric_list:
  - metric: word_perplexity
metadata:
  version: 1.0
"""


def test_loglikelihood_rolling_tasks_are_refused_before_any_work(tmp_path, monkeypatch):
    import unie.dllm.decoder as dllm_mod

    task_dir = tmp_path / "tasks"
    write_lmeval_tasks(task_dir, 1, 3, 0)
    (task_dir / "toy_rolling.yaml").write_text(ROLLING_YAML.format(test=task_dir / "data" / "toy_math_test.jsonl"))
    built = []
    monkeypatch.setattr(dllm_mod, "build_decoder", lambda args: built.append(args))
    with pytest.raises(ValueError, match="task 'toy_rolling' has output_type 'loglikelihood_rolling'"):
        evaluate(
            {"pretrained": "x"},
            ["toy_math", "toy_rolling"],
            task_dir,
            tmp_path / "out",
            batch_size=4,
            log=lambda m: None,
        )
    assert built == [] and not (tmp_path / "out").exists()


def test_results_json_records_the_checkpoint_sampler_and_options(tmp_path, hf_dir):
    task_dir = tmp_path / "tasks"
    write_lmeval_tasks(task_dir, 1, 3, 0)
    args = _hf_args(hf_dir, sampler="core", remask=0, seed=7)
    found = evaluate(args, ["toy_math"], task_dir, tmp_path / "out", batch_size=4, log=lambda m: None)
    config = json.loads(found.read_text())["config"]
    assert config["model_args"]["pretrained"] == str(hf_dir) and config["model_args"]["sampler"] == "core"
    assert config["model_args"]["options"] == {"remask": 0} and config["model_args"]["seed"] == 7
    rec = config["unie_decoder"]
    assert rec["checkpoint"] == str(hf_dir) and rec["sampler"] == "core" and rec["options"]["remask"] == 0
    assert rec["decoding"]["gen_length"] == 8 and rec["seed"] == 7
    found = evaluate(
        _hf_args(hf_dir), ["toy_math"], task_dir, tmp_path / "out2", batch_size=4, seed=3, limit=2, log=lambda m: None
    )
    assert json.loads(found.read_text())["config"]["model_args"]["seed"] == 3  # evaluate's seed reaches the noise


def _samples(res) -> dict:
    return {(task, s["doc_id"]): s["resps"] for task, rows in res["samples"].items() for s in rows}


def test_simple_evaluate_gives_the_same_samples_for_any_task_order_and_batch_size(tmp_path, hf_dir):
    """Through lm-eval itself: two generative tasks and a multiple-choice (log-likelihood) task, in two orders, at
    batch sizes 1 and 64: every sample's responses are the same; the model named by string (``import unie.dllm.lmeval``
    registers it) records its model_args."""
    import lm_eval
    from lm_eval.tasks import TaskManager
    from test_lmeval_dp import MC_YAML

    task_dir = tmp_path / "tasks"
    write_lmeval_tasks(task_dir, 1, 6, 0)
    (task_dir / "toy_mmlu_mc.yaml").write_text(MC_YAML.format(test=task_dir / "data" / "toy_mmlu_test.jsonl"))
    dec = build_decoder(_hf_args(hf_dir))
    runs = []
    for bs, tasks in ((1, ["toy_math", "toy_gsm8k", "toy_mmlu_mc"]), (64, ["toy_mmlu_mc", "toy_gsm8k", "toy_math"])):
        res = lm_eval.simple_evaluate(
            model=UnieLM(decoder=dec, batch_size=bs),
            tasks=tasks,
            bootstrap_iters=0,
            log_samples=True,
            task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
        )
        runs.append(_samples(res))
    assert len(runs[0]) == 18 and runs[0] == runs[1]
    res = lm_eval.simple_evaluate(
        model="unie_dllm",
        model_args=_hf_args(hf_dir),
        tasks=["toy_math"],
        limit=2,
        device="cpu",
        bootstrap_iters=0,
        task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
    )
    assert res["config"]["model_args"]["pretrained"] == str(hf_dir)
    assert res["config"]["unie_decoder"]["sampler"] == "plain"


def test_the_command_line_refuses_a_rolling_task_before_answering_anything(tmp_path):
    """``python -m unie.dllm.lmeval`` (lm-eval's own CLI): a loglikelihood_rolling task beside a generative one is refused
    before the adapter answers any request; nothing is written.  The decoder factory is a fake that records calls."""
    import subprocess
    import sys

    task_dir = tmp_path / "tasks"
    write_lmeval_tasks(task_dir, 1, 3, 0)
    (task_dir / "toy_rolling.yaml").write_text(ROLLING_YAML.format(test=task_dir / "data" / "toy_math_test.jsonl"))
    calls = tmp_path / "calls.txt"
    driver = tmp_path / "driver.py"
    driver.write_text(f"""
import runpy, sys, types
class Decoder:
    def __init__(self, args):
        self.name = "fake"
    def generate(self, prompts, max_new_tokens):
        open({str(calls)!r}, "a").write("generate\\n")
        return ["1"] * len(prompts), {{"nfe": 1, "generated_tokens": len(prompts)}}
    def loglikelihood(self, contexts, continuations):
        open({str(calls)!r}, "a").write("loglikelihood\\n")
        return [0.0] * len(contexts)
fake = types.ModuleType("unie.dllm.decoder")
fake.build_decoder = Decoder
sys.modules["unie.dllm.decoder"] = fake
runpy.run_module("unie.dllm.lmeval", run_name="__main__", alter_sys=True)
""")
    cmd = [
        sys.executable,
        str(driver),
        "--model",
        "unie_dllm",
        "--device",
        "cpu",
        "--model_args",
        "pretrained=toy",
        "--tasks",
        "toy_math,toy_rolling",
        "--include_path",
        str(task_dir),
        "--output_path",
        str(tmp_path / "out"),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert r.returncode != 0
    assert "task 'toy_rolling' has output_type 'loglikelihood_rolling'" in r.stderr, r.stderr[-3000:]
    assert not calls.exists() and not (tmp_path / "out").exists()


def test_a_rows_results_json_names_its_proxy_batch_weights_and_device(tmp_path, hf_dir, caplog):
    """What a reader of a Table 3 row's results JSON needs: the proxy by name, the batch size, the SHA-256
    of the weights the answers came from (model and proxy), the device actually used (after a CUDA fallback: the cpu,
    in fp32, whatever the precision asked for)."""
    import hashlib

    task_dir = tmp_path / "tasks"
    write_lmeval_tasks(task_dir, 1, 3, 0)
    args = _hf_args(hf_dir, proxy=str(hf_dir), energy="uni", K=2, w=1.0, precision="bf16")
    device = "cpu" if torch.cuda.is_available() else "cuda"  # the fallback where there is no CUDA
    with caplog.at_level(logging.WARNING, logger="unie.dllm.lmeval"):
        found = evaluate(
            {**args, "device": device},
            ["toy_math"],
            task_dir,
            tmp_path / "out",
            batch_size=4,
            limit=2,
            log=lambda m: None,
        )
    config = json.loads(found.read_text())["config"]
    rec = config["unie_decoder"]
    assert rec["proxy"] == str(hf_dir) and config["model_args"]["proxy"] == str(hf_dir)
    assert config["batch_size"] == 4 and config["device"] == "cpu" and rec["device"] == "cpu"
    digest = hashlib.sha256((hf_dir / "model.safetensors").read_bytes()).hexdigest()
    for role in ("model", "proxy"):
        w = rec["weights"][role]
        assert w["path"] == str(hf_dir) and w["files"] == {"model.safetensors": digest}
        assert w["sha256"] == hashlib.sha256(f"model.safetensors {digest}\n".encode()).hexdigest()
    if device == "cuda":  # the fallback: the cpu runs fp32, and says so
        assert rec["precision"] == "fp32" and config["model_args"]["precision"] == "fp32"
        assert "the cpu runs fp32" in caplog.text
    else:
        assert rec["precision"] == "bf16"


def test_bf16_loads_a_hugging_face_model_in_bfloat16_and_ours_in_float32(hf_dir, toks):
    """precision bf16: the Hugging Face backbone and proxy are loaded in bfloat16 weights (LLaDA's and Dream's own
    evaluations: float32 weights would double the memory of an 8B model); logits stay float32."""
    dec = build_decoder(_hf_args(hf_dir, proxy=str(hf_dir), sampler="apd", precision="bf16"))
    assert next(dec.backbone.model.parameters()).dtype == torch.bfloat16
    assert next(dec.proxy.model.model.parameters()).dtype == torch.bfloat16
    assert dec.backbone.logits(torch.tensor([[1, 2, 3]])).dtype == torch.float32
    fp32 = build_decoder(_hf_args(hf_dir))
    assert next(fp32.backbone.model.parameters()).dtype == torch.float32


@pytest.mark.parametrize("mc_num", [100, 33, 0])
def test_an_mc_num_the_estimator_cannot_honour_is_refused(hf_dir, mc_num):
    with pytest.raises(ConfigError, match=f"mc_num={mc_num}: .* 1..32 or a multiple of 32"):
        build_decoder(_hf_args(hf_dir, mc_num=mc_num))


def test_mc_num_is_honoured_exactly(toks, monkeypatch):
    """mc_num copies exactly: 96 = three passes of 32 (not 96 // 32 rounded), 5 = one pass of 5; a direct call
    with a remainder is refused instead of drawing fewer copies (it drew 96 of 100)."""
    from unie.dllm import backbone as bb

    dec = _llada(toks)
    rows = []
    real = dec.backbone.logits
    monkeypatch.setattr(dec.backbone, "logits", lambda x: rows.append(x.shape[0]) or real(x))
    for n in (96, 5):
        rows.clear()
        bb.mc_loglikelihood(
            dec.backbone,
            [1, 2, 3],
            [4, 5, 6],
            mc_num=n,
            batch_size=min(n, 32),
            generator=torch.Generator().manual_seed(0),
        )
        assert sum(rows) == n
    with pytest.raises(ValueError, match="mc_num=100 is not a positive multiple of batch_size=32"):
        bb.mc_loglikelihood(dec.backbone, [1, 2, 3], [4, 5, 6], mc_num=100, batch_size=32)
