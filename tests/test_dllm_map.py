"""The proxy-strength map's pieces (beyond the paper): the oracle proxy against a brute-force reading of its
definition, the window counters against a hand count, which rules read a proxy (against the energies themselves),
Algorithm 3's candidate draw, and the map's points."""

from __future__ import annotations

import json
import math

import pytest
import torch

from unie.core.options import ModelConfig
from unie.data.dllm_format import dllm_prompt_rows
from unie.data.tasks import generate_task, task_vocabulary
from unie.data.tokenizer import bpe_tokenizer, word_tokenizer
from unie.dllm.backbone import DLLM, DecodeOptions, decode
from unie.dllm.bridge import ProxyBridge
from unie.dllm.energy_decoding import DLLMEnergyOptions, energy_decode, window_counts
from unie.dllm.oracle import OracleLM, write_oracle
from unie.dllm.rows import map_points, map_proxy_points, reads_proxy
from unie.energy.energies import selection_energy
from unie.eval.metrics import window_shares
from unie.methods.ar import AR
from unie.models.transformer import Transformer

EPS = 0.05


@pytest.fixture(scope="module")
def docs():
    return [d for t in ("toy_math", "toy_mmlu", "toy_lcb") for d in generate_task(t, "test", 6, seed=0)]


@pytest.fixture(scope="module")
def word():
    return word_tokenizer(task_vocabulary(), unk=True)


@pytest.fixture(scope="module")
def bpe(docs):
    texts = [
        d["question"] + " " + d["answer"]
        for t in ("toy_math", "toy_mmlu", "toy_lcb")
        for d in generate_task(t, "train", 200, seed=0)
    ]
    tok = bpe_tokenizer(texts, 120)
    assert any(len(tok.encode(w)) > 1 for d in docs for w in d["answer"].split())  # pieces to bridge
    return tok


@pytest.fixture(scope="module")
def oracle(docs, word):
    return OracleLM({d["question"]: d["answer"] for d in docs}, word, EPS)


def _net(tok, causal, seed, T=96):
    torch.manual_seed(seed)
    return Transformer(
        ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=1, n_heads=2, max_len=T, causal=causal)
    ).eval()


def _proxy(tok, seed=1):
    m = AR(tok.info()).wrap(_net(tok, True, seed))
    m.tokenizer = tok
    return m


# ---------------------------------------------------------------------- the oracle proxy
def test_oracle_is_the_eps_smoothed_point_mass_on_the_reference(docs, word, oracle):
    """Brute force over the vocabulary: at every answer position the oracle's next-token distribution sums to 1,
    puts 1 - eps on the reference token (then <eos>) and eps / (V - 1) on each other token, whatever came before."""
    V = word.vocab_size
    for d in docs:
        prompt, ref = word.encode(d["question"]), word.encode(d["answer"]) + [word.eos_id]
        wrong = [(t + 7) % V for t in ref]  # a prefix that has left the reference: the oracle does not care
        for prefix in (ref, wrong):
            x = torch.tensor([[word.bos_id] + prompt + prefix])
            p = oracle.logits(x)[0].exp()
            assert torch.allclose(p.sum(-1), torch.ones(x.shape[1], dtype=torch.float64))
            for j, token in enumerate(ref):
                row = p[len(prompt) + j]
                assert row[token] == pytest.approx(1 - EPS)
                others = torch.cat([row[:token], row[token + 1 :]])
                assert torch.allclose(others, torch.full_like(others, EPS / (V - 1)))


