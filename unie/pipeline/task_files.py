"""The seven toy benchmarks as offline lm-eval tasks (``docs/dllm.md``).

:func:`write_lmeval_tasks` writes, deterministically (same arguments -> byte-identical files)::

    out_dir/data/{task}_train.jsonl   fine-tuning documents (not for toy_livebench, which is test-only)
    out_dir/data/{task}_test.jsonl    evaluation documents
    out_dir/{task}.yaml               one lm-eval task per benchmark (absolute data paths)
    out_dir/toy_dllm.yaml             the group of the seven tasks
    out_dir/utils.py                  the ``process_results`` hooks, scoring with :func:`unie.data.tasks.score`

Every task is ``generate_until``, 0-shot, greedy, stopped at a newline after at most 16 tokens; the
multiple-choice tasks too, on purpose: the model writes the chosen option's word, so a decoding strategy can
change the score (a log-likelihood score cannot see the decoder).  Load with
``TaskManager(include_path=out_dir, include_defaults=False)`` or ``--include_path out_dir``.

The list tasks (toy_mbpp, toy_lcb, and toy_livebench's list documents) are scored by executing the
*reference* program (:func:`unie.data.tasks.apply_ops` on the document's integers) and comparing it with
the integers parsed from the completion: no model-written text is ever executed, so the tasks are not
marked ``unsafe_code`` and need neither ``--confirm_run_unsafe_code`` nor ``HF_ALLOW_CODE_EVAL``.

:func:`write_local_tasks` writes the paper profile's benchmarks that lm-eval 0.4.13 lacks or cannot run offline
(``dllm.tasks.local``): LiveCodeBench v2 from LiveCodeBench's own release files, and MBPP with lm-eval's ``mbpp``
prompt and metric but without its hub-loaded ``code_eval``; both scored by :mod:`unie.eval.code_exec`
(model-written code is executed: the tasks are ``unsafe_code``).  And MMLU and HellaSwag *generatively* (kinds
``mmlu``, ``hellaswag``: the question and its lettered options, the model writes the letter, scored by
:mod:`unie.eval.choice`), since lm-eval's built-in ``mmlu`` and ``hellaswag`` are log-likelihood tasks, which no
decoder can change: MMLU with lm-eval's ``mmlu_generative`` prompt (5-shot from each subject's ``dev`` rows), HellaSwag
with LLaDA's generative prompt (its OpenCompass ``hellaswag_gen`` config; lm-eval has no generative HellaSwag).
Their release files are fetched by :func:`download_task_file`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..data.tasks import PRIMARY_METRIC, TASKS, generate_task
from ..eval.choice import LETTERS
from ..eval.local_tasks import LOCAL_KINDS, LOCAL_SPEC_KEYS

GROUP = "toy_dllm"
TEST_ONLY = ("toy_livebench",)  # held-out templates: never in the fine-tuning data
GENERATION_KWARGS = {"until": ["\n"], "do_sample": False, "max_gen_toks": 16}


def _write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a reader never sees half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _jsonl(docs: list[dict]) -> str:
    return "".join(json.dumps(doc) + "\n" for doc in docs)


def _q(text: str) -> str:
    """A YAML double-quoted scalar (JSON string syntax is valid YAML)."""
    return json.dumps(text)


def generate_until_yaml(
    task: str,
    header: list[str],
    test_path: Path,
    target: str,
    options: list[str],
    until: list[str],
    do_sample: bool,
    max_gen_toks: int,
    metric: str,
    metadata: dict,
) -> str:
    """An lm-eval ``generate_until`` task reading its test documents from ``test_path`` (made absolute), scored by
    ``utils.process_results_<task>``; ``header``: comment lines, ``options``: lines after ``doc_to_target``."""
    lines = [
        *header,
        f"task: {task}",
        "dataset_path: json",
        "dataset_name: null",
        "dataset_kwargs:",
        "  data_files:",
        f"    test: {_q(str(Path(test_path).resolve()))}",
        "output_type: generate_until",
        "test_split: test",
        "doc_to_text: question",  # a column name: lm-eval reads it as is (a Jinja template compiles per document)
        f"doc_to_target: {_q(target)}",
        *options,
        "generation_kwargs:",
        f"  until: [{', '.join(_q(u) for u in until)}]",
        f"  do_sample: {str(do_sample).lower()}",
        f"  max_gen_toks: {max_gen_toks}",
        f"process_results: !function utils.process_results_{task}",
        "metric_list:",
        f"  - metric: {metric}",
        "    aggregation: mean",
        "    higher_is_better: true",
        "metadata:",
        "  version: 1.0",
        *[f"  {k}: {v}" for k, v in metadata.items()],
    ]
    return "\n".join(lines) + "\n"


def task_yaml(task: str, test_path: Path, n_test: int, seed: int) -> str:
    """The lm-eval YAML of ``task`` reading its test documents from ``test_path`` (made absolute)."""
    if task not in PRIMARY_METRIC:
        raise KeyError(f"unknown toy task {task!r}; known: {', '.join(TASKS)}")
    g = GENERATION_KWARGS
    header = [
        f"# {task}: written by unie.pipeline.task_files.write_lmeval_tasks; regenerate rather than edit.",
        "# Scored generatively by utils.process_results_* (unie.data.tasks.score). List answers are checked by",
        "# executing the reference program on integers only (no model text is run), hence no unsafe_code.",
    ]
    return generate_until_yaml(
        task,
        header,
        test_path,
        "answer",
        [f"target_delimiter: {_q(' ')}", "num_fewshot: 0"],
        g["until"],
        g["do_sample"],
        g["max_gen_toks"],
        PRIMARY_METRIC[task],
        {"n_test": n_test, "seed": seed},
    )


def group_yaml(tasks: list[str]) -> str:
    """The group ``toy_dllm`` over ``tasks`` (no aggregate: the tasks' metrics differ)."""
    return "\n".join([f"group: {GROUP}", "task:", *[f"  - {t}" for t in tasks], "metadata:", "  version: 1.0"]) + "\n"


def utils_py(tasks: list[str]) -> str:
    """The ``utils.py`` next to the YAMLs: one ``process_results_<task>(doc, results)`` per task."""
    head = '''"""lm-eval hooks of the toy tasks, written by unie.pipeline.task_files.write_lmeval_tasks (regenerate, don't edit).

lm-eval calls ``process_results(doc, results)`` with ``results`` = [the completion string] and averages the
returned ``{metric: 0.0 or 1.0}`` per task."""

from unie.data.tasks import PRIMARY_METRIC, score


def process_results(task, doc, results):
    """``{PRIMARY_METRIC[task]: score(task, doc, completion)}`` for ``results == [completion]``."""
    if len(results) != 1:
        raise ValueError(f"{task}: expected one completion per document, got {len(results)}: {results!r}")
    return {PRIMARY_METRIC[task]: score(task, doc, results[0])}
'''
    funcs = [
        f"\n\ndef process_results_{t}(doc, results):\n    return process_results({t!r}, doc, results)\n" for t in tasks
    ]
    return head + "".join(funcs)


def write_lmeval_tasks(out_dir, n_train, n_test: int, seed: int, names: list[str] | None = None) -> list[str]:
    """Write the toy tasks' data, YAMLs, group and hooks under ``out_dir``; return the task names.

    ``n_train`` (>= 0) training and ``n_test`` (>= 1) test documents per task (``toy_livebench``: test
    only) from :func:`unie.data.tasks.generate_task` with ``seed``; ``n_train`` None: no training files (the map's
    own tasks, rule dllm_map_tasks).  ``names``: the tasks to write, in :data:`~unie.data.tasks.TASKS`' order
    (default: all seven).  A task's test documents are drawn one after another from its own generator, so the first
    ``n`` of a larger ``n_test`` are exactly the ``n_test = n`` ones.  Deterministic: the same arguments give
    byte-identical files.  Returns the names written (the group is named :data:`GROUP`)."""
    for name, value, low in (("n_train", n_train, 0), ("n_test", n_test, 1), ("seed", seed, None)):
        if name == "n_train" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
            raise ValueError(f"{name} must be an int{f' >= {low}' if low is not None else ''}, got {value!r}")
    unknown = sorted(set(names or []) - set(TASKS))
    if unknown:
        raise KeyError(f"unknown toy task(s) {', '.join(unknown)}; known: {', '.join(TASKS)}")
    out = Path(out_dir).resolve()
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    tasks = [t for t in TASKS if names is None or t in names]
    for task in tasks:
        if task not in TEST_ONLY and n_train is not None:
            _write_text(data / f"{task}_train.jsonl", _jsonl(generate_task(task, "train", n_train, seed)))
        test_path = data / f"{task}_test.jsonl"
        _write_text(test_path, _jsonl(generate_task(task, "test", n_test, seed)))
        _write_text(out / f"{task}.yaml", task_yaml(task, test_path, n_test, seed))
    _write_text(out / f"{GROUP}.yaml", group_yaml(tasks))
    _write_text(out / "utils.py", utils_py(tasks))
    return tasks


# ---------------------------------------------------------------------- the paper profile's local tasks
LOCAL_TASKS_DIR = "resources/dllm/local_tasks"  # in the run's directory (runs/<name>/), rule dllm_local_tasks
LCB_INSTRUCTION = (
    "You will be given a question (problem specification) and will generate a correct Python "
    "program that matches the specification and passes all tests."
)


def lcb_prompt(row: dict) -> str:
    """The prompt of one LiveCodeBench problem (LiveCodeBench's instruction, then the question, then the starter
    code or the stdin/stdout contract); it ends inside an opened ```python block, so the completion is the
    program and the task stops at the closing fence."""
    text = f"{LCB_INSTRUCTION}\n\nQuestion: {row['question_content'].strip()}\n\n"
    if row.get("starter_code"):
        text += (
            "You will use the following starter code to write the solution to the problem.\n```python\n"
            f"{row['starter_code'].rstrip()}\n```\n\n"
        )
    else:
        text += (
            "Read the inputs from stdin, solve the problem and write the answer to stdout (do not directly "
            "test on the sample inputs).\n\n"
        )
    return text + "Answer:\n```python\n"


def _read_rows(path) -> list[tuple[int, dict]]:
    """``(index, row)`` of a release file: Parquet rows, or JSONL lines (read line by line, blank ones skipped;
    ``index`` is the line's, so ``index + 1`` names it in an error)."""
    if str(path).endswith(".parquet"):
        import pyarrow.parquet as pq

        return list(enumerate(pq.read_table(path).to_pylist()))
    with open(path) as lines:
        return [(n, json.loads(line)) for n, line in enumerate(lines) if line.strip()]


def livecodebench_docs(paths: list) -> list[dict]:
    """Documents of the LiveCodeBench task from ``code_generation_lite`` JSONL release files (``release_v2`` =
    ``test.jsonl`` + ``test2.jsonl``, 511 problems): the prompt plus what scoring needs."""
    from ..eval.code_exec import load_test_cases

    docs, seen = [], set()
    for path in paths:
        for n, row in _read_rows(path):
            missing = {"question_id", "question_content", "public_test_cases", "private_test_cases"} - set(row)
            if missing:
                raise ValueError(f"{path}:{n + 1}: not a LiveCodeBench row (no {sorted(missing)})")
            if row["question_id"] in seen:
                raise ValueError(f"{path}:{n + 1}: question {row['question_id']!r} appears twice")
            seen.add(row["question_id"])
            load_test_cases(row["public_test_cases"])  # a malformed row fails here, before any generation
            docs.append(
                {
                    "id": row["question_id"],
                    "question": lcb_prompt(row),
                    "public_test_cases": row["public_test_cases"],
                    "private_test_cases": row["private_test_cases"],
                    "metadata": row.get("metadata") or "{}",
                    "platform": row.get("platform"),
                    "difficulty": row.get("difficulty"),
                    "contest_date": row.get("contest_date"),
                }
            )
    if not docs:
        raise ValueError(f"no LiveCodeBench problems in {[str(p) for p in paths]}")
    return docs


def lm_eval_mbpp_fewshot() -> list[dict]:
    """lm-eval's three ``mbpp`` prompt examples (MBPP task_ids 2, 3, 4, as in the MBPP paper), read from the source
    of ``lm_eval/tasks/mbpp/utils.py`` without importing it (importing it loads ``evaluate``'s code_eval from the
    hub)."""
    import ast
    import importlib.util

    path = Path(importlib.util.find_spec("lm_eval").origin).parent / "tasks" / "mbpp" / "utils.py"
    tree = ast.parse(path.read_text())
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "list_fewshot_samples")
    return ast.literal_eval(next(n for n in ast.walk(func) if isinstance(n, ast.Return)).value)


