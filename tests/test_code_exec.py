"""LiveCodeBench v2 for the paper profile: test-case decoding, execution scoring and the local lm-eval task,
on tiny stand-in problems written here (no download)."""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib

import pytest
import yaml

from unie.eval import code_exec
from unie.eval.code_exec import CodeExecutionRefused, load_test_cases, pass_at_1
from unie.pipeline.task_files import lcb_prompt, write_local_tasks
from unie.config.profile import resolve_config


def _compress(tests) -> str:  # LiveCodeBench's private-test format
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


STDIN_TESTS = [
    {"input": "2 3\n", "output": "5\n", "testtype": "stdin"},
    {"input": "10 -4\n", "output": "6", "testtype": "stdin"},
]
FUNC_TESTS = [{"input": "[1, 2, 3]\n2", "output": "[3, 4, 5]", "testtype": "functional"}]
STARTER = "class Solution:\n    def addK(self, nums: List[int], k: int) -> List[int]:\n        "
ROWS = [
    {
        "question_id": "abc001_a",
        "question_title": "sum",
        "question_content": "Print a + b.",
        "platform": "atcoder",
        "starter_code": "",
        "difficulty": "easy",
        "contest_date": "2023-06-01T00:00:00",
        "public_test_cases": json.dumps(STDIN_TESTS[:1]),
        "private_test_cases": _compress(STDIN_TESTS[1:]),
        "metadata": "{}",
    },
    {
        "question_id": "2999",
        "question_title": "add k",
        "question_content": "Add k to every element.",
        "platform": "leetcode",
        "starter_code": STARTER,
        "difficulty": "easy",
        "contest_date": "2023-07-01T00:00:00",
        "public_test_cases": json.dumps(FUNC_TESTS),
        "private_test_cases": json.dumps([]),
        "metadata": json.dumps({"func_name": "addK"}),
    },
]
RIGHT = [
    "a, b = map(int, input().split())\nprint(a + b)\n```",  # typing hints (the prelude) and a stray print
    STARTER + "print('debug')\n        return [x + k for x in nums]\n```",
]
WRONG = [
    "a, b = map(int, input().split())\nprint(a - b)\n```",
    "class Solution:\n    def addK(self, nums, k):\n        return nums\n```",
]


@pytest.fixture
def allowed(monkeypatch):
    monkeypatch.setenv("HF_ALLOW_CODE_EVAL", "1")


def test_load_test_cases_reads_both_forms_and_refuses_pickled_objects():
    assert load_test_cases(json.dumps(STDIN_TESTS)) == STDIN_TESTS
    assert load_test_cases(_compress(STDIN_TESTS)) == STDIN_TESTS
    evil = base64.b64encode(zlib.compress(pickle.dumps(os.getcwd))).decode()  # names a function: refused
    with pytest.raises(pickle.UnpicklingError, match="posix.getcwd|os.getcwd|nt.getcwd"):
        load_test_cases(evil)
    with pytest.raises(ValueError, match="list of"):
        load_test_cases(json.dumps({"input": 1}))


def test_pass_at_1_needs_the_code_execution_grant(monkeypatch):
    monkeypatch.delenv("HF_ALLOW_CODE_EVAL", raising=False)
    doc = {**ROWS[0], "metadata": "{}"}
    with pytest.raises(CodeExecutionRefused, match="allow_code_execution"):
        pass_at_1(doc, RIGHT[0])


def test_pass_at_1_runs_public_and_private_tests(allowed):
    for row, right, wrong in zip(ROWS, RIGHT, WRONG):
        assert pass_at_1(row, right) == 1.0
        assert pass_at_1(row, wrong) == 0.0
    # the private test decides: a program right on the public test only fails
    only_public = "a, b = map(int, input().split())\nprint(5)\n"
    assert pass_at_1(ROWS[0], only_public) == 0.0
    # a fenced completion is read too; a crash or a loop past the timeout fails
    assert pass_at_1(ROWS[0], "Here:\n```python\n" + RIGHT[0]) == 1.0
    assert pass_at_1(ROWS[0], "raise SystemExit(1)\n") == 0.0
    assert pass_at_1(ROWS[0], "while True:\n    pass\n", timeout=1.0) == 0.0
    assert pass_at_1(ROWS[0], "import sys\nsys.stdout.buffer.write(b'\\xff\\n')\n") == 0.0  # not UTF-8: no crash


