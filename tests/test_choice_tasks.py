"""The paper profile's MMLU and HellaSwag scored generatively (local kinds ``mmlu`` and ``hellaswag``: the model writes
the option's letter), their log-likelihood versions marked decoder-independent in Table 3, and the adapter's
log-likelihood cut as LLaDA's (context and continuation encoded together; one-token answers exact).  Stand-in
Parquet files written here (no download)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from unie.eval.choice import first_letter, letter_match
from unie.pipeline.task_files import HELLASWAG_QUESTION, write_local_tasks

pytestmark = pytest.mark.usefixtures("hf_offline")  # conftest: no network, a private Hugging Face cache

SUBJECTS = ("anatomy", "high_school_us_history")
MMLU_TEST = [
    {"question": f" Q{i} about {s}? ", "subject": s, "choices": [f"a{i}", f"b{i}", f"c{i}", f"d{i}"], "answer": i % 4}
    for s in SUBJECTS
    for i in range(3)
]
MMLU_DEV = [
    {"question": f"Shot {i} of {s}?", "subject": s, "choices": ["w", "x", "y", "z"], "answer": (i + 1) % 4}
    for s in SUBJECTS
    for i in range(6)
]  # one more than 5: the first 5 are the shots
HELLASWAG = [
    {
        "ind": 4,
        "activity_label": "Removing ice from car",
        "ctx_a": "Then, the man writes over the snow.",
        "ctx_b": "then",
        "ctx": "",
        "endings": [", the man drives.", " [title] he waits.", "  stops   .", "he sings."],
        "source_id": "x",
        "split": "val",
        "split_type": "indomain",
        "label": "3",
    },
    {
        "ind": 9,
        "activity_label": "Home and Garden",
        "ctx_a": "[header] How to water plants [title] Fill a can.",
        "ctx_b": "",
        "ctx": "",
        "endings": ["Pour it.", "Drink it.", "Sell it.", "Paint it."],
        "source_id": "y",
        "split": "val",
        "split_type": "zeroshot",
        "label": "0",
    },
]


def _parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture
def mmlu_files(tmp_path):
    return [
        _parquet(tmp_path / "mmlu" / "all" / "test-00000-of-00001.parquet", MMLU_TEST),
        _parquet(tmp_path / "mmlu" / "all" / "dev-00000-of-00001.parquet", MMLU_DEV),
    ]


# ---------------------------------------------------------------------- scoring of a generated letter
@pytest.mark.parametrize(
    "text, letter",
    [
        ("B", "B"),
        (" B", "B"),
        ("B.", "B"),
        ("b", "B"),
        ("(C)", "C"),
        ("**D**", "D"),
        ("A. Paris", "A"),
        ("\nB", "B"),
        ("C\nA", "C"),
        ('"A"', "A"),
        ("D:", "D"),
        ("Because", None),
        ("E", None),
        ("", None),
        ("1. B", None),
        ("The answer is B", None),
        ("  \n  ", None),
    ],
)
def test_first_letter_reads_the_first_standalone_letter_of_the_first_line(text, letter):
    assert first_letter(text) == letter
    assert letter_match({"answer": "B"}, text) == float(letter == "B")


# ---------------------------------------------------------------------- MMLU: lm-eval's mmlu_generative prompt, 5-shot
def test_local_mmlu_renders_lm_evals_generative_prompt_and_scores_the_letter(tmp_path, mmlu_files):
    """Each test question gets exactly the context lm-eval's own ``mmlu_<subject>_generative`` task builds with
    ``--num_fewshot 5`` on the same rows (the built-in YAML with its dataset pointed at the stand-in files); the task
    loads offline, stops at a newline and scores the first letter."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    out = tmp_path / "local_tasks"
    spec = {
        "kind": "mmlu",
        "repo": "cais/mmlu",
        "files": [str(p) for p in mmlu_files],
        "num_fewshot": 5,
        "max_gen_toks": 3,
    }
    assert write_local_tasks(out, {"mmlu_gen": spec}) == ["mmlu_gen"]
    y = yaml.safe_load((out / "mmlu_gen.yaml").read_text().replace("!function ", ""))
    assert y["unsafe_code"] is False and y["output_type"] == "generate_until"
    assert y["generation_kwargs"]["until"] == ["</s>", "\n"] and y["generation_kwargs"]["max_gen_toks"] == 3
    task = TaskManager(include_path=str(out), include_defaults=False).load(["mmlu_gen"])["tasks"]["mmlu_gen"]
    docs = list(task.test_docs())
    assert len(docs) == len(MMLU_TEST) and [d["answer"] for d in docs] == ["ABCD"[r["answer"]] for r in MMLU_TEST]

    gen = Path(lm_eval.__file__).parent / "tasks" / "mmlu" / "generative"
    for subject in SUBJECTS:
        test = _parquet(tmp_path / subject / "test.parquet", [r for r in MMLU_TEST if r["subject"] == subject])
        dev = _parquet(tmp_path / subject / "dev.parquet", [r for r in MMLU_DEV if r["subject"] == subject])
        ref_dir = tmp_path / f"ref_{subject}"
        ref_dir.mkdir()
        (ref_dir / "ref.yaml").write_text(
            f"include: {gen / f'mmlu_{subject}.yaml'}\ntask: ref_{subject}\ndataset_path: parquet\n"
            f"dataset_name: null\ndataset_kwargs:\n  data_files:\n    test: {test}\n    dev: {dev}\n"
        )
        ref = TaskManager(include_path=str(ref_dir), include_defaults=False).load([f"ref_{subject}"])["tasks"]
        ref_docs = list(ref[f"ref_{subject}"].test_docs())
        ours = [d for d in docs if d["subject"] == subject]
        assert len(ours) == len(ref_docs) == 3
        for d, r in zip(ours, ref_docs):
            context = task.fewshot_context(d, 0)
            assert context == ref[f"ref_{subject}"].fewshot_context(r, 5)
            assert context.count("\nAnswer:") == 6 and context.endswith("\nAnswer:")
            assert f"about {subject.replace('_', ' ')}." in context
    assert [task.process_results(docs[1], [c]) for c in (" B", "B. b1", "b", "A", "", "Because")] == [
        {"exact_match": 1.0}
    ] * 3 + [{"exact_match": 0.0}] * 3

    with pytest.raises(ValueError, match="needs its dev split"):
        write_local_tasks(tmp_path / "o", {"m": {**spec, "files": [str(mmlu_files[0])]}})
    with pytest.raises(ValueError, match="has 6 dev rows, 8 shots asked"):
        write_local_tasks(tmp_path / "o", {"m": {**spec, "num_fewshot": 8}})
    with pytest.raises(ValueError, match=r"\['num_fewshot'\] are not options of kind 'hellaswag'"):
        write_local_tasks(tmp_path / "o", {"h": {**spec, "kind": "hellaswag"}})
    bad = _parquet(
        tmp_path / "bad" / "test.parquet", [{"question": "q", "subject": "s", "choices": ["a"], "answer": 0}]
    )
    with pytest.raises(ValueError, match="not an MMLU row"):
        write_local_tasks(tmp_path / "o", {"m": {**spec, "files": [str(bad)], "num_fewshot": 0}})