def mbpp_text(row: dict) -> str:
    """lm-eval's ``mbpp`` ``doc_to_text``: the MBPP paper's prompt, ending at ``[BEGIN]`` and a newline."""
    tests = "\n".join(row["test_list"][:3])
    return (
        f"You are an expert Python programmer, and here is your task: {row['text']} Your code should pass "
        f"these tests:\n\n{tests}\n[BEGIN]\n"
    )


def mbpp_prompt(row: dict, shots: list[dict]) -> str:
    """lm-eval's 3-shot ``mbpp`` context: each shot's text, its code and ``\\n[DONE]``, a blank line between
    examples, then the problem's text."""
    return "".join(mbpp_text(s) + s["code"] + "\n[DONE]\n\n" for s in shots) + mbpp_text(row)


def mbpp_docs(paths: list) -> list[dict]:
    """Documents of the local ``mbpp`` task from MBPP's ``full`` test split (Parquet as on the hub, or JSONL):
    lm-eval's 3-shot prompt and the assert lines that score it."""
    shots = lm_eval_mbpp_fewshot()
    docs = []
    for path in paths:
        for n, row in _read_rows(path):
            missing = {"task_id", "text", "test_list"} - set(row)
            if missing or len(row.get("test_list") or []) < 3:
                raise ValueError(f"{path}:{n + 1}: not an MBPP row (no {sorted(missing) or 'three test_list asserts'})")
            docs.append(
                {"id": row["task_id"], "question": mbpp_prompt(row, shots), "test_list": list(row["test_list"][:3])}
            )  # lm-eval's reference: the first three asserts
    if not docs:
        raise ValueError(f"no MBPP problems in {[str(p) for p in paths]}")
    return docs