def test_stdio_comparison_is_line_wise_and_exact_on_numbers():
    assert code_exec.stdio_passes("  1 2\n3.000  \n\n", "1 2\n3\n")  # stripped; 3.000 == 3 as numbers
    assert not code_exec.stdio_passes("998244000\n", "998244353\n")  # no float tolerance
    assert not code_exec.stdio_passes("3.0000001\n", "3\n")
    assert not code_exec.stdio_passes("1 2\n", "1 2\n3\n")
    assert not code_exec.stdio_passes("YES\n", "NO\n")


def test_local_livecodebench_task_loads_in_lm_eval_and_scores_by_execution(tmp_path, allowed):
    pytest.importorskip("lm_eval", reason="the dllm extra: pip install -e '.[dllm]'")
    from lm_eval.tasks import TaskManager

    release = tmp_path / "release" / "test.jsonl"
    release.parent.mkdir()
    release.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "local_tasks"
    names = write_local_tasks(
        out, {"livecodebench_v2": {"kind": "livecodebench", "repo": "x/y", "files": [str(release)], "max_gen_toks": 64}}
    )
    assert names == ["livecodebench_v2"]
    spec = yaml.safe_load((out / "livecodebench_v2.yaml").read_text().replace("!function ", ""))
    assert spec["unsafe_code"] is True and spec["generation_kwargs"]["until"] == ["```"]
    task = TaskManager(include_path=str(out), include_defaults=False).load(["livecodebench_v2"])["tasks"]
    task = task["livecodebench_v2"]
    docs = list(task.test_docs())
    assert [d["id"] for d in docs] == ["abc001_a", "2999"]
    assert task.doc_to_text(docs[1]) == lcb_prompt(ROWS[1]) and task.doc_to_text(docs[1]).endswith("```python\n")
    assert "starter code" in task.doc_to_text(docs[1]) and "stdin" in task.doc_to_text(docs[0])
    assert [task.process_results(d, [r]) for d, r in zip(docs, RIGHT)] == [{"pass_at_1": 1.0}] * 2
    assert [task.process_results(d, [w]) for d, w in zip(docs, WRONG)] == [{"pass_at_1": 0.0}] * 2


