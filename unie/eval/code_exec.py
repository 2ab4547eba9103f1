"""Execution scoring of LiveCodeBench-style problems (the paper profile's LCB-v2 column), offline.

lm-eval 0.4.13 has no LiveCodeBench task (``docs/paper-profile.md``), so
:mod:`unie.pipeline.task_files` writes one; its ``process_results`` hook calls :func:`pass_at_1` here.

A problem (one row of LiveCodeBench's ``code_generation_lite`` JSONL release files) carries
``public_test_cases`` (a JSON list) and ``private_test_cases`` (a JSON list, or LiveCodeBench's compressed form
``base64(zlib(pickle(json string)))``, read by :func:`load_test_cases` with an unpickler that refuses every
global, so only strings and plain containers can come out of it), each test ``{input, output, testtype}``:

* ``stdin``: the program reads ``input`` on standard input; its standard output must equal ``output`` line by
  line, each line stripped (LiveCodeBench's ``grade_stdio``: a line that differs as text is accepted when both
  lines read as the same numbers, compared exactly as ``Decimal``);
* ``functional`` (LeetCode): ``input`` holds one JSON value per line, the arguments of
  ``Solution().<func_name>(...)`` (``func_name`` from the row's ``metadata``); the returned value, written as JSON to
  a file (so the program's own prints do not matter), must equal ``json.loads(output)``.

Every program runs after LiveCodeBench's import prelude (:data:`PRELUDE`: ``typing``, ``collections``, ``heapq``,
``math`` ..., as its runner adds), so LeetCode starter code with ``List[int]`` hints runs.

``pass_at_1`` is 1.0 when every public and private test passes (one greedy sample per problem, as the paper).
Running model-written code is refused unless ``HF_ALLOW_CODE_EVAL=1`` (lm-eval's own gate, set by
:func:`unie.dllm.lmeval.evaluate` only when the config grants ``dllm.tasks.allow_code_execution``).  Each test runs in a
fresh ``python -I`` process (its own session, killed whole on timeout) in an empty temporary directory with a
wall-clock timeout and limits on CPU time, address space and output size; that is isolation from mistakes, not
a security sandbox: run untrusted models in a container.

:func:`mbpp_pass_at_1` scores lm-eval's ``mbpp`` the way its metric does (the completion, then the problem's
assert lines, must run through ``exec`` in fresh globals without any exception within 3 s), for the local ``mbpp`` task that replaces the built-in one, whose module
loads ``evaluate``'s ``code_eval`` from the Hugging Face hub when it is imported.
"""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import zlib
from decimal import Decimal, InvalidOperation

try:
    import resource
except ImportError:  # not POSIX: no limits beyond the timeout
    resource = None

TIMEOUT_S = 6.0  # per test, wall clock (LiveCodeBench's default)
MEMORY_BYTES = 4 << 30
OUTPUT_BYTES = 64 << 20
PRELUDE = (  # LiveCodeBench's runner puts these before every program
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
    "from io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
    "import string\nimport re\nimport datetime\nimport collections\nimport heapq\nimport bisect\nimport copy\n"
    "import math\nimport random\nimport statistics\nimport itertools\nimport functools\nimport operator\n"
    "import io\nimport sys\nimport json\nsys.setrecursionlimit(50000)\n"
)


class CodeExecutionRefused(RuntimeError):
    pass


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):  # a pickle that names any class or function is not test data
        raise pickle.UnpicklingError(f"test cases may not reference {module}.{name}")


def load_test_cases(text: str) -> list[dict]:
    """LiveCodeBench test cases from their JSON form or their compressed ``base64(zlib(pickle(json)))`` form."""
    try:
        out = json.loads(text)
    except json.JSONDecodeError:
        raw = zlib.decompress(base64.b64decode(text.encode()))
        inner = _NoGlobals(io.BytesIO(raw)).load()
        if not isinstance(inner, str):
            raise ValueError(f"compressed test cases hold a {type(inner).__name__}, not a JSON string")
        out = json.loads(inner)
    if not isinstance(out, list) or not all(isinstance(t, dict) and {"input", "output"} <= set(t) for t in out):
        raise ValueError("test cases must be a list of {input, output, testtype} objects")
    return out


def extract_code(completion: str) -> str:
    """The program in a completion: the last fenced block (```python ... ```), else the text up to a closing
    fence (the prompt opens the block), else the whole text."""
    blocks = re.findall(r"```(?:[A-Za-z0-9_+-]*)\n(.*?)```", completion, re.DOTALL)
    if blocks:
        return blocks[-1]
    return completion.split("```", 1)[0]


def _limits():  # runs in the child between fork and exec: no imports here
    cpu = int(TIMEOUT_S) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_BYTES, OUTPUT_BYTES))