# MMLU and HellaSwag scored generatively: the model writes the option's letter (unie.eval.choice), so a decoder can
# change the score; lm-eval's built-in ``mmlu``/``hellaswag`` are log-likelihood tasks that no decoder changes
MMLU_DESCRIPTION = "The following are multiple choice questions (with answers) about {subject}.\n\n"
HELLASWAG_QUESTION = (
    "{ctx}\nQuestion: Which ending makes the most sense?\nA. {A}\nB. {B}\nC. {C}\nD. {D}\n"
    "You may choose from 'A', 'B', 'C', 'D'.\nAnswer:"
)


def _is_dev_file(path) -> bool:
    """Whether a downloaded MMLU file is its ``dev`` split (the few-shot pool): ``all/dev-00000-of-00001.parquet``
    on the hub's main branch, ``all/dev/0000.parquet`` in its Parquet export."""
    p = Path(path)
    return p.name.startswith("dev") or p.parent.name == "dev"


def mmlu_text(row: dict) -> str:
    """lm-eval's ``mmlu_generative`` ``doc_to_text``: the question, the four lettered options, ``Answer:``."""
    c = row["choices"]
    return f"{row['question'].strip()}\nA. {c[0]}\nB. {c[1]}\nC. {c[2]}\nD. {c[3]}\nAnswer:"