# ---------------------------------------------------------------------- HellaSwag: LLaDA's generative prompt
def test_local_hellaswag_has_lm_evals_preprocessing_in_lladas_generative_prompt(tmp_path):
    """The context and endings are lm-eval's ``hellaswag`` ``process_docs`` output (its query without the activity
    label, as OpenCompass reads it), in LLaDA's OpenCompass ``hellaswag_gen`` prompt; the gold label as a letter."""
    import datasets
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks.hellaswag.utils import process_docs

    val = _parquet(tmp_path / "hs" / "data" / "validation-00000-of-00001.parquet", HELLASWAG)
    out = tmp_path / "local_tasks"
    write_local_tasks(
        out, {"hellaswag_gen": {"kind": "hellaswag", "repo": "Rowan/hellaswag", "files": [str(val)], "max_gen_toks": 3}}
    )
    task = TaskManager(include_path=str(out), include_defaults=False).load(["hellaswag_gen"])["tasks"]
    task = task["hellaswag_gen"]
    docs = list(task.test_docs())
    ref = list(process_docs(datasets.Dataset.from_list(HELLASWAG)))
    assert len(docs) == len(ref) == 2
    for d, r in zip(docs, ref):
        expected = HELLASWAG_QUESTION.format(ctx=r["query"].split(": ", 1)[-1], **dict(zip("ABCD", r["choices"])))
        assert task.fewshot_context(d, 0) == expected and d["answer"] == "ABCD"[r["gold"]]
    assert docs[0]["question"].startswith("Then, the man writes over the snow. Then\nQuestion: Which ending")
    assert "\nB.  he waits.\n" in docs[0]["question"] and "[" not in docs[1]["question"]
    assert docs[0]["question"].endswith("You may choose from 'A', 'B', 'C', 'D'.\nAnswer:")
    assert task.process_results(docs[0], [" D"]) == {"exact_match": 1.0}
    assert task.process_results(docs[1], [" D"]) == {"exact_match": 0.0}
    unlabelled = _parquet(tmp_path / "hs" / "test.parquet", [{**HELLASWAG[0], "label": ""}])
    with pytest.raises(ValueError, match="not a labelled HellaSwag row"):
        write_local_tasks(tmp_path / "o", {"h": {"kind": "hellaswag", "files": [str(unlabelled)], "max_gen_toks": 3}})


