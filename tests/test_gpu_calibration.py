"""The map's calibration point (``scripts/gpu_calibration.py``, ``unie.pipeline.calibration``): the oracle over a
real tokenizer (:class:`unie.dllm.oracle.TextOracleLM`) against brute force, the bridge's on-model scoring against its
CPU reading, and the script end to end on tiny stand-ins, every number of its record re-derived from its per-item
results with code of this file."""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from unie.data.tokenizer import bpe_tokenizer, word_tokenizer
from unie.dllm.bridge import ProxyBridge
from unie.dllm.oracle import OracleLM, TextOracleLM

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_calibration.py"
EPS = 0.1


# ---------------------------------------------------------------------- the oracle over a real tokenizer
@pytest.fixture(scope="module")
def words():
    return word_tokenizer(["q", "a", "b", "c", "=", ":"])


def test_text_oracle_is_a_product_of_eps_point_masses_on_the_reference(words):
    """Brute force over every continuation of 3 tokens (V^3 of them) after a prompt: the oracle's probabilities sum
    to 1 (a distribution over continuations, the chain rule), each next-token distribution sums to 1, the reference's
    continuation has probability (1 - eps)^3 and every other one the product of its matches' (1 - eps) and its misses'
    eps / (V - 1); the prompt's last token is the first scored position (an answer may glue onto it)."""
    V = words.vocab_size
    prompt, ref = "q a :", " b c"
    oracle = TextOracleLM({prompt: ref}, words, EPS)
    P = words.encode(prompt)
    R = words.encode(prompt + ref) + [words.eos_id]
    assert R[: len(P)] == P
    total = 0.0
    for cont in itertools.product(range(V), repeat=3):
        x = torch.tensor([[words.bos_id] + P + list(cont)])
        lp = oracle.next_token_logp(x)[0]
        full = oracle.logits(x)[0]
        assert torch.allclose(full.exp().sum(-1), torch.ones(x.shape[1], dtype=torch.float64))
        assert torch.equal(full[:-1].gather(-1, x[0, 1:, None]).squeeze(-1), lp)  # the same numbers, two readings
        # by hand: the prompt's first tokens uniform, its last one and the continuation against R
        want = [-math.log(V)] * (len(P) - 1)
        for k, y in enumerate([P[-1], *cont], start=len(P) - 1):
            want.append(math.log1p(-EPS) if y == R[k] else math.log(EPS / (V - 1)))
        assert lp.tolist() == pytest.approx(want)
        total += math.exp(sum(want[len(P) :]))
    assert total == pytest.approx(1.0)
    x = torch.tensor([[words.bos_id] + R])
    assert float(oracle.next_token_logp(x)[0, len(P) :].sum()) == pytest.approx(3 * math.log1p(-EPS))


def test_text_oracle_on_a_word_tokenizer_is_the_toy_oracle_on_answers(words):
    """On the toy world's word tokenizer its answer positions (the answer's words and <eos>) are OracleLM's."""
    refs = {"q a :": "b c", "q b :": "a"}
    toy, text = OracleLM(refs, words, EPS), TextOracleLM({p: " " + r for p, r in refs.items()}, words, EPS)
    for p, r in refs.items():
        n = len(words.encode(p))
        for answer in (r, "c c c", "a"):
            x = torch.tensor([[words.bos_id] + words.encode(p + " " + answer) + [words.eos_id]])
            got = text.next_token_logp(x)[0, n:]
            want = toy.logits(x)[0, :-1].gather(-1, x[0, 1:, None]).squeeze(-1)[n:]
            assert torch.allclose(got, want)