def test_oracle_through_the_bridge_scores_a_candidate_by_its_matches(docs, word, bpe, oracle):
    """Teacher-forced through the tokenizer bridge (the LLaDA-like model's BPE pieces, and the identity for the word
    tokenizer) a candidate answer scores ``k log(1 - eps) + (n - k) log(eps / (V - 1))`` with ``k`` of its ``n``
    words (and its <eos>) equal to the reference's at their position: the definition, counted by hand."""
    V = word.vocab_size
    right, wrong = math.log1p(-EPS), math.log(EPS / (V - 1))
    d = docs[0]
    ref_words = d["answer"].split()
    cand_words = list(ref_words)
    cand_words[-1] = "0" if cand_words[-1] != "0" else "1"  # one wrong final digit
    for tok in (word, bpe):
        bridge = ProxyBridge(oracle, tok)
        for words, k in ((ref_words, len(ref_words) + 1), (cand_words, len(ref_words))):
            P = len(tok.encode(d["question"])) + 1
            ids = tok.encode(" ".join(words))
            x = dllm_prompt_rows(tok, [d["question"]], P, len(ids) + 2)
            x[0, P:] = torch.tensor(ids + [tok.eos_id, tok.eos_id])
            scores = bridge.position_logp(x)[0]
            n = len(ref_words) + 1
            prompt_part = scores[:P].sum()  # the prompt's tokens: uniform, the same for every candidate
            assert float(prompt_part) == pytest.approx(len(d["question"].split()) * -math.log(V))
            assert float(scores[P:].sum()) == pytest.approx(k * right + (n - k) * wrong)


def test_oracle_reads_an_answer_glued_onto_the_prompt(docs, word, oracle):
    """A first answer piece glued onto the prompt's last word (``:`` + ``2`` read as the unknown word ``:2``): that
    word is answer position 0, scored as a wrong token, and the rest of the answer keeps its positions."""
    V = word.vocab_size
    d = docs[0]
    prompt, ref = word.encode(d["question"]), word.encode(d["answer"]) + [word.eos_id]
    glued = [word.bos_id] + prompt[:-1] + [word.encode(":2")[0]] + ref[1:]
    assert word.decode(glued[len(prompt) : len(prompt) + 1]) == "<unk>"
    lp = oracle.logits(torch.tensor([glued]))[0].double().log_softmax(-1)
    got = [float(lp[i, t]) for i, t in enumerate(glued[1:])][len(prompt) - 1 :]
    assert got[0] == pytest.approx(math.log(EPS / (V - 1)))  # the glued word: not the reference's first word
    assert got[1:] == pytest.approx([math.log1p(-EPS)] * (len(ref) - 1))  # every later word where it belongs