def mmlu_prompt(row: dict, shots: list[dict]) -> str:
    """lm-eval's ``mmlu_generative`` context with ``len(shots)`` shots: the subject's description, each shot's text,
    a space, its letter and a blank line, then the question's text (``--num_fewshot`` with the ``first_n`` sampler
    over the subject's ``dev`` rows)."""
    head = MMLU_DESCRIPTION.format(subject=row["subject"].replace("_", " "))
    return head + "".join(f"{mmlu_text(s)} {LETTERS[s['answer']]}\n\n" for s in shots) + mmlu_text(row)


def mmlu_docs(paths: list, num_fewshot: int = 5) -> list[dict]:
    """Documents of the local ``mmlu`` kind from ``cais/mmlu`` ``all`` Parquet files: the ``test`` rows scored, each
    with lm-eval's ``mmlu_generative`` prompt and the first ``num_fewshot`` ``dev`` rows of its subject as shots
    (LLaDA and Dream evaluate MMLU 5-shot); ``answer`` is the gold letter."""
    dev = [p for p in paths if _is_dev_file(p)]
    if num_fewshot and not dev:
        raise ValueError(
            f"MMLU with {num_fewshot} shots needs its dev split among the files (all/dev-*.parquet); "
            f"got {[str(p) for p in paths]}"
        )
    pool: dict[str, list[dict]] = {}
    for path in dev:
        for n, row in _read_rows(path):
            pool.setdefault(_mmlu_row(row, path, n)["subject"], []).append(row)
    docs = []
    for path in (p for p in paths if not _is_dev_file(p)):
        for n, row in _read_rows(path):
            row = _mmlu_row(row, path, n)
            shots = pool.get(row["subject"], [])[:num_fewshot]
            if len(shots) < num_fewshot:
                raise ValueError(
                    f"{path}:{n + 1}: subject {row['subject']!r} has {len(shots)} dev rows, {num_fewshot} shots asked"
                )
            docs.append(
                {
                    "id": len(docs),
                    "subject": row["subject"],
                    "question": mmlu_prompt(row, shots),
                    "answer": LETTERS[row["answer"]],
                }
            )
    if not docs:
        raise ValueError(f"no MMLU test questions in {[str(p) for p in paths]}")
    return docs