def test_text_oracle_finds_an_item_whose_prompt_text_came_back_altered(words):
    """A row whose prompt text differs near its end (the bridge's piecewise text can turn a split character into
    U+FFFD) is its item's when it shares 90 % of the prompt and no other prompt shares as much; else a KeyError."""
    long = " ".join(["q", "a", "b", "c"] * 5) + " :"
    oracle = TextOracleLM({long: " a", "q a :": " b"}, words, EPS)
    altered = long[:-3] + "b :"  # the last word changed: 38 of 41 characters shared
    x = torch.tensor([[words.bos_id] + words.encode(altered + " a")])
    assert oracle.reference(x[0].tolist()) == oracle.reference([words.bos_id] + words.encode(long + " a"))
    with pytest.raises(KeyError, match="no reference answer"):
        oracle.reference([words.bos_id] + words.encode("q a b c = :"))


def test_text_oracle_reads_the_reference_in_context_where_the_tokenizer_merges():
    """A byte-pair tokenizer that merges the prompt's last piece with the answer's first (``:`` + ``\\n`` -> ``:\\n``):
    the reference's tokens are those of prompt + reference, and the merged token is the first scored one."""
    texts = ["Answer:\n7 apples", "Answer:\n9 pears", "Question: Answer:"] * 50
    tok = bpe_tokenizer(texts, 60)
    prompt, ref = "Question: Answer:", "\n7 apples"
    P, whole = tok.encode(prompt), tok.encode(prompt + ref)
    assert whole[: len(P) - 1] == P[:-1] and whole[len(P) - 1] != P[-1]  # the merge this test is about
    oracle = TextOracleLM({prompt: ref}, tok, EPS)
    for cont, n_right in ((ref, len(whole) - len(P) + 2), ("\n9 pears", None)):
        x = torch.tensor([[tok.bos_id] + tok.encode(prompt + cont) + [tok.eos_id]])
        lp = oracle.next_token_logp(x)[0]
        assert lp[: len(P) - 1].tolist() == pytest.approx([-math.log(tok.vocab_size)] * (len(P) - 1))
        right = sum(v == pytest.approx(math.log1p(-EPS)) for v in lp[len(P) - 1 :].tolist())
        if n_right is not None:
            assert right == n_right  # every token from the merged one to <eos>
        else:
            assert right < len(lp) - len(P) + 1
    with pytest.raises(KeyError, match="no reference answer"):
        oracle.next_token_logp(torch.tensor([[tok.bos_id] + tok.encode("Answer: 7")]))
    with pytest.raises(ValueError, match="eps"):
        TextOracleLM({prompt: ref}, tok, 1.0)


def test_bridge_on_model_scores_are_the_cpu_reading(tmp_path):
    """ProxyBridge(on_model=True) reads next_token_logp (the gather where the model computes): for a Hugging Face
    causal proxy of another tokenizer, on the CPU the same numbers, bit for bit, as the (N, L, V) log-probabilities it
    reads otherwise; for the text oracle its exact log-probabilities (the other reading re-normalises them)."""
    from unie.data.dllm_format import dllm_prompt_rows
    from unie.models.hf import load_hf_causal
    from unie.models.standins import write_hf_standin

    texts = ["Question: Ann has 2 apples.\nAnswer: 2 + 1 = 3 apples", "Question: Bob has 4.\nAnswer: 4"] * 30
    dtok, ptok = bpe_tokenizer(texts, 70), bpe_tokenizer(texts, 50)
    model = load_hf_causal(write_hf_standin(tmp_path / "proxy", ptok, seed=3), trust_remote_code=False)
    prompt = "Question: Ann has 2 apples.\nAnswer:"
    oracle = TextOracleLM({prompt: " 2 + 1 = 3 apples"}, model.tokenizer, EPS)
    rows = [dtok.encode(c) + [dtok.eos_id] for c in (" 2 + 1 = 3 pears", " 4 apples 4 4")]
    G = max(len(r) for r in rows) + 1
    P = len(dtok.encode(prompt)) + 1
    x = dllm_prompt_rows(dtok, [prompt, prompt], P, G)
    for i, r in enumerate(rows):
        x[i, P:] = torch.tensor(r + [dtok.eos_id] * (G - len(r)))
    for lm in (model, oracle):
        slow, fast = ProxyBridge(lm, dtok), ProxyBridge(lm, dtok, on_model=True)
        assert fast.on_model and not slow.on_model
        a, b = slow.position_logp(x, P + 3), fast.position_logp(x, P + 3)
        if lm is model:
            assert torch.equal(a, b)
        else:  # the CPU reading re-normalises the oracle's log-probabilities (a log-softmax of them): 1e-15 apart
            assert torch.allclose(a, b, rtol=0, atol=1e-12) and not torch.equal(a, torch.zeros_like(a))
        assert fast.forwards == slow.forwards == 1