def test_next_token_scores_are_the_logits_read_at_the_rows_own_tokens(docs, word, bpe, oracle):
    """What the map's bridges read (``on_model``): the oracle's ``next_token_logp`` is its log-probabilities at the
    row's next tokens exactly (a right answer, a wrong prefix, a glued first word); a remembered learned proxy's is
    the bridge's float64 log-softmax and gather bit for bit; a mixture's is the log-softmax of its ``(N, L, V)``
    mixture read there, up to rounding.  Through the bridge each gives the scores the full logits give."""
    from unie.dllm.oracle import MixtureLM, RememberedLM

    prompt_rows = []
    for d in docs[:4]:
        prompt, ref = word.encode(d["question"]), word.encode(d["answer"]) + [word.eos_id]
        prompt_rows += [[word.bos_id] + prompt + ref, [word.bos_id] + prompt + [(t + 7) % word.vocab_size for t in ref]]
    d = docs[0]
    prompt, ref = word.encode(d["question"]), word.encode(d["answer"]) + [word.eos_id]
    prompt_rows.append([word.bos_id] + prompt[:-1] + [word.encode(":2")[0]] + ref[1:])  # glued
    width = max(map(len, prompt_rows))
    x = torch.tensor([r + [word.eos_id] * (width - len(r)) for r in prompt_rows])

    def read(lm):
        return lm.logits(x).double().log_softmax(-1)[:, :-1].gather(-1, x[:, 1:, None]).squeeze(-1)

    assert torch.equal(oracle.next_token_logp(x), oracle.logits(x)[:, :-1].gather(-1, x[:, 1:, None]).squeeze(-1))
    proxy = _proxy(word)
    remembered = RememberedLM(proxy)
    assert torch.equal(remembered.next_token_logp(x), read(proxy))
    assert remembered.next_token_logp(x) is remembered.next_token_logp(x)  # remembered, not computed again
    for lam in (0.0, 0.25, 0.75, 1.0):
        mix = MixtureLM(oracle, remembered, lam)
        assert torch.allclose(mix.next_token_logp(x), read(mix), rtol=0, atol=1e-12)
    # a row that ends inside the reference (the last scored token is an answer position): the row-end cut
    short = torch.tensor([[word.bos_id] + prompt + ref[:3]])
    cut = oracle.logits(short)[:, :-1].gather(-1, short[:, 1:, None]).squeeze(-1)
    assert torch.equal(oracle.next_token_logp(short), cut) and float(cut[0, -1]) == pytest.approx(math.log1p(-EPS))
    # through the bridge, as the map reads them (every model remembered, the word and the BPE DLLM tokenizers), with
    # and without the batch's remembered plans
    from unie.dllm import bridge as bridge_mod

    remembered_oracle = RememberedLM(oracle)
    for tok in (word, bpe):
        q = docs[1]["question"]
        P = len(tok.encode(q)) + 1
        ids = [tok.encode(a)[:12] for a in (docs[1]["answer"], docs[2]["answer"], "1 2 3")]
        rows = dllm_prompt_rows(tok, [q] * len(ids), P, 14)
        for r, a in enumerate(ids):
            rows[r, P:] = torch.tensor(a + [tok.eos_id] * (14 - len(a)))
        for lm in (remembered_oracle, remembered, MixtureLM(remembered_oracle, remembered, 0.5)):
            slow, fast = ProxyBridge(lm, tok), ProxyBridge(lm, tok, on_model=True)
            assert fast.on_model
            want = slow.position_logp(rows)
            bridge_mod._LAYOUTS.clear()
            got = fast.position_logp(rows)
            again = fast.position_logp(rows)  # the plans remembered from the call before
            assert torch.equal(got, again)
            assert torch.equal(got, want) if lm is remembered else torch.allclose(got, want, rtol=0, atol=1e-12)
            assert torch.equal(fast.position_logp(rows[:2]), got[:2])  # a batch of other rows: its own plans


def test_oracle_refuses_an_unknown_prompt_and_round_trips_its_checkpoint(docs, word, oracle, tmp_path):
    x = torch.tensor([[word.bos_id] + word.encode("question : 1 + 1 = ? answer :") + word.encode("1 + 1 = 2")])
    with pytest.raises(KeyError, match="no reference answer"):
        oracle.logits(x)
    tok_dir = tmp_path / "tok"
    word.save(tok_dir)
    out = write_oracle(docs, tok_dir, tmp_path / "oracle", eps=EPS)
    again = OracleLM.load(out)
    d = docs[3]
    y = torch.tensor([[word.bos_id] + word.encode(d["question"] + " " + d["answer"])])
    assert torch.equal(again.logits(y), oracle.logits(y))
    spec = json.loads((out / "oracle.json").read_text())
    assert spec["kind"] == "oracle" and spec["eps"] == EPS and len(spec["references"]) == len(docs)
    with pytest.raises(ValueError, match="two reference answers"):
        write_oracle([docs[0], {**docs[0], "answer": "9"}], tok_dir, tmp_path / "bad")
    with pytest.raises(ValueError, match="eps"):
        OracleLM({"q": "a"}, word, 0.0)


