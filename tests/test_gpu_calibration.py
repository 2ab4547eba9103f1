"""The map's calibration point: the oracle over a real tokenizer (:class:`unie.dllm.oracle.TextOracleLM`) against
brute force, the bridge's on-model scoring against its CPU reading."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from unie.data.tokenizer import bpe_tokenizer, word_tokenizer
from unie.dllm.bridge import ProxyBridge
from unie.dllm.oracle import OracleLM, TextOracleLM

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
    assert R[:len(P)] == P
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
        total += math.exp(sum(want[len(P):]))
    assert total == pytest.approx(1.0)
    x = torch.tensor([[words.bos_id] + R])
    assert float(oracle.next_token_logp(x)[0, len(P):].sum()) == pytest.approx(3 * math.log1p(-EPS))


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
    assert whole[:len(P) - 1] == P[:-1] and whole[len(P) - 1] != P[-1]  # the merge this test is about
    oracle = TextOracleLM({prompt: ref}, tok, EPS)
    for cont, n_right in ((ref, len(whole) - len(P) + 2), ("\n9 pears", None)):
        x = torch.tensor([[tok.bos_id] + tok.encode(prompt + cont) + [tok.eos_id]])
        lp = oracle.next_token_logp(x)[0]
        assert lp[:len(P) - 1].tolist() == pytest.approx([-math.log(tok.vocab_size)] * (len(P) - 1))
        right = sum(v == pytest.approx(math.log1p(-EPS)) for v in lp[len(P) - 1:].tolist())
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