def test_ratio_se_is_the_ratio_estimators():
    from unie.eval.metrics import ratio_mean_se

    y, x = [1, 0, 3, 2], [2, 2, 4, 3]
    r = sum(y) / sum(x)
    se = math.sqrt(sum((a - r * b) ** 2 for a, b in zip(y, x)) / (4 * 3)) / (sum(x) / 4)
    assert ratio_mean_se(y, x) == pytest.approx((r, se))
    assert math.isnan(ratio_mean_se([0], [0])[0]) and math.isnan(ratio_mean_se([1], [2])[1])


# ---------------------------------------------------------------------- the script on tiny stand-ins
def _flexible_extract(text: str, until: list[str]) -> str:
    """lm-eval gsm8k's flexible-extract answer of a completion, written out here: cut at the first stop string, the
    last match of its regex (the first non-empty group), stripped; ``[invalid]`` without one."""
    cut = min((i for i in (text.find(s) for s in until if s) if i >= 0), default=len(text))
    found = re.findall(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", text[:cut])
    if not found:
        return "[invalid]"
    return next(g for g in found[-1] if g).strip()


def _gsm8k_exact(pred: str, answer: str) -> float:
    def norm(s):
        for pattern in (",", r"\$", r"(?s).*#### ", r"\.$"):
            s = re.sub(pattern, "", s)
        return s.lower()

    return float(norm(pred) == norm(answer))


UNTIL = ["Question:", "</s>", "<|im_end|>"]  # lm-eval gsm8k's stop strings


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The script as a later session runs it, with --tiny --device cpu: GSM8K-like items written here (as
    openai/gsm8k's parquet), tiny random stand-ins, offline, a throw-away Hugging Face cache."""
    import os

    import pandas as pd

    sys.path.insert(0, str(REPO / "scripts"))
    from gpu_calibration import tiny_gsm8k

    root = tmp_path_factory.mktemp("calibration")
    data = root / "gsm8k.parquet"
    pd.DataFrame(tiny_gsm8k(6, seed=5)).to_parquet(data)
    env = {
        **os.environ,
        "HF_HOME": str(root / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
    }
    out = root / "out"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--tiny",
            "--device",
            "cpu",
            "--out",
            str(out),
            "--limit",
            "5",
            "--data",
            str(data),
            "--cap",
            "4",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads((out / "calibration.json").read_text()), proc.stdout


def test_tiny_run_records_every_item_and_phase(tiny_run):
    out, rec, stdout = tiny_run
    assert rec["status"] == "complete" and rec["phase"] == "done" and "stopped" not in rec
    assert rec["tiny"] and rec["requested_items"] == 5 and len(rec["items"]) == 5 == rec["summary"]["items"]
    s = rec["settings"]
    assert s["rows"] == {"backbone": "llada", "energy": "llada_uni", "oracle": "llada_ind"}
    assert s["energy_options"]["energy"] == "uni" and s["oracle_options"]["energy"] == "ind"
    # the paper's Algorithm 3 settings, read from config/paper.yaml (the tiny run shrinks only gen_length/block)
    from unie.config.profile import resolve_config

    paper = resolve_config([REPO / "config" / "paper.yaml"])["dllm"]
    for k in ("K", "w", "temperature", "selection", "greedy_first"):
        assert s["energy_options"][k] == s["oracle_options"][k] == paper["energy"][k]
    assert s["decoding"]["tokens_per_step"] == paper["decoding"]["tokens_per_step"]
    assert (s["decoding"]["gen_length"], s["decoding"]["block_length"]) == (32, 8)
    grid = resolve_config()["dllm"]  # the paper profile leaves the toy map out: the oracle's eps is the map's
    assert s["metric"] == paper["tasks"]["metrics"]["gsm8k"] and s["oracle_eps"] == grid["map"]["oracle_eps"]
    for it in rec["items"]:  # lm-eval's gsm8k prompt, 0-shot, through the stand-in's chat template (no <bos> text)
        assert it["prompt"].startswith("<user> Question: ") and it["prompt"].endswith("\nAnswer:\n<assistant> ")
    assert set(rec["models"]["weights"]["backbone"]["sizes"]) == {"model.safetensors"}
    md = (out / "calibration.md").read_text()
    assert "candidates disagree" in md and "explored ceiling" in md and "complete" in md
    assert sorted(p.name for p in out.iterdir()) == ["calibration.json", "calibration.md", "standins"]


def test_tiny_run_scores_are_lm_evals_gsm8k_metric(tiny_run):
    """Every recorded score is lm-eval's flexible-extract exact match of its recorded text, re-derived here."""
    _, rec, _ = tiny_run
    for it in rec["items"]:
        for decode in ("backbone", "energy", "oracle"):
            pred = _flexible_extract(it[decode]["text"], UNTIL)
            assert it[decode]["score"] == _gsm8k_exact(pred, it["target"]), (it["doc_id"], decode)


def test_tiny_run_summary_is_its_items(tiny_run):
    """The record's numbers from its per-item results: accuracies, the paired changes and their s.e., the window
    shares (pooled), the tree's room, each rule's path in the tree (the oracle's path score on each item)."""
    _, rec, _ = tiny_run
    items, s = rec["items"], rec["summary"]
    n = len(items)
    base = [it["backbone"]["score"] for it in items]
    for decode in ("backbone", "energy", "oracle"):
        assert s["accuracy"][decode]["mean"] == pytest.approx(100 * sum(it[decode]["score"] for it in items) / n)
    for decode in ("energy", "oracle"):
        d = [it[decode]["score"] - b for it, b in zip(items, base)]
        mean = sum(d) / n
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
        assert s["change"][decode]["delta"] == pytest.approx(100 * mean)
        assert s["change"][decode]["se"] == pytest.approx(100 * sd / math.sqrt(n))
        assert s["change"][decode]["changed_items"] == sum(it[decode]["text"] != it["backbone"]["text"] for it in items)
        w = s["window"][decode]
        rows = sum(it[decode]["window_rows"] for it in items)
        assert w["window_rows"] == rows and 0 < rows <= 2 * n  # the tiny decode's window: iterations 0 and 1
        assert w["disagree"] == pytest.approx(sum(it[decode]["disagree_rows"] for it in items) / rows)
        assert w["steered"] == pytest.approx(sum(it[decode]["steered_rows"] for it in items) / rows)
        assert 0.0 <= w["steered"] <= w["disagree"] <= 1.0
    t = s["tree"]
    assert t["items"] == n
    for name, pick in (("ceiling", max), ("floor", min)):
        assert t[name]["delta"] == pytest.approx(
            100 * sum(pick(it["tree"]["scores"]) - b for it, b in zip(items, base)) / n
        )
    assert t["ceiling"]["delta"] >= max(s["change"]["oracle"]["delta"], s["change"]["energy"]["delta"]) - 1e-9
    for it in items:
        tr = it["tree"]
        assert len(tr["scores"]) == tr["leaves"] >= 1
        for decode in ("energy", "oracle"):
            # the tree is the decoder's (on a CPU): each rule's path is its decode, its counters energy_decode's
            assert tr["scores"][tr[f"{decode}_leaf"]] == it[decode]["score"]
            assert tr[f"{decode}_text"] == it[decode]["text"]
            assert tr[f"{decode}_counters"] == {
                k: it[decode][k] for k in ("window_rows", "disagree_rows", "steered_rows")
            }
    assert t["paths"]["oracle"]["same_text"] == t["paths"]["energy"]["same_counters"] == n
    assert t["rerank_change"]["delta"] == pytest.approx(
        100 * sum(it["tree"]["scores"][it["tree"]["rerank_leaf"]] - b for it, b in zip(items, base)) / n
    )
    for name in ("dlm", "rerank", "energy", "oracle"):
        a = t["auc"][name]
        assert a["auc"] is None or 0.0 <= a["auc"] <= 1.0


def test_summary_is_re_derived_from_its_items():
    """summarise on per-item records with varied scores and counters (the tiny models score 0 almost everywhere):
    every number against this file's own arithmetic."""
    import random

    from unie.pipeline.calibration import summarise

    rng = random.Random(3)
    items = []
    for i in range(9):
        it = {"doc_id": i}
        for decode in ("backbone", "energy", "oracle"):
            rows = rng.randint(1, 13)
            dis = rng.randint(0, rows)
            it[decode] = {
                "score": float(rng.random() < 0.5),
                "text": str(rng.randint(0, 2)),
                "window_rows": rows,
                "disagree_rows": dis,
                "steered_rows": rng.randint(0, dis),
            }
        for decode in ("energy", "oracle"):
            it[decode]["changed"] = it[decode]["text"] != it["backbone"]["text"]
        scores = [float(rng.random() < 0.5) for _ in range(rng.randint(1, 4))]
        it["tree"] = {
            "scores": scores,
            "exhaustive": rng.random() < 0.5,
            "leaves": len(scores),
            "rerank_leaf": 0,
            "energy_leaf": 0,
            "oracle_leaf": 0,
            "energy_text": it["energy"]["text"],
            "oracle_text": "x",
            "energy_counters": {},
            "oracle_counters": {},
        }
        items.append(it)
    s = summarise(items)
    n = len(items)
    for decode in ("energy", "oracle"):
        d = [it[decode]["score"] - it["backbone"]["score"] for it in items]
        m = sum(d) / n
        assert s["change"][decode]["delta"] == pytest.approx(100 * m)
        assert s["change"][decode]["se"] == pytest.approx(100 * math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1) / n))
        assert s["change"][decode]["gained_items"] == sum(x > 0 for x in d)
        y, x = [it[decode]["disagree_rows"] for it in items], [it[decode]["window_rows"] for it in items]
        r = sum(y) / sum(x)
        assert s["window"][decode]["disagree"] == pytest.approx(r)
        se = math.sqrt(sum((a - r * b) ** 2 for a, b in zip(y, x)) / (n * (n - 1))) / (sum(x) / n)
        assert s["window"][decode]["disagree_se"] == pytest.approx(se)
        assert s["window"][decode]["items_steered"] == pytest.approx(
            sum(it[decode]["steered_rows"] > 0 for it in items) / n
        )
    t = s["tree"]
    best = [max(it["tree"]["scores"]) - it["backbone"]["score"] for it in items]
    assert t["ceiling"]["delta"] == pytest.approx(100 * sum(best) / n)
    assert t["decides"] == pytest.approx(
        sum(max(it["tree"]["scores"]) != min(it["tree"]["scores"]) for it in items) / n
    )
    assert t["paths"]["energy"]["same_text"] == n and t["paths"]["oracle"]["same_text"] == 0


def test_a_time_limit_keeps_what_was_measured(tmp_path, hf_offline):
    """With no time left the script stops before its first item and still writes its record, marked as stopped."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_calibration", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    rec = script.main(["--tiny", "--device", "cpu", "--out", str(tmp_path), "--limit", "3", "--max-minutes", "0"])
    assert rec["status"] == "stopped early" and rec["stopped"]["phase"] == "decode" and rec["items"] == []
    saved = json.loads((tmp_path / "calibration.json").read_text())
    assert saved["stopped"]["items_done"] == 0 and "Stopped early" in (tmp_path / "calibration.md").read_text()
    with pytest.raises(SystemExit, match="no such file"):
        script.main(["--tiny", "--device", "cpu", "--out", str(tmp_path / "bad"), "--data", str(tmp_path / "none")])