def test_the_oracle_proxy_steers_algorithm3_to_the_reference(docs, word, oracle):
    """With the oracle, proxy_rerank (which reads only the proxy) commits the reference's tokens whenever a
    candidate offers them: on a random tiny Dream-like model at a hot candidate temperature its completions match
    the references on more positions than the backbone's greedy decode does."""
    b = DLLM(_net(word, False, 0), word.info(), shift=True)
    b.tokenizer = word
    prompts = [d["question"] for d in docs]
    P = max(len(word.encode(p)) for p in prompts) + 1
    x = dllm_prompt_rows(word, prompts, P, 16)
    opts = DecodeOptions(gen_length=16, block_length=8, tokens_per_step=4, confidence="entropy")
    plain, _ = decode(b, x, opts)
    steered, stats = energy_decode(
        b,
        ProxyBridge(oracle, word),
        x,
        opts,
        DLLMEnergyOptions(energy="uni", K=8, w=1.0, temperature=3.0, selection="proxy_rerank"),
        [torch.Generator().manual_seed(i) for i in range(len(prompts))],
    )

    def matches(out):
        return sum(
            int(t == r)
            for row, d in zip(out[:, P:].tolist(), docs)
            for t, r in zip(row, word.encode(d["answer"]) + [word.eos_id])
        )

    assert matches(steered) > matches(plain) and stats["steered_rows"] > 0


# ---------------------------------------------------------------------- where the window acts
def test_window_counts_by_hand():
    """Rows ``[prompt(2) | gen(6)]``, eos = 9: row 0's answer is 3 tokens + <eos> (4), its window committed positions
    2, 3 (answer) and 7 (padding); row 1 has no <eos> (its answer is all 6 positions), window committed 4 of them."""
    x = torch.tensor([[1, 1, 5, 5, 5, 9, 9, 9], [1, 1, 5, 5, 5, 5, 5, 5]])
    decided = torch.zeros_like(x, dtype=torch.bool)
    decided[0, [2, 3, 7]] = True
    decided[1, [2, 4, 5, 6]] = True
    c = window_counts(x, decided, prompt_len=2, eos_id=9)
    assert c == {"window_reveals": 7, "window_padding": 1, "answer_tokens": 4 + 6, "window_answer": 6}
    s = window_shares({"window_rows": 4, "disagree_rows": 1, "steered_rows": 0, **c})
    assert s["padding"] == pytest.approx(1 / 7) and s["answer"] == pytest.approx(6 / 10)
    assert window_shares({"window_rows": 2, "disagree_rows": 0, "steered_rows": 0})["padding"] is None


def test_algorithm3_counts_its_window_reveals(word, docs):
    """The counters of a real decode agree with a replay: every committed-in-window position is one of the
    ``m`` per window iteration and row, and the shares are those of :func:`window_counts` on the final state."""
    b = DLLM(_net(word, False, 0), word.info(), shift=True)
    b.tokenizer = word
    prompts = [d["question"] for d in docs[:4]]
    P = max(len(word.encode(p)) for p in prompts) + 1
    x = dllm_prompt_rows(word, prompts, P, 16)
    opts = DecodeOptions(gen_length=16, block_length=8, tokens_per_step=4, confidence="entropy", early_exit=False)
    _, stats = energy_decode(
        b,
        ProxyBridge(_proxy(word), word),
        x,
        opts,
        DLLMEnergyOptions(energy="ind", K=3, w=0.2),
        torch.Generator().manual_seed(0),
    )
    assert stats["window_iterations"] == 1  # N = 4, w = 0.2: iteration 0 only
    assert stats["window_reveals"] == 4 * len(prompts)  # m = 4 per row in the window
    assert stats["window_padding"] + stats["window_answer"] == stats["window_reveals"]
    assert stats["answer_tokens"] <= 16 * len(prompts)