def run_program(
    program: str, stdin: str, timeout: float = TIMEOUT_S, result_file: bool = False, prelude: str = PRELUDE
) -> tuple[bool, str, str]:
    """``(exited 0 within timeout, stdout, content of ./result.json)`` of ``python -I solution.py`` fed ``stdin``
    in an empty temporary directory (``prelude`` prepended; stdout to a size-limited file, decoded leniently)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "solution.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(prelude + program)
        out_path = os.path.join(d, "stdout.txt")
        with open(out_path, "wb") as out:
            try:
                r = subprocess.run(
                    [sys.executable, "-I", path],
                    input=stdin.encode(),
                    cwd=d,
                    stdout=out,
                    stderr=subprocess.DEVNULL,
                    timeout=timeout,
                    start_new_session=True,
                    env={"PATH": os.environ.get("PATH", "")},
                    preexec_fn=_limits if resource is not None else None,
                )
                ok = r.returncode == 0
            except subprocess.TimeoutExpired:
                ok = False  # subprocess.run kills the child; its session keeps no stray grandchildren running
        with open(out_path, "rb") as f:
            stdout = f.read().decode("utf-8", errors="replace")
        result = ""
        res = os.path.join(d, "result.json")
        if result_file and os.path.exists(res):
            with open(res, encoding="utf-8", errors="replace") as f:
                result = f.read()
        return ok, stdout, result


def _same_line(got: str, want: str) -> bool:
    if got == want:
        return True
    a, b = got.split(), want.split()
    if len(a) != len(b):
        return False
    try:
        return all(Decimal(x) == Decimal(y) for x, y in zip(a, b))
    except InvalidOperation:
        return False


def stdio_passes(got: str, want: str) -> bool:
    """Standard output ``got`` against ``want`` as LiveCodeBench's ``grade_stdio``: the same lines after stripping
    the whole output and each line, each line equal as text or as numbers (exact ``Decimal`` equality)."""
    g = [line.strip() for line in got.strip().split("\n")]
    w = [line.strip() for line in want.strip().split("\n")]
    return len(g) == len(w) and all(_same_line(x, y) for x, y in zip(g, w))


FUNCTIONAL_HARNESS = """

if __name__ == "__main__":
    import json as _json
    import sys as _sys
    _args = [_json.loads(_l) for _l in _sys.stdin.read().split("\\n") if _l.strip()]
    _res = Solution().{func_name}(*_args)
    with open("result.json", "w") as _f:
        _json.dump(_res, _f)
"""


def passes_test(program: str, test: dict, func_name: str | None, timeout: float = TIMEOUT_S) -> bool:
    """One LiveCodeBench test of ``program`` (see the module docstring for the two test types)."""
    kind = test.get("testtype", "stdin")
    if kind == "functional":
        if not func_name:
            raise ValueError("a functional test needs the problem's metadata func_name")
        ok, _, result = run_program(
            program + FUNCTIONAL_HARNESS.format(func_name=func_name), test["input"], timeout, result_file=True
        )
        if not ok:
            return False
        try:
            return json.loads(result) == json.loads(test["output"])
        except json.JSONDecodeError:
            return False
    if kind != "stdin":
        raise ValueError(f"unknown LiveCodeBench test type {kind!r} (stdin or functional)")
    ok, out, _ = run_program(program, test["input"], timeout)
    return ok and stdio_passes(out, test["output"])


def _require_grant() -> None:
    """Refuse to run model-written code unless lm-eval's gate ``HF_ALLOW_CODE_EVAL=1`` is set."""
    if os.environ.get("HF_ALLOW_CODE_EVAL") != "1":
        raise CodeExecutionRefused(
            "executing model-written code needs HF_ALLOW_CODE_EVAL=1 (set by unie's lm-eval "
            "runner only when dllm.tasks.allow_code_execution is true)"
        )


def pass_at_1(doc: dict, completion: str, timeout: float = TIMEOUT_S) -> float:
    """1.0 when the program in ``completion`` passes every public and private test of ``doc``, else 0.0
    (stops at the first failure)."""
    _require_grant()
    program = extract_code(completion)
    tests = load_test_cases(doc["public_test_cases"]) + load_test_cases(doc["private_test_cases"])
    func_name = json.loads(doc.get("metadata") or "{}").get("func_name")
    return float(all(passes_test(program, t, func_name, timeout) for t in tests))


MBPP_TIMEOUT_S = 3.0  # evaluate's code_eval default, which lm-eval's mbpp uses
# code_eval's check: exec(program, {}) in a worker where exit/quit are disabled; any exception (SystemExit
# included) fails, and a ``__main__`` block does not run (``__name__`` is not "__main__" there either)
MBPP_DRIVER = """import builtins, sys
source = sys.stdin.buffer.read().decode("utf-8")
builtins.exit = builtins.quit = None
try:
    exec(compile(source, "solution", "exec"), {})
except BaseException:
    import os
    os._exit(1)
with open("result.json", "w") as f:
    f.write("passed")
"""


def mbpp_pass_at_1(doc: dict, completion: str, timeout: float = MBPP_TIMEOUT_S) -> float:
    """lm-eval's ``mbpp`` pass@1 without ``evaluate``'s hub module: 1.0 when the completion (the text before
    ``[DONE]``, taken as it is) followed by a newline and the problem's three assert lines (``doc["test_list"]``,
    joined by newlines: lm-eval's reference) runs through as code_eval runs it (:data:`MBPP_DRIVER`: ``exec`` in
    fresh globals, no exception, not even ``SystemExit``) within ``timeout``; no prelude, as code_eval."""
    _require_grant()
    program = completion + "\n" + "\n".join(doc["test_list"])
    ok, _, result = run_program(MBPP_DRIVER, program, timeout, result_file=True, prelude="")
    return float(ok and result == "passed")