def _mmlu_row(row: dict, path, n: int) -> dict:
    missing = {"question", "subject", "choices", "answer"} - set(row)
    if missing or len(row.get("choices") or []) != 4 or row.get("answer") not in range(4):
        raise ValueError(f"{path}:{n + 1}: not an MMLU row (no {sorted(missing) or 'four choices and an answer 0-3'})")
    return row


def hellaswag_preprocess(text: str) -> str:
    """lm-eval's ``hellaswag`` ``preprocess``: strip, WikiHow's `` [title]`` to ``. ``, bracketed artifacts removed,
    double spaces collapsed."""
    text = text.strip().replace(" [title]", ". ")
    return re.sub("\\[.*?\\]", "", text).replace("  ", " ")


def hellaswag_docs(paths: list) -> list[dict]:
    """Documents of the local ``hellaswag`` kind from ``Rowan/hellaswag`` Parquet (``validation``: 10,042 rows): the
    context and endings as lm-eval's ``hellaswag`` preprocesses them (its ``query`` without the activity label,
    as OpenCompass's ``HellaswagDataset_V2`` reads it), in LLaDA's generative prompt (OpenCompass
    ``hellaswag_gen_6faab5``, 0-shot); ``answer`` is the gold letter."""
    docs = []
    for path in paths:
        for n, row in _read_rows(path):
            missing = {"activity_label", "ctx_a", "ctx_b", "endings", "label"} - set(row)
            if missing or len(row.get("endings") or []) != 4 or str(row.get("label")) not in ("0", "1", "2", "3"):
                raise ValueError(
                    f"{path}:{n + 1}: not a labelled HellaSwag row "
                    f"(no {sorted(missing) or 'four endings and a label 0-3'})"
                )
            query = hellaswag_preprocess(row["activity_label"] + ": " + row["ctx_a"] + " " + row["ctx_b"].capitalize())
            endings = [hellaswag_preprocess(e) for e in row["endings"]]
            docs.append(
                {
                    "id": len(docs),
                    "ind": row.get("ind"),
                    "question": HELLASWAG_QUESTION.format(ctx=query.split(": ", 1)[-1], **dict(zip(LETTERS, endings))),
                    "answer": LETTERS[int(row["label"])],
                }
            )
    if not docs:
        raise ValueError(f"no HellaSwag rows in {[str(p) for p in paths]}")
    return docs