# ---------------------------------------------------------------------- which rules read the proxy
@pytest.mark.parametrize(
    "energy,selection,reads",
    [
        ("inv", "argmin", False),
        ("inv", "resample", False),
        ("inv", "proxy_rerank", True),
        ("ind", "argmin", True),
        ("uni", "argmin", True),
        ("uni", "resample", True),
    ],
)
def test_reads_proxy_agrees_with_the_energies(word, docs, energy, selection, reads):
    """B = 2, K = 3 candidates scored under two different proxies: the energies are bit-identical exactly when
    :func:`reads_proxy` says the rule reads none."""
    assert reads_proxy({"energy": energy, "selection": selection}) is reads
    prompts = [d["question"] for d in docs[:2]]
    P = max(len(word.encode(p)) for p in prompts) + 1
    B, K, T = 2, 3, P + 8
    xt = dllm_prompt_rows(word, prompts, P, 8)
    gen = torch.Generator().manual_seed(0)
    x0 = xt[:, None].repeat(1, K, 1)
    x0[:, :, P:] = torch.randint(3, word.vocab_size - 3, (B, K, 8), generator=gen)
    x0[:, :, -1] = word.eos_id
    xs = torch.where(torch.arange(T) < P + 4, x0, torch.full_like(x0, word.mask_id))
    logp = torch.randn(B, T, word.vocab_size, generator=gen).log_softmax(-1)
    Es = [
        selection_energy(
            selection, energy, xt, x0, xs, logp, ProxyBridge(_proxy(word, seed=s), word), "teacher_forced", word.mask_id
        )
        for s in (1, 2)
    ]
    assert Es[0].shape == (B, K)
    assert torch.equal(Es[0], Es[1]) is (not reads)


# ---------------------------------------------------------------------- the map's points
MAP = {
    "tasks": ["toy_math"],
    "limit": 4,
    "draws": [{"temperature": 0.1}, {"temperature": 1.0, "greedy_first": True}],
    "backbones": {"llada": {"model": "llada", "options": {"confidence": "low_confidence"}}},
    "proxies": {"weak": {"model": "proxy"}, "large": {"model": "ar_large"}, "oracle": {"model": "oracle"}},
    "rules": {
        "uni": {"options": {"energy": "uni"}},
        "inv": {"options": {"energy": "inv"}},
        "rerank": {"options": {"energy": "uni", "selection": "proxy_rerank"}},
    },
    "apd": {"options": {"sampler": "apd"}},
}


def test_map_points_cover_the_grid_once():
    """The map's lm-eval points: the backbone's own decode (the requests every tree starts from), then APD per proxy;
    Algorithm 3's rules are read off the trees (unie.pipeline.map_runs), one scorer per (rule, proxy) but one for a
    rule that reads no proxy."""
    from unie.dllm.oracle import MixtureLM  # noqa: F401  (the continuum's proxies)
    from unie.pipeline.map_runs import map_scorers

    d = {"map": MAP, "energy": {"K": 3, "w": 0.2}, "models": {"proxy": {}, "ar_large": {}, "llada": {}}}
    pts = map_points(d, "llada")
    names = [p["name"] for p in pts]
    assert len(names) == len(set(names)) and pts[0]["rule"] == "backbone" and "proxy" not in pts[0]["row"]
    assert [p["rule"] for p in pts] == ["backbone", "apd", "apd", "apd"]
    apd = [p for p in pts if p["rule"] == "apd"]
    assert [p["row"]["proxy"] for p in apd] == ["proxy", "ar_large", "oracle"]
    assert all("confidence" not in p["row"]["options"] and p["temperature"] is None and p["draw"] is None for p in apd)
    alone = map_proxy_points(d)
    assert [p["proxy"] for p in alone] == ["weak", "large"]  # the oracle is no decoder
    bridges = {"weak": "B1", "large": "B2", "oracle": "B3"}
    scorers = map_scorers({**MAP, "continuum": {"proxy": "weak", "lambdas": [0.5]}}, bridges, {})
    assert set(scorers) == {
        "uni__weak",
        "uni__large",
        "uni__oracle",
        "inv__any",
        "rerank__weak",
        "rerank__large",
        "rerank__oracle",
    }
    with pytest.raises(ValueError, match="resample"):
        map_scorers({**MAP, "rules": {"x": {"options": {"energy": "ind", "selection": "resample"}}}}, bridges, {})
    assert scorers["rerank__large"].selection == "proxy_rerank" and scorers["inv__any"].proxy == "B1"