def test_local_task_errors_name_the_problem(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question_id": "q"}) + "\n")
    with pytest.raises(ValueError, match="not a LiveCodeBench row"):
        write_local_tasks(tmp_path / "o", {"lcb": {"kind": "livecodebench", "files": [str(bad)], "max_gen_toks": 8}})
    with pytest.raises(ValueError, match="unknown kind"):
        write_local_tasks(tmp_path / "o", {"lcb": {"kind": "livebench", "files": [str(bad)], "max_gen_toks": 8}})


def test_paper_config_must_grant_code_execution():
    from pathlib import Path

    from unie.core.options import ConfigError
    from unie.config.checks import check_dllm

    cfg = resolve_config([Path(__file__).parents[1] / "config" / "paper.yaml"])
    check_dllm(cfg)
    cfg["dllm"]["tasks"]["allow_code_execution"] = False
    with pytest.raises(ConfigError, match="dllm.tasks.allow_code_execution"):
        check_dllm(cfg)
    cfg["dllm"]["tasks"]["local"] = {}  # lm-eval's built-in mbpp alone needs the grant too
    cfg["dllm"]["tasks"]["names"] = ["gsm8k", "mbpp"]
    cfg["dllm"]["tasks"]["metrics"]["mbpp"] = "pass_at_1,none"
    cfg["dllm"]["tasks"]["columns"]["mbpp"] = "MBPP"
    with pytest.raises(ConfigError, match=r"\['mbpp'\] execute model-written code"):
        check_dllm(cfg)
    cfg = resolve_config([Path(__file__).parents[1] / "config" / "paper.yaml"])
    cfg["dllm"]["tasks"]["local"]["livecodebench_v2"]["max_gen_toks"] = 1024
    with pytest.raises(ConfigError, match="max_gen_toks"):
        check_dllm(cfg)
    cfg["dllm"]["tasks"]["local"]["livecodebench_v2"]["max_gen_toks"] = 256
    cfg["dllm"]["tasks"]["names"].remove("livecodebench_v2")
    with pytest.raises(ConfigError, match="add it to dllm.tasks.names"):
        check_dllm(cfg)


MBPP_ROWS = [
    {
        "task_id": 11,
        "text": "Write a function to add two numbers.",
        "code": "def add(a, b):\r\n  return a + b",
        "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(-1, 1) == 0"],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 12,
        "text": "Write a function that returns the list reversed.",
        "code": "def rev(xs):\r\n  return xs[::-1]",
        "test_list": ["assert rev([1, 2]) == [2, 1]", "assert rev([]) == []", "assert rev([3]) == [3]"],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
]
MBPP_RIGHT = ["def add(a, b):\n    return a + b\n", "def rev(xs):\n    print('debug')\n    return list(reversed(xs))\n"]
MBPP_WRONG = ["def add(a, b):\n    return a - b\n", "def rev(xs):\n    while True:\n        pass\n"]
# exits before the asserts run: a failure for code_eval (SystemExit is an exception there, exit is disabled)
MBPP_EXITS = [
    "def add(a, b):\n    return 0\nimport sys\nsys.exit(0)\n",
    "def add(a, b):\n    return 0\nexit()\n",
    "def add(a, b):\n    return 0\nimport os\nos._exit(0)\n",
]
# a __main__ block does not run under code_eval (exec in fresh globals): this one would fail if it did
MBPP_MAIN = "def add(a, b):\n    return a + b\nif __name__ == '__main__':\n    input()\n"


class _CodeEvalStub:  # stands in for evaluate's hub-loaded code_eval when lm-eval's own mbpp module is imported
    def compute(self, **kwargs):
        return [{"pass@1": 0.0}], {}


def test_local_mbpp_has_lm_evals_prompt_and_scores_by_execution(tmp_path, allowed, monkeypatch):
    """The local mbpp task renders exactly lm-eval's built-in 3-shot mbpp context for the same rows (lm-eval's
    task loaded with its hub metric stubbed), stops at [DONE], and scores by running the asserts."""
    pytest.importorskip("lm_eval", reason="the dllm extra: pip install -e '.[dllm]'")
    from pathlib import Path

    import evaluate
    import lm_eval
    import pyarrow as pa
    import pyarrow.parquet as pq
    from lm_eval.tasks import TaskManager

    test = tmp_path / "mbpp" / "full" / "test-00000-of-00001.parquet"
    test.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(MBPP_ROWS), test)
    out = tmp_path / "local_tasks"
    assert write_local_tasks(
        out, {"mbpp_local": {"kind": "mbpp", "repo": "x/y", "files": [str(test)], "max_gen_toks": 64}}
    ) == ["mbpp_local"]
    spec = yaml.safe_load((out / "mbpp_local.yaml").read_text().replace("!function ", ""))
    assert spec["unsafe_code"] is True and spec["generation_kwargs"]["until"] == ["[DONE]"]
    task = TaskManager(include_path=str(out), include_defaults=False).load(["mbpp_local"])["tasks"]["mbpp_local"]
    docs = list(task.test_docs())
    assert [d["id"] for d in docs] == [11, 12]

    monkeypatch.setattr(evaluate, "load", lambda *a, **k: _CodeEvalStub())
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    (ref_dir / "mbpp_ref.yaml").write_text(
        f"include: {Path(lm_eval.__file__).parent / 'tasks' / 'mbpp' / 'mbpp.yaml'}\ntask: mbpp_ref\n"
        f"dataset_path: parquet\ndataset_name: null\ndataset_kwargs:\n  data_files:\n    test: {test}\n"
    )
    ref = TaskManager(include_path=str(ref_dir), include_defaults=False).load(["mbpp_ref"])["tasks"]["mbpp_ref"]
    ref_docs = list(ref.test_docs())
    assert len(ref_docs) == len(docs) == 2
    for d, r in zip(docs, ref_docs):
        assert task.fewshot_context(d, 0) == ref.fewshot_context(r, 3)
        assert task.fewshot_context(d, 0).count("[DONE]") == 3 and task.fewshot_context(d, 0).endswith("[BEGIN]\n")
    assert [task.process_results(d, [r]) for d, r in zip(docs, MBPP_RIGHT)] == [{"pass_at_1": 1.0}] * 2
    assert [task.process_results(d, [w]) for d, w in zip(docs, MBPP_WRONG)] == [{"pass_at_1": 0.0}] * 2
    assert [task.process_results(docs[0], [e]) for e in MBPP_EXITS] == [{"pass_at_1": 0.0}] * 3
    assert task.process_results(docs[0], [MBPP_MAIN]) == {"pass_at_1": 1.0}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": 1, "text": "t", "test_list": ["assert 1"]}) + "\n")
    with pytest.raises(ValueError, match="not an MBPP row"):
        write_local_tasks(tmp_path / "o", {"m": {"kind": "mbpp", "files": [str(bad)], "max_gen_toks": 8}})