# how each local kind's documents are read from its release files (the kinds: unie.eval.local_tasks.LOCAL_KINDS)
DOC_READERS = {"livecodebench": livecodebench_docs, "mbpp": mbpp_docs, "mmlu": mmlu_docs, "hellaswag": hellaswag_docs}
assert set(DOC_READERS) == set(LOCAL_KINDS), "every local task kind needs its document reader"


def local_task_yaml(task: str, kind: str, test_path: Path, n_docs: int, max_gen_toks: int) -> str:
    spec = LOCAL_KINDS[kind]
    header = [f"# {task}: written by unie.pipeline.task_files.write_local_tasks ({kind}); regenerate rather than edit."]
    return generate_until_yaml(
        task,
        header,
        test_path,
        spec.get("target", "{{id}}"),
        ["num_fewshot: 0", f"unsafe_code: {str(spec['unsafe_code']).lower()}"],
        spec["until"],
        False,
        max_gen_toks,
        spec["metric"],
        {"n_docs": n_docs},
    )


def write_local_tasks(out_dir, local: dict) -> list[str]:
    """Write ``dllm.tasks.local`` (task -> ``{kind, files, max_gen_toks}`` and the kind's ``options``, e.g. ``mmlu``'s
    ``num_fewshot``; ``files`` the downloaded release files) as lm-eval tasks under ``out_dir`` (``{task}.yaml``,
    ``data/{task}_test.jsonl``, ``utils.py``); return the names."""
    out = Path(out_dir).resolve()
    (out / "data").mkdir(parents=True, exist_ok=True)
    hooks = ['"""lm-eval hooks of the local paper tasks, written by unie.pipeline.task_files.write_local_tasks."""\n']
    for task, spec in local.items():
        kind = spec.get("kind")
        if kind not in LOCAL_KINDS:
            raise ValueError(f"dllm.tasks.local.{task}.kind: unknown kind {kind!r}; known: {', '.join(LOCAL_KINDS)}")
        foreign = sorted(set(spec) - set(LOCAL_SPEC_KEYS) - set(LOCAL_KINDS[kind].get("options", ())))
        if foreign:
            raise ValueError(f"dllm.tasks.local.{task}: {foreign} are not options of kind {kind!r}")
        opts = {k: spec[k] for k in LOCAL_KINDS[kind].get("options", ()) if k in spec}
        docs = DOC_READERS[kind](spec["files"], **opts)
        test_path = out / "data" / f"{task}_test.jsonl"
        _write_text(test_path, _jsonl(docs))
        _write_text(out / f"{task}.yaml", local_task_yaml(task, kind, test_path, len(docs), int(spec["max_gen_toks"])))
        module, func = LOCAL_KINDS[kind]["hook"].split(":")
        metric = LOCAL_KINDS[kind]["metric"]
        hooks.append(
            f"\n\ndef process_results_{task}(doc, results):\n    from {module} import {func}\n\n"
            f"    return {{{metric!r}: {func}(doc, results[0])}}\n"
        )
    _write_text(out / "utils.py", "".join(hooks))
    return list(local)


def download_task_file(repo_id: str, filename: str, out_path, revision: str | None = None, log=print) -> Path:
    """Rule download_task_file: one release file of a local paper task (e.g. LiveCodeBench's ``test2.jsonl``) from
    its Hugging Face dataset repository (a localrule: the submit host; from ``HF_HOME``'s cache when the hub does
    not answer, :func:`unie.data.hub.fetch_dataset_file`); returns its path."""
    from ..data.hub import fetch_dataset_file

    out = fetch_dataset_file(repo_id, filename, out_path, revision=revision)
    log(f"{repo_id}@{revision or 'main'}/{filename} -> {out} ({os.path.getsize(out)} bytes)")
    return out