def test_generated_letters_score_through_lm_eval(tmp_path, mmlu_files):
    """Through ``lm_eval.simple_evaluate`` and the adapter: a decoder answering "B" to every prompt scores the share
    of gold B's, under the result key the paper config names (``exact_match,none``)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from unie.dllm.lmeval import UnieLM
    from unie.config.profile import resolve_config

    val = _parquet(tmp_path / "hs" / "validation.parquet", HELLASWAG)
    out = tmp_path / "local_tasks"
    write_local_tasks(
        out,
        {
            "mmlu_gen": {"kind": "mmlu", "files": [str(p) for p in mmlu_files], "max_gen_toks": 3},
            "hellaswag_gen": {"kind": "hellaswag", "files": [str(val)], "max_gen_toks": 3},
        },
    )

    class AlwaysB:
        name = "always_b"

        def generate(self, prompts, max_new_tokens):
            return [" B\nC"] * len(prompts), {"nfe": 1, "generated_tokens": len(prompts)}

        def loglikelihood(self, contexts, continuations):
            raise AssertionError("generative tasks ask for no log-likelihood")

    res = lm_eval.simple_evaluate(
        model=UnieLM(decoder=AlwaysB(), batch_size=4),
        tasks=["mmlu_gen", "hellaswag_gen"],
        bootstrap_iters=0,
        task_manager=TaskManager(include_path=str(out), include_defaults=False),
    )
    metrics = resolve_config([Path(__file__).parents[1] / "config" / "paper.yaml"])["dllm"]["tasks"]["metrics"]
    gold_b = sum(r["answer"] == 1 for r in MMLU_TEST) / len(MMLU_TEST)
    assert res["results"]["mmlu_gen"][metrics["mmlu_gen"]] == pytest.approx(gold_b)
    assert res["results"]["hellaswag_gen"][metrics["hellaswag_gen"]] == 0.0  # gold D and A


def test_paper_config_scores_mmlu_and_hellaswag_generatively():
    from unie.core.options import ConfigError
    from unie.config.checks import check_dllm
    from unie.config.profile import resolve_config

    cfg = resolve_config([Path(__file__).parents[1] / "config" / "paper.yaml"])
    t = cfg["dllm"]["tasks"]
    assert {"mmlu_gen", "hellaswag_gen"} <= set(t["names"]) and not {"mmlu", "hellaswag"} & set(t["names"])
    assert (t["local"]["mmlu_gen"]["kind"], t["local"]["hellaswag_gen"]["kind"]) == ("mmlu", "hellaswag")
    assert (t["columns"]["mmlu_gen"], t["columns"]["hellaswag_gen"]) == ("MMLU", "HellaSwag")  # the paper's columns
    check_dllm(cfg)
    t["names"] += ["mmlu", "hellaswag"]  # the log-likelihood versions as extra columns: configured already
    check_dllm(cfg)
    t["local"]["hellaswag_gen"]["num_fewshot"] = 5
    with pytest.raises(ConfigError, match=r"hellaswag_gen.*\['num_fewshot'\] are not options of kind 'hellaswag'"):
        check_dllm(cfg)


# ---------------------------------------------------------------------- Table 3: log-likelihood columns
def _result(value_gen: float, value_ll: float) -> dict:
    """An lm-eval results JSON with a generative task and a log-likelihood group (two multiple-choice leaves)."""
    leaf = {"output_type": "multiple_choice"}
    se = math.sqrt(value_gen * (1 - value_gen) / 19)  # lm-eval's s.e. of a mean of 20 0/1 scores
    return {
        "results": {
            "mmlu_gen": {"exact_match,none": value_gen, "exact_match_stderr,none": se},
            "mmlu": {"acc,none": value_ll, "acc_stderr,none": 0.01},
        },
        "group_subtasks": {"mmlu": ["mmlu_stem"], "mmlu_stem": ["mmlu_a", "mmlu_b"]},
        "configs": {"mmlu_gen": {"output_type": "generate_until"}, "mmlu_a": leaf, "mmlu_b": leaf},
        "n-samples": {"mmlu_gen": {"effective": 20}, "mmlu": {"effective": 20}},
    }


def test_table3_marks_log_likelihood_columns_decoder_independent():
    from unie.report.tables import LOGLIK_NOTE, loglikelihood_tasks, table3

    rows = {"llada": {"label": "LLaDA"}, "llada_dawn": {"label": "+DAWN", "delta_to": "llada"}}
    results = {"llada": _result(0.50, 0.60), "llada_dawn": _result(0.54, 0.6001)}  # the MC ELBO's noise
    tasks = ["mmlu_gen", "mmlu"]
    assert loglikelihood_tasks(results, tasks) == {"mmlu"}
    metrics = {"mmlu_gen": "exact_match,none", "mmlu": "acc,none"}
    tex, df = table3(
        rows,
        tasks,
        results,
        metrics,
        {"mmlu_gen": "MMLU", "mmlu": "MMLU (log-lik.)"},
        effects={"llada_dawn": {"tasks": {"mmlu": {"delta": -50.0, "se": 50.0, "changed": 0.5}}}},
    )
    dawn = df[df.row == "llada_dawn"].set_index("task")
    assert dawn.loc["mmlu_gen", "delta"] == pytest.approx(4.0) and not dawn.loc["mmlu_gen", "decoder_independent"]
    assert math.isnan(dawn.loc["mmlu", "delta"]) and dawn.loc["mmlu", "decoder_independent"]
    assert dawn.loc["mmlu", "delta_note"] == LOGLIK_NOTE and math.isnan(dawn.loc["mmlu", "delta_se"])
    line = next(x for x in tex.splitlines() if x.startswith("+DAWN"))
    assert line.count("(n/a --- log-likelihood)") == 1 and line.count("(+4.0)") == 2  # MMLU and Avg. (not +2.0)
    assert "60.0" in line and "scored by log-likelihood, which no decoder changes" in tex
    # a profile without log-likelihood tasks (the toy's, the paper's default) keeps every change
    tex2, df2 = table3(rows, ["mmlu_gen"], results, metrics, {"mmlu_gen": "MMLU"})
    assert "n/a" not in tex2 and not df2.decoder_independent.any() and "delta_note" not in df2
    assert loglikelihood_tasks({"r": {"results": {}}}, ["mmlu"]) == set()  # no configs: generative


def test_table3_csv_written_by_the_rule_keeps_the_marking(tmp_path):
    from unie.pipeline.tables_figures import table3

    paths = []
    for name, res in (("llada", _result(0.5, 0.6)), ("llada_core", _result(0.45, 0.6))):
        p = tmp_path / name / "results.json"
        p.parent.mkdir()
        p.write_text(json.dumps(res))
        paths.append(str(p))
    tasks = {
        "names": ["mmlu_gen", "mmlu"],
        "metrics": {"mmlu_gen": "exact_match,none", "mmlu": "acc,none"},
        "columns": {"mmlu_gen": "MMLU", "mmlu": "MMLU (log-lik.)"},
    }
    rows = {"llada": {"label": "LLaDA"}, "llada_core": {"label": "+CoRe", "delta_to": "llada"}}
    table3(rows, tasks, paths, tmp_path / "t.tex", tmp_path / "t.csv")
    csv = pd.read_csv(tmp_path / "t.csv").set_index(["row", "task"])
    assert csv.loc[("llada_core", "mmlu"), "decoder_independent"] and pd.isna(csv.loc[("llada_core", "mmlu"), "delta"])
    assert csv.loc[("llada_core", "mmlu_gen"), "delta"] == pytest.approx(-5.0)


# ---------------------------------------------------------------------- log-likelihood as LLaDA cuts it
class _GPT2ishTokenizer:
    """Words with their leading space, as GPT-2's BPE: ``"Answer: B"`` -> ``Answer``, ``:``, `` B``; a lone trailing
    space is a token of its own."""

    bos_id = 0

    def __init__(self):
        self.vocab = {"<bos>": 0}

    def encode(self, text: str) -> list[int]:
        import re

        return [self.vocab.setdefault(p, len(self.vocab)) for p in re.findall(r" ?\w+| ?[^\w\s]|\s+", text)]


class _ContextFree:
    """A DLLM whose logits ignore the input: ``log p`` of a token is a fixed vector ``q``; counts its passes."""

    def __init__(self, V: int = 32, mask_id: int = 31):
        self.mask_id, self.blocked, self.passes = mask_id, (), []
        self.q = torch.randn(V, generator=torch.Generator().manual_seed(1))
        self.q[mask_id] = -30

    def logits(self, x):
        self.passes.append(tuple(x.shape))
        return self.q.expand(x.shape[0], x.shape[1], -1).clone()


def test_context_and_continuation_are_encoded_together_and_one_token_answers_are_exact():
    """lm-eval's HFLM / LLaDA's ``_encode_pair``: the context's trailing space joins the continuation and the two are
    encoded together, so ``"Answer: " + "B"`` scores the token `` B`` (not ``" "`` then ``"B"``); a one-token answer
    (MMLU's letter) is scored exactly, in one pass of one row, whatever ``mc_num`` (LLaDA's MMLU run: ``mc_num=1``)."""
    from unie.dllm.backbone import MC_NUM, DecodeOptions, normalise
    from unie.dllm.decoder import ARDecoder, DLLMDecoder, ModelArgs, encode_pair

    tok = _GPT2ishTokenizer()
    ctx, cont = encode_pair(tok, "Answer: ", "B")
    assert tok.encode("Answer: ") + tok.encode("B") != ctx + cont
    assert ctx == tok.encode("Answer:") and cont == tok.encode(" B") and len(cont) == 1
    assert encode_pair(tok, "Answer:", " B") == (ctx, cont)
    assert MC_NUM == ModelArgs(pretrained="x").mc_num == 128  # LLaDA's and Dream's default

    m = _ContextFree()
    dec = DLLMDecoder(m, tok, None, DecodeOptions(gen_length=4, block_length=4, tokens_per_step=1))
    exact = float(normalise(m.q[None, None], (m.mask_id,))[0, 0, cont[0]])
    ((ll, _),) = dec.loglikelihood_greedy(["Answer: "], ["B"])
    assert ll == pytest.approx(exact, abs=1e-6) and dec.loglikelihood(["Answer: "], ["B"]) == [pytest.approx(ll)]
    assert m.passes[0] == (1, len(ctx) + 2)  # <bos> + context + the one masked answer token, one row
    m.passes.clear()
    dec.loglikelihood(["Answer: "], ["B C"])  # two tokens: mc_num = 128 copies in batches of 32
    assert m.passes == [(32, len(ctx) + 3)] * 4

    class _AR:
        def logits(self, x):
            return torch.zeros(x.shape[0], x.shape[1], 32)

    ar = ARDecoder(_AR(), tok, gen_length=4)
    ((ll_ar, _),) = ar.loglikelihood_greedy(["Answer: "], ["B"])
    assert ll_ar == pytest.approx(-math.log(32))  # one token scored, not the split " " + "B"