def test_the_maps_own_tasks_start_with_table3s_items(tmp_path):
    """Rule dllm_map_tasks: the map's tasks, more test items than Table 3's, drawn by the same generator and seed, so
    their first items are Table 3's line for line (the map's whole trees are Table 3's items); no training split, only
    the tasks named; an unknown task is refused before anything is written."""
    from unie.pipeline.task_files import write_lmeval_tasks

    table3, mapped = tmp_path / "tasks", tmp_path / "map_tasks"
    write_lmeval_tasks(table3, 2, 5, 0)
    names = write_lmeval_tasks(mapped, None, 12, 0, names=["toy_lcb", "toy_math"])
    assert names == ["toy_math", "toy_lcb"]  # in the tasks' own order
    assert sorted(p.name for p in (mapped / "data").iterdir()) == ["toy_lcb_test.jsonl", "toy_math_test.jsonl"]
    assert sorted(p.name for p in mapped.glob("*.yaml")) == ["toy_dllm.yaml", "toy_lcb.yaml", "toy_math.yaml"]
    for task in names:
        long = (mapped / "data" / f"{task}_test.jsonl").read_text().splitlines()
        short = (table3 / "data" / f"{task}_test.jsonl").read_text().splitlines()
        assert len(long) == 12 and long[:5] == short
        assert len({json.loads(line)["question"] for line in long}) == 12
    with pytest.raises(KeyError, match="toy_nope"):
        write_lmeval_tasks(tmp_path / "bad", None, 3, 0, names=["toy_math", "toy_nope"])
    assert not (tmp_path / "bad").exists()


def test_the_map_explores_the_first_items_whole_and_reads_the_rest_by_their_paths():
    """dllm.map.whole: an item's tree is explored up to the cap when its document is among the first `whole` of its
    task (lm-eval's doc_id, the file's order), else read along its rules' paths alone; without `whole`, every item."""
    from unie.pipeline.map_runs import PATHS_ONLY, _is_whole

    assert PATHS_ONLY == 1
    assert [_is_whole(("toy_math", i), {"whole": 3}) for i in range(5)] == [True, True, True, False, False]
    assert all(_is_whole(("toy_math", i), {}) for i in range(5))
    assert all(_is_whole(("toy_math", i), {"whole": None}) for i in range(5))


def test_the_maps_items_are_checked_against_table3s_and_its_whole_trees():
    """dllm.map.items below Table 3's dllm.tasks.n_test (whose items come first) or dllm.map.whole above items: one
    error naming the key, when the config is checked (before any job)."""
    import copy
    from pathlib import Path

    from unie.config.checks import check_map
    from unie.config.profile import resolve_config
    from unie.core.options import ConfigError

    d = resolve_config([Path(__file__).resolve().parents[1] / "config" / "smoke.yaml"])["dllm"]
    check_map(d, lambda *a, **k: None, True)  # the smoke profile's own: 10 items, 8 of Table 3's, 2 whole
    for change, key in (({"items": 5}, "dllm.map.items"), ({"whole": 11}, "dllm.map.whole")):
        bad = copy.deepcopy(d)
        bad["map"].update(change)
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            check_map(bad, lambda *a, **k: None, True)


def test_apd_reads_the_whole_trees_items_only_when_asked():
    """dllm.map.apd.whole_only: APD's points read the first `whole` items per task (within the map's `limit`); the
    backbone, and APD without it, read the map's `limit` (None: every item)."""
    from unie.pipeline.map_runs import point_items

    apd, base = {"rule": "apd"}, {"rule": "backbone"}
    m = {"apd": {"whole_only": True}, "whole": 200, "limit": None}
    assert (point_items(apd, m), point_items(base, m)) == (200, None)
    assert (point_items(apd, {**m, "limit": 50}), point_items(base, {**m, "limit": 50})) == (50, 50)
    assert (point_items(apd, {**m, "limit": 500}), point_items(base, {**m, "limit": 500})) == (200, 500)
    assert point_items(apd, {**m, "apd": {}}) is None and point_items(apd, {**m, "whole": None}) is None
