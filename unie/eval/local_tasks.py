"""The paper profile's local lm-eval tasks: what each kind is (metric, stop strings, whether it runs model-written
code, its scoring hook, its target) and which of lm-eval's built-in tasks run code.

Read by the config check (:func:`unie.config.checks.check_dllm`: a local task's kind and options, the grant a
code-running task needs) and by the rule that writes the tasks (:func:`unie.pipeline.task_files.write_local_tasks`,
which also holds how each kind's documents are read from its release files).
"""

from __future__ import annotations

# lm-eval built-in tasks marked ``unsafe_code`` (they execute model-written code) that a config may name
BUILTIN_UNSAFE = (
    "mbpp",
    "mbpp_plus",
    "mbpp_instruct",
    "mbpp_plus_instruct",
    "humaneval",
    "humaneval_plus",
    "humaneval_instruct",
)
LOCAL_KINDS = {
    "livecodebench": {
        "metric": "pass_at_1",
        "until": ["```"],
        "unsafe_code": True,
        "hook": "unie.eval.code_exec:pass_at_1",
    },
    "mbpp": {
        "metric": "pass_at_1",
        "until": ["[DONE]"],
        "unsafe_code": True,
        "hook": "unie.eval.code_exec:mbpp_pass_at_1",
        "target": "{{test_list[0]}}\n{{test_list[1]}}\n{{test_list[2]}}",
    },  # lm-eval's mbpp target
    # the letter, stopped at a newline as lm-eval's mmlu_generative (exact_match: unie.eval.choice)
    "mmlu": {
        "options": ("num_fewshot",),
        "metric": "exact_match",
        "until": ["</s>", "\n"],
        "unsafe_code": False,
        "hook": "unie.eval.choice:letter_match",
        "target": "{{answer}}",
    },
    "hellaswag": {
        "metric": "exact_match",
        "until": ["</s>", "\n"],
        "unsafe_code": False,
        "hook": "unie.eval.choice:letter_match",
        "target": "{{answer}}",
    },
}


LOCAL_SPEC_KEYS = ("kind", "repo", "revision", "files", "max_gen_toks")  # every kind's; a kind's "options" add to them
