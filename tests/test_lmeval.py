"""The lm-eval adapter (:mod:`unie.dllm.lmeval`), the offline toy tasks (:mod:`unie.pipeline.task_files`) and their
scoring (:func:`unie.data.tasks.score`), driven through the real ``lm_eval.simple_evaluate`` with fake
decoders (no model): an oracle scores 1, garbage 0, a decoder right on a known subset scores exactly
that fraction; ``until`` truncation, input order, warm-up-free throughput; deterministic task files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason="the dllm extra: pip install -e '.[dllm]'")

from unie.data.tasks import (
    LIST_LENGTH,
    LIST_TASKS,
    MAX_ADDEND,
    PRIMARY_METRIC,
    TASKS,
    apply_ops,
    generate_task,
    parse_list,
    reference_list,
    score,
)
from unie.dllm.lmeval import UnieLM, truncate_at
from unie.pipeline.task_files import GROUP, write_lmeval_tasks

N_TEST, N_TRAIN, SEED = 20, 3, 0
RIGHT = {0, 3, 6, 9, 12, 15, 18}  # the documents the "subset" decoder answers correctly (7 of 20)


pytestmark = pytest.mark.usefixtures("hf_offline")  # conftest: no network, a private Hugging Face cache


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tasks")
    assert write_lmeval_tasks(out, N_TRAIN, N_TEST, SEED) == list(TASKS)
    return out


@pytest.fixture(scope="module")
def docs(task_dir) -> dict[str, tuple[str, dict]]:
    """question (the prompt lm-eval sends) -> (task, document), read back from the written test files."""
    table = {}
    for task in TASKS:
        for line in (task_dir / "data" / f"{task}_test.jsonl").read_text().splitlines():
            doc = json.loads(line)
            assert doc["question"] not in table, doc["question"]
            table[doc["question"]] = (task, doc)
    return table


class FakeDecoder:
    """A :class:`~unie.core.protocols.TextDecoder` answering ``answer(prompt)``; counts calls and prompts."""

    def __init__(self, answer, name="fake"):
        self.answer, self.name = answer, name
        self.calls, self.max_new = [], []

    def generate(self, prompts, max_new_tokens):
        self.calls.append(list(prompts))
        self.max_new.append(max_new_tokens)
        texts = [self.answer(p) for p in prompts]
        return texts, {"nfe": 2 * len(prompts), "generated_tokens": max_new_tokens * len(prompts)}

    def loglikelihood(self, contexts, continuations):
        return [-float(len(c) + len(x)) for c, x in zip(contexts, continuations)]


def _index(doc: dict) -> int:
    return int(doc["id"].rsplit("/", 1)[1])


def evaluate(task_dir: Path, decoder, tasks=(GROUP,), **lm_kwargs):
    import lm_eval
    from lm_eval.tasks import TaskManager

    lm = UnieLM(decoder=decoder, **lm_kwargs)
    res = lm_eval.simple_evaluate(
        model=lm,
        tasks=list(tasks),
        bootstrap_iters=0,
        log_samples=True,
        task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
    )
    scores = {t: float(res["results"][t][f"{PRIMARY_METRIC[t]},none"]) for t in TASKS if t in res["results"]}
    return lm, res, scores


# ---------------------------------------------------------------------- (a) scores through lm-eval
def test_oracle_scores_one_garbage_zero(task_dir, docs):
    oracle = FakeDecoder(lambda p: " " + docs[p][1]["answer"] + " <eos> <eos>")
    _, res, scores = evaluate(task_dir, oracle, batch_size=16)
    assert scores == {t: 1.0 for t in TASKS}
    assert all(res["n-samples"][t]["effective"] == N_TEST for t in TASKS)
    _, _, scores = evaluate(task_dir, FakeDecoder(lambda p: "zzz 1 ["), batch_size=16)
    assert scores == {t: 0.0 for t in TASKS}


def test_known_subset_scores_its_fraction_with_truncation_and_order(task_dir, docs):
    """Right exactly on RIGHT; every completion carries a tail after a newline that must be cut, and
    batches (3) are smaller than the request count (140), so a mix-up of order changes the scores."""

    def answer(p):
        _, doc = docs[p]
        if _index(doc) in RIGHT:
            return " " + doc["answer"] + "\nxyz " + doc["answer"]
        return " 0 0 0\n" + doc["answer"]  # wrong before the newline, right after it

    dec = FakeDecoder(answer)
    _, res, scores = evaluate(task_dir, dec, batch_size=3)
    assert scores == {t: len(RIGHT) / N_TEST for t in TASKS}
    assert all(len(c) <= 3 for c in dec.calls) and sum(map(len, dec.calls)) == 7 * N_TEST + 3  # + warm-up
    assert set(dec.max_new) == {16}  # the YAML's max_gen_toks reaches the decoder
    for task in TASKS:
        for s in res["samples"][task]:
            expected = answer(s["doc"]["question"]).split("\n")[0]
            assert s["resps"] == [[expected]] and "xyz" not in s["resps"][0][0]


# ---------------------------------------------------------------------- (b) the adapter directly
def _gen_request(prompt, gen_kwargs, idx):
    from lm_eval.api.instance import Instance

    return Instance(request_type="generate_until", doc={}, arguments=(prompt, gen_kwargs), idx=idx)


def test_generate_until_groups_by_gen_kwargs_keeps_order_and_cuts():
    a = {"until": ["\n", "STOP"], "max_gen_toks": 5}
    b = {"until": "END", "max_gen_toks": 9}
    reqs = [_gen_request(f"p{i}", a if i % 3 else b, i) for i in range(11)]
    dec = FakeDecoder(lambda p: f"{p} ok STOP x\nxyz END")
    lm = UnieLM(decoder=dec, batch_size=2)
    out = lm.generate_until(reqs)
    assert out == [f"p{i} ok STOP x\nxyz " if i % 3 == 0 else f"p{i} ok " for i in range(11)]
    assert dec.calls[0] == dec.calls[1]  # the warm-up repeats the first batch
    for batch, max_new in zip(dec.calls, dec.max_new):  # one gen_kwargs group per batch
        assert len(batch) <= 2 and {int(p[1:]) % 3 == 0 for p in batch} == {max_new == 9}
    assert truncate_at("abc", []) == "abc" and truncate_at("a\nb END", ["END", "\n", ""]) == "a"


def test_throughput_json_excludes_the_warmup(tmp_path):
    dec = FakeDecoder(lambda p: "1 2")
    path = tmp_path / "sub" / "throughput.json"
    lm = UnieLM(decoder=dec, batch_size=4, throughput_path=str(path))
    gk = {"until": ["\n"], "max_gen_toks": 3}
    lm.generate_until([_gen_request(f"q{i}", gk, i) for i in range(10)])
    tp = json.loads(path.read_text())
    assert len(dec.calls) == 3 + 1  # ceil(10 / 4) timed calls + one untimed warm-up
    assert tp["requests"] == 10 and tp["nfe"] == 20 and tp["generated_tokens"] == 30
    assert tp["warmup_excluded"] is True and tp["batch_size"] == 4 and tp["decoder"] == "fake"
    assert tp["seconds"] > 0 and tp["tokens_per_s"] == pytest.approx(30 / tp["seconds"])
    assert tp["requests_per_s"] == pytest.approx(10 / tp["seconds"])
    lm.generate_until([_gen_request("again", gk, 0)])  # counters accumulate, no second warm-up
    tp = json.loads(path.read_text())
    assert len(dec.calls) == 5 and tp["requests"] == 11
    assert not list(path.parent.glob("*.tmp"))


def test_throughput_through_simple_evaluate(task_dir, docs, tmp_path):
    dec = FakeDecoder(lambda p: docs[p][1]["answer"])
    path = tmp_path / "tp.json"
    _, _, scores = evaluate(task_dir, dec, tasks=["toy_math"], batch_size=8, throughput_path=path)
    tp = json.loads(path.read_text())
    assert scores == {"toy_math": 1.0} and len(dec.calls) == 3 + 1
    assert tp["requests"] == N_TEST and tp["nfe"] == 2 * N_TEST and tp["generated_tokens"] == 16 * N_TEST


def test_loglikelihood_and_rolling(caplog):
    """A decoder without ``loglikelihood_greedy`` gives ``is_greedy`` False, with one warning (a loglikelihood
    task's ``acc`` reads it; the real decoders compute it: tests/test_lmeval_determinism.py)."""
    import logging

    from lm_eval.api.instance import Instance

    reqs = [Instance(request_type="loglikelihood", doc={}, arguments=(f"ctx{i}", " a" * i), idx=0) for i in range(5)]
    lm = UnieLM(decoder=FakeDecoder(lambda p: ""), batch_size=2)
    with caplog.at_level(logging.WARNING, logger="unie.dllm.lmeval"):
        assert lm.loglikelihood(reqs) == [(-float(4 + 2 * i), False) for i in range(5)]
        lm.loglikelihood(reqs)
    assert sum("does not compute is_greedy" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(NotImplementedError, match="loglikelihood_rolling"):
        lm.loglikelihood_rolling(reqs)


def test_registration_and_bad_arguments():
    from lm_eval.api.registry import get_model

    assert get_model("unie_dllm") is UnieLM and get_model("unie_ar") is UnieLM
    with pytest.raises(ValueError, match="batch_size"):
        UnieLM(decoder=FakeDecoder(str), batch_size=0)
    with pytest.raises(TypeError, match="TextDecoder"):
        UnieLM(decoder=object())
    with pytest.raises(ValueError, match="steps"):
        UnieLM(decoder=FakeDecoder(str), steps=4)
    assert UnieLM(decoder=FakeDecoder(str), batch_size="auto", max_batch_size=5).batch_size == 5


# ---------------------------------------------------------------------- (d) scoring
def test_score_numbers_and_choices():
    """Only the final answer of a worked answer is scored: the words before the first ``=`` (numbers: the result a
    computation-first answer writes first), the words after the last ``so`` (choices: exactly the gold letter),
    before the first ``<eos>``."""
    doc = {"id": "x", "question": "q", "answer": "7 3 = 7 1 + 2", "final": "7 3"}
    assert score("toy_math", doc, "7 3 = 7 1 + 2") == 1.0 and score("toy_gsm8k", doc, " 7 3 = 7 3 <eos> 9") == 1.0
    assert score("toy_math", doc, "7 3") == 1.0  # no work shown: the whole answer is the final one
    assert score("toy_math", doc, "7 3 1 = 7 1 + 2") == 0.0 and score("toy_math", doc, "") == 0.0
    assert score("toy_math", doc, "7 4 = 7 3") == 0.0 and score("toy_math", doc, "73 = 7 1 + 2") == 0.0
    assert score("toy_math", doc, "7 3 <eos> = 1") == 1.0  # after <eos> nothing counts
    assert score("toy_math", doc, "7 1 + 2 = 7 3") == 0.0  # the equation first: not the result the answer computes
    mc = {"id": "y", "answer": "the mat goes with the cat so B", "gold": "B"}
    assert score("toy_mmlu", mc, "the mat goes with the cat so B") == 1.0
    assert score("toy_hellaswag", mc, "the x so C so B <eos> so A") == 1.0 and score("toy_mmlu", mc, " B") == 1.0
    assert score("toy_mmlu", mc, "so B C") == 0.0 and score("toy_mmlu", mc, "so b") == 0.0
    assert score("toy_mmlu", mc, "") == 0.0 and score("toy_mmlu", mc, "so B <eos>") == 1.0
    with pytest.raises(KeyError, match="toy_nope"):
        score("toy_nope", doc, "7 3")


def test_every_reference_answer_is_a_worked_answer_that_scores_one():
    """Every task's reference answer shows its work, computation first: the value before ``=`` (arithmetic, word
    problems), each list operation's result, the matching option before the subject and the letter; 5-14 words, so
    that the window (the first block of 4 of the 16-position canvas) decides the start of the computation."""
    from unie.data.tasks import TASKS, result_words

    for task in TASKS:
        for d in generate_task(task, "test", 60, seed=4):
            words = d["answer"].split()
            assert 5 <= len(words) <= 14, (task, d["answer"])
            assert score(task, d, d["answer"]) == 1.0 and score(task, d, d["answer"] + " <eos> junk") == 1.0
            if task in ("toy_math", "toy_gsm8k") or d.get("kind") in ("math", "gsm8k"):
                assert result_words(words) == d["final"].split() == list(str(d["value"]))
                assert words.index("=") == len(str(d["value"]))  # the value first
            elif task in ("toy_mmlu", "toy_hellaswag"):
                assert words[-2:] == ["so", d["gold"]] and d["final"] == d["gold"]
                assert words[2:5] == ["goes", "with", "the"]  # the option (word 1) first, then the subject
            else:
                assert parse_list(d["answer"]) == reference_list(d["program"]) == parse_list(d["final"])
    lcb = generate_task("toy_lcb", "test", 5, seed=5)[0]  # the intermediate list is written, then the result
    (op1, op2), xs = lcb["program"].split("|")[0].split(), [int(v) for v in lcb["program"].split("|")[1].split()]
    mid = apply_ops([op1], xs)
    assert lcb["answer"] == f"{op1} [ {' '.join(map(str, mid))} ] {op2} [ {' '.join(map(str, apply_ops([op2], mid)))} ]"
    mmlu = generate_task("toy_mmlu", "test", 20, seed=6)
    for d in mmlu:  # the option named first is the gold letter's option
        words = d["question"].split()
        assert words[words.index(d["gold"]) + 1] == d["answer"].split()[1]


def test_score_lists_execute_the_reference():
    doc = {"id": "l", "answer": "[ 9 5 2 ]", "program": "sort reverse | 5 2 9"}
    assert reference_list(doc["program"]) == apply_ops(["sort", "reverse"], [5, 2, 9]) == [9, 5, 2]
    assert score("toy_lcb", doc, "[ 9 5 2 ]") == 1.0 and score("toy_lcb", doc, "[ 9 5 2 ] <eos>") == 1.0
    assert score("toy_lcb", doc, "sort [ 2 5 9 ] reverse [ 9 5 2 ]") == 1.0  # the last list is the answer
    assert score("toy_lcb", doc, "reverse [ 9 5 2 ] sort [ 2 5 9 ]") == 0.0
    assert score("toy_lcb", doc, "[ 2 5 9 ]") == 0.0  # the right elements in the wrong order fail
    assert score("toy_lcb", doc, "[ 9 5 2") == 0.0 and score("toy_lcb", doc, "<eos> [ 9 5 2 ]") == 0.0
    # the reference is executed, not read from the stored answer
    assert score("toy_lcb", {**doc, "answer": "[ 0 ]"}, "[ 9 5 2 ]") == 1.0
    with pytest.raises(KeyError, match="program"):
        score("toy_mbpp", {"id": "l", "answer": "[ 1 ]"}, "[ 1 ]")
    with pytest.raises(ValueError, match="ops \\| xs"):
        reference_list("sort 5 2 9")
    for task in (*LIST_TASKS, "toy_livebench"):  # every generated list document: reference == answer
        for d in generate_task(task, "test", 30, seed=1):
            if "program" in d:
                assert parse_list(d["answer"]) == reference_list(d["program"])
                assert score(task, d, d["answer"]) == 1.0


def test_score_livebench_by_kind():
    lb = generate_task("toy_livebench", "test", 30, seed=2)
    assert {d["kind"] for d in lb} == {"math", "gsm8k", "list"}
    for d in lb:
        assert score("toy_livebench", d, d["answer"]) == 1.0
        assert score("toy_livebench", d, "1 " + d["answer"]) == (1.0 if d["kind"] == "list" else 0.0)
    with pytest.raises(KeyError, match="kind"):
        score("toy_livebench", {"id": "z", "answer": "1", "kind": "poem"}, "1")


def test_arithmetic_and_lists_have_the_calibrated_sizes_and_carries_ripple():
    """The tasks' difficulty knobs (recalibrated, CHANGELOG.md): b in 1..MAX_ADDEND, lists of LIST_LENGTH digits;
    answers still tie several digits (in some documents a carry or borrow changes more than the units digit)."""

    def number(words):
        return int("".join(words))

    rippled = 0
    math = generate_task("toy_math", "train", 400, seed=3)
    math += [d for d in generate_task("toy_livebench", "test", 300, seed=3) if d["kind"] == "math"]
    for d in math:  # "<header> : a ... a op b = ? answer :"
        words = d["question"].split()
        eq = words.index("=")
        a, op, b = number(words[2 : eq - 2]), words[eq - 2], int(words[eq - 1])
        assert 10 <= a <= 9999 and 1 <= b <= MAX_ADDEND
        assert d["value"] == (a + b if op == "+" else a - b) and d["final"] == " ".join(str(d["value"]))
        assert d["answer"] == d["final"] + " = " + " ".join(words[2:eq])  # worked: the value, then the equation
        rippled += str(a)[:-2] != str(d["value"])[:-2]  # the carry or borrow reached past the tens digit
    assert rippled > 0
    for d in generate_task("toy_gsm8k", "train", 300, seed=3):  # "... has a a obj . ..."
        words = d["question"].split()
        a = number(words[words.index("has") + 1 : words.index("has") + 3])
        assert 1 <= abs(d["value"] - a) <= MAX_ADDEND
    for task in LIST_TASKS:
        assert {len(reference_list(d["program"])) for d in generate_task(task, "train", 200, seed=3)} == {LIST_LENGTH}


# ---------------------------------------------------------------------- (e) files
def test_task_files_are_deterministic(task_dir, tmp_path):
    def snapshot(root: Path) -> dict[str, str]:
        return {
            str(p.relative_to(root)): p.read_text().replace(str(root), "<ROOT>")
            for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts
        }

    before = snapshot(task_dir)
    write_lmeval_tasks(task_dir, N_TRAIN, N_TEST, SEED)
    assert snapshot(task_dir) == before
    write_lmeval_tasks(tmp_path / "again", N_TRAIN, N_TEST, SEED)
    assert snapshot(tmp_path / "again") == before
    assert "toy_livebench_train.jsonl" not in {Path(k).name for k in before}
    assert len((task_dir / "data" / "toy_math_train.jsonl").read_text().splitlines()) == N_TRAIN
    yaml_text = (task_dir / "toy_mbpp.yaml").read_text()
    assert f'test: "{task_dir.resolve()}/data/toy_mbpp_test.jsonl"' in yaml_text
    assert "output_type: generate_until" in yaml_text and "unsafe_code: true" not in yaml_text
    with pytest.raises(ValueError, match="n_test"):
        write_lmeval_tasks(tmp_path / "bad", N_TRAIN, 0, SEED)


# ---------------------------------------------------------------------- (f) command line
def test_module_cli_help():
    r = subprocess.run(
        [sys.executable, "-m", "unie.dllm.lmeval", "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert r.returncode == 0, r.stderr
    assert "run" in r.stdout


def test_module_cli_end_to_end(task_dir, docs, tmp_path):
    """``python -m unie.dllm.lmeval --model unie_dllm --model_args ...`` as LLaDA/Dream run their scripts; the
    decoder factory (``unie.dllm.decoder.build_decoder``) is replaced by a fake that answers correctly
    and records the literal-eval'd model arguments it received (``--device`` included)."""
    gold = {q: doc["answer"] for q, (task, doc) in docs.items() if task == "toy_math"}
    driver = tmp_path / "driver.py"
    driver.write_text(f"""
import json, runpy, sys, types
GOLD = {gold!r}
class Decoder:
    def __init__(self, args):
        self.name = "fake"
        json.dump(args, open({str(tmp_path / "args.json")!r}, "w"))
    def generate(self, prompts, max_new_tokens):
        return [GOLD[p] for p in prompts], {{"nfe": 1, "generated_tokens": max_new_tokens * len(prompts)}}
    def loglikelihood(self, contexts, continuations):
        return [0.0] * len(contexts)
fake = types.ModuleType("unie.dllm.decoder")
fake.build_decoder = Decoder
sys.modules["unie.dllm.decoder"] = fake
runpy.run_module("unie.dllm.lmeval", run_name="__main__", alter_sys=True)
""")
    tp = tmp_path / "tp.json"
    cmd = [
        sys.executable,
        str(driver),
        "--model",
        "unie_dllm",
        "--device",
        "cpu",
        "--batch_size",
        "8",
        "--model_args",
        f"pretrained=toy,steps=4,throughput_path={tp}",
        "--tasks",
        "toy_math",
        "--include_path",
        str(task_dir),
        "--output_path",
        str(tmp_path / "out"),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "lm-eval's built-in tasks not indexed" in r.stderr  # toy_math is the task folder's own
    assert json.loads((tmp_path / "args.json").read_text()) == {"pretrained": "toy", "steps": 4, "device": "cpu"}
    (results,) = (tmp_path / "out" / "toy").glob("results_*.json")
    assert json.loads(results.read_text())["results"]["toy_math"]["exact_match,none"] == 1.0
    assert json.loads(tp.read_text())["requests"] == N_TEST


def test_the_command_line_skips_lm_evals_own_task_index_only_for_the_folders_own_tasks(task_dir, tmp_path):
    """lm-eval's command line indexes its thousands of built-in task files (about 9 s) as well as ``--include_path``;
    ``python -m unie.dllm.lmeval`` leaves them out exactly when every task asked for, and every member of a group
    asked for, is defined in the folder.  A group of the folder with a built-in member, a built-in task, a pattern, a
    name nobody defines, a missing folder and a ``--config`` file keep lm-eval's own index."""
    import shutil

    from unie.dllm.lmeval import _cli_tasks, tasks_all_in

    assert tasks_all_in(task_dir, ["toy_math"]) and tasks_all_in(task_dir, list(TASKS))
    mixed = tmp_path / "mixed"
    shutil.copytree(task_dir, mixed)
    (mixed / "toy_two.yaml").write_text("group: toy_two\ntask: [toy_math, toy_mbpp]\n")
    (mixed / "toy_mixed.yaml").write_text("group: toy_mixed\ntask: [toy_math, gsm8k]\n")
    (mixed / "toy_nested.yaml").write_text("group: toy_nested\ntask: [toy_two, toy_mixed]\n")
    # members given with overrides: of the task or group they name (then lm-eval needs that one), or inline
    (mixed / "toy_over.yaml").write_text("group: toy_over\ntask:\n  - task: toy_math\n    num_fewshot: 0\n")
    (mixed / "toy_over_builtin.yaml").write_text("group: toy_over_b\ntask:\n  - task: gsm8k\n    num_fewshot: 0\n")
    (mixed / "toy_inline.yaml").write_text("group: toy_inline\ntask:\n  - group: g_in\n    task: [toy_math]\n")
    (mixed / "toy_inline_b.yaml").write_text("group: toy_inline_b\ntask:\n  - group: g_in\n    task: [hellaswag]\n")
    assert tasks_all_in(mixed, ["toy_two"]) and tasks_all_in(mixed, ["toy_two", "toy_mbpp"])
    assert tasks_all_in(mixed, ["toy_over"]) and tasks_all_in(mixed, ["toy_inline"])
    for names in (
        ["toy_mixed"],
        ["toy_nested"],
        ["gsm8k"],
        ["toy_*"],
        ["toy_math", "nobody_defines_this"],
        ["toy_over_b"],
        ["toy_inline_b"],
    ):
        assert not tasks_all_in(mixed, names), names
    assert not tasks_all_in(tmp_path / "missing", ["toy_math"]) and not tasks_all_in(None, ["toy_math"])
    argv = ["--model", "unie_dllm", "--tasks", "toy_math,toy_mbpp", "toy_two", "--include_path", "D", "--limit", "3"]
    assert _cli_tasks(argv) == (["toy_math", "toy_mbpp", "toy_two"], "D")
    assert _cli_tasks(["-t", "toy_math", "--include_path", "D"]) == (["toy_math"], "D")
    assert _cli_tasks(["run", "--tasks", "gsm8k", "-t", "toy_math", "--include_path", "D"]) == (
        ["gsm8k", "toy_math"],
        "D",
    )
    assert _cli_tasks([*argv, "--config", "run.yaml"]) is None


def test_a_rerun_leaves_one_result_set(task_dir, docs, tmp_path, monkeypatch):
    """lm-eval names its files by time: a second run into the same row folder would leave two results_*.json and
    two samples files per task beside each other; evaluate() clears the earlier run's first."""
    import unie.dllm.decoder as dllm_mod
    from unie.dllm.lmeval import evaluate as run_lmeval

    monkeypatch.setattr(
        dllm_mod, "build_decoder", lambda args: FakeDecoder(lambda p: " " + docs[p][1]["answer"], name="fake")
    )
    out = tmp_path / "row"
    logs = []
    for _ in range(2):
        found = run_lmeval({"pretrained": "x"}, ["toy_math", "toy_mbpp"], task_dir, out, batch_size=8, log=logs.append)
    assert sorted(p.name for p in out.rglob("results_*.json")) == [found.name]
    assert (
        len(list(out.rglob("samples_toy_math_*.jsonl"))) == 1 and len(list(out.rglob("samples_toy_mbpp_*.jsonl"))) == 1
    )
    assert any("removed 4 files of an earlier lm-eval run" in m for m in logs), logs
    assert json.loads(found.read_text())["results"]["toy_math"]["exact_match,none"] == 1.0


# ---------------------------------------------------------------------- (g) the command a run records
def _cli_config(command: str, monkeypatch):
    """``command`` (one line) as lm-eval 0.4.13's own command line reads it: its EvaluatorConfig."""
    import shlex

    from lm_eval._cli import HarnessCLI
    from lm_eval.config.evaluate_config import EvaluatorConfig

    argv = shlex.split(command)
    start = argv.index("unie.dllm.lmeval") + 1
    monkeypatch.setattr(sys, "argv", ["lm-eval", *argv[start:]])
    return EvaluatorConfig.from_cli(HarnessCLI().parse_args())


def test_format_model_args_reads_back_as_given_or_falls_back_to_json():
    """key=value where lm-eval's parser gives back every key, value and type; JSON (which it reads first) where it
    would not: a string that reads as a number, a comma inside a value, a negative int (read as a float)."""
    from lm_eval._cli.utils import key_val_to_dict

    from unie.dllm.lmeval import format_model_args

    plain = {
        "pretrained": "results/dllm/models/llada",
        "K": 3,
        "w": 0.2,
        "greedy_first": False,
        "horizon": None,
        "lr": 1e-05,
        "attn_layers": [1, 2],
    }
    text = format_model_args(plain)
    assert text.startswith("pretrained=results/dllm/models/llada,K=3,w=0.2,greedy_first=False,horizon=None")
    assert key_val_to_dict(text) == plain
    for odd in ({"name": "12"}, {"mask_token": "a,b"}, {"seed": -1}, {"name": "true"}):
        text = format_model_args({"pretrained": "x", **odd})
        assert json.loads(text) == {"pretrained": "x", **odd}


def test_the_command_names_everything_that_decides_the_answers(tmp_path, monkeypatch):
    """:func:`unie.dllm.lmeval.lmeval_command` as lm-eval's command line reads it back: the model arguments (paths under
    the working directory made relative), the tasks, the task folder, the device as a flag, the batch size, all four
    seeds, the limit, code execution; the output under rerun/, never inside the row's folder; torchrun for ranks."""
    from unie.dllm.lmeval import lmeval_command

    monkeypatch.chdir(tmp_path)
    args = {
        "pretrained": str(tmp_path / "results" / "m"),
        "proxy": "/elsewhere/proxy",
        "name": "row",
        "K": 3,
        "w": 0.2,
        "temperature": 0.1,
        "greedy_first": False,
        "seed": 5,
    }
    cmd = lmeval_command(
        args,
        ["toy_math", "toy_mbpp"],
        tmp_path / "resources" / "tasks",
        tmp_path / "results" / "rows" / "row",
        batch_size=16,
        limit=4,
        seed=5,
        device="cpu",
    )
    assert str(tmp_path) not in cmd and cmd.startswith("python -m unie.dllm.lmeval --model unie_dllm ")
    cfg = _cli_config(cmd, monkeypatch)
    assert cfg.model == "unie_dllm" and cfg.model_args == {**args, "pretrained": "results/m"}
    assert cfg.tasks == ["toy_math", "toy_mbpp"] and cfg.include_path == "resources/tasks"
    assert (cfg.device, int(cfg.batch_size), cfg.seed, cfg.limit) == ("cpu", 16, [5, 5, 5, 5], 4)
    assert cfg.output_path == "rerun/results/rows/row" and cfg.log_samples and not cfg.confirm_run_unsafe_code
    outside = lmeval_command(
        {"pretrained": "m"}, ["t"], None, "/elsewhere/rows/row", allow_code_execution=True, nproc=2, device="cuda"
    )
    assert outside.startswith("HF_ALLOW_CODE_EVAL=1 torchrun --standalone --nproc_per_node=2 -m unie.dllm.lmeval ")
    assert "--confirm_run_unsafe_code" in outside and "--output_path /elsewhere/rows/row.rerun" in outside
    assert "--include_path" not in outside and "--limit" not in outside
    with pytest.raises(ValueError, match="--device"):
        lmeval_command({"pretrained": "m", "device": "cpu"}, ["t"])


def test_evaluate_records_its_command_in_the_results(task_dir, docs, tmp_path, monkeypatch):
    """:func:`unie.dllm.lmeval.evaluate` writes ``config.unie_command`` into lm-eval's results JSON: the model arguments
    it built the decoder from (lm-eval's seed as the decoder's ``seed``, the device as a flag), its tasks, batch
    size, seeds and limit, as lm-eval's command line reads them."""
    import unie.dllm.decoder as dllm_mod
    from unie.dllm.lmeval import evaluate as run_lmeval

    built = []
    monkeypatch.setattr(
        dllm_mod,
        "build_decoder",
        lambda a: built.append(a) or FakeDecoder(lambda p: " " + docs[p][1]["answer"], name="fake"),
    )
    monkeypatch.chdir(tmp_path)
    found = run_lmeval(
        {"pretrained": "x", "name": "row", "K": 2, "device": "cpu"},
        ["toy_math"],
        task_dir,
        Path("rows/row"),
        batch_size=8,
        limit=3,
        seed=7,
        log=lambda m: None,
    )
    cmd = json.loads(found.read_text())["config"]["unie_command"]
    cfg = _cli_config(cmd, monkeypatch)
    assert cfg.model_args == {"pretrained": "x", "name": "row", "K": 2, "seed": 7}
    assert {**cfg.model_args, "device": cfg.device} == built[0]  # what built the decoder, seed and device included
    assert (cfg.tasks, int(cfg.batch_size), cfg.seed, cfg.limit) == (["toy_math"], 8, [7, 7, 7, 7], 3)
    assert cfg.include_path == str(task_dir) and cfg.output_path == "rerun/rows/row"
