"""Seven toy benchmarks, one per column of the paper's Table 3 (docs/dllm.md, "Decisions": the tasks).

Every task is a pure function of ``(task, split, n, seed)`` and writes plain whitespace-separated text:
each token of the word-level tokenizer is one word, numbers are written digit by digit ("4 7" is 47),
so an answer spans several interdependent tokens (digits with carries, list elements) and decoding
them in parallel can fail the way the paper describes.

**Worked answers, computation first.**  As the first fifty tokens of a real GSM8K or MATH solution (and a DLLM's
chain-of-thought answer) hold its first steps of computation, every answer starts with a step that decides it: the
value an arithmetic or word problem computes (its digits, carries included), each list operation's result, the option
that matches; what restates the question comes after (the equation, the subject, the letter).  So Algorithm 3's window
(``w = 0.2``: the first two of the ``N = 8`` iterations of the DLLM half's canvas of 16 positions in blocks of 4 with
``m = 2`` tokens per step: the whole first block) decides the start of the computation, as the paper's window decides
the first computation steps of a long answer (docs/decisions.md: the room each format gives, measured before any rule
ran on it).  Answers are 5-14 words (6-15 tokens with its ``<eos>``).

=====================  ==========================================================================
paper column           toy analogue (prompt ... ``answer :`` -> worked answer, computation first)
=====================  ==========================================================================
MATH500                ``toy_math``: ``a ± 1`` or ``a ± 2``, carries ripple: ``9 9 9 + 2 = ?`` -> ``1 0 0 1 = 9 9 9 + 2``
GSM8K                  ``toy_gsm8k``: a word problem over toy-world entities -> ``3 9 = 3 7 + 2``
MBPP                   ``toy_mbpp``: one list operation on 4 digits, ``sort [ 5 2 9 1 ]`` -> ``sort [ 1 2 5 9 ]``
LiveCodeBench v2       ``toy_lcb``: two composed operations, each result written: ``reverse [ 1 9 2 5 ] sort [ 1 2 5 9 ]``
LiveBench              ``toy_livebench``: a held-out mixture of the above with shifted templates
MMLU                   ``toy_mmlu``: 4-way choice over toy-world facts -> ``the mouse goes with the cat so B``
HellaSwag              ``toy_hellaswag``: 4-way choice of the continuation consistent with the scene -> ``the kitten goes with the cat so C``
=====================  ==========================================================================

Only the final answer is scored (:func:`score`): the number before the first ``=`` (the result an answer computes
first), the last list, the letter after the last ``so``.  The list tasks are scored by *executing the reference operation* on the input
(:func:`apply_ops`) and comparing with the parsed answer; the others by exact match.  The multiple-choice tasks
are scored generatively (the model writes the letter, as MMLU's generative variant): a decoding strategy cannot
change a log-likelihood score, and the paper reports decoding gains on MMLU and HellaSwag.  ``toy_livebench`` is
test-only: its templates never appear in the fine-tuning data.
"""

from __future__ import annotations

import random
import zlib

from .tokenizer import EOS
from .toy_vocab import SCENE_WORDS, SCENES, SHARED_WORDS, word_list

TASKS = ("toy_math", "toy_gsm8k", "toy_mbpp", "toy_lcb", "toy_livebench", "toy_mmlu", "toy_hellaswag")
# the answers' format: a rule's parameter (rule dllm_tasks), so a run made with another format writes its tasks again
FORMAT = "computation-first"
PAPER_COLUMNS = {
    "toy_math": "MATH500",
    "toy_gsm8k": "GSM8K",
    "toy_mbpp": "MBPP",
    "toy_lcb": "LCB V2",
    "toy_livebench": "LiveBench",
    "toy_mmlu": "MMLU",
    "toy_hellaswag": "HellaSwag",
}
LIST_TASKS = ("toy_mbpp", "toy_lcb")
LETTERS = ("A", "B", "C", "D")
DIGITS = tuple(str(d) for d in range(10))
LIST_OPS = ("sort", "reverse", "rotate", "swap")
# Difficulty (recalibrated, CHANGELOG.md): with b up to 9 the units digit stayed at chance in every DLLM-half
# model, and lists of 3-5 digits were learned far slower than lists of one length (3 % vs 97 % after 400 steps)
LIST_LENGTH = 4  # digits per list
MAX_ADDEND = 2  # b in a ± b (toy_math) and in the word problems (toy_gsm8k)
MAX_A = 9999  # a in 10..MAX_A (toy_math): enough distinct questions for the 5,000-question train split
TASK_WORDS = (
    "question",
    "answer",
    "problem",
    ":",
    "=",
    "+",
    "-",
    "[",
    "]",
    "then",
    "apply",
    "to",
    "gives",
    "takes",
    "how",
    "many",
    "does",
    "have",
    "which",
    "thing",
    "goes",
    "with",
    "what",
    "comes",
    "next",
    "plus",
    "minus",
    "from",
    "so",
    *LETTERS,
    *DIGITS,
    *LIST_OPS,
)


def task_vocabulary() -> list[str]:
    """The toy world's words followed by every word the tasks add (no duplicates, fixed order)."""
    words = list(word_list())
    return words + [w for w in TASK_WORDS if w not in words]


def digits(n: int) -> str:
    return " ".join(str(n))


def apply_ops(ops: list[str], xs: list[int]) -> list[int]:
    """The reference program of a list task: apply ``ops`` left to right to the list ``xs``."""
    for op in ops:
        if op == "sort":
            xs = sorted(xs)
        elif op == "reverse":
            xs = xs[::-1]
        elif op == "rotate":  # the first element moves to the end
            xs = xs[1:] + xs[:1]
        elif op == "swap":  # the first and the last element change places
            xs = xs[-1:] + xs[1:-1] + xs[:1] if len(xs) > 1 else xs
        else:
            raise ValueError(f"unknown list operation {op!r}; known: {', '.join(LIST_OPS)}")
    return xs


def parse_list(text: str) -> list[int] | None:
    """The digits between the last ``[`` and the next ``]`` of a generated answer (a worked answer writes each
    operation's result; the last is the final one), or None."""
    words = text.split()
    if "[" not in words:
        return None
    rest = words[len(words) - words[::-1].index("[") :]
    if "]" not in rest:
        return None
    body = rest[: rest.index("]")]
    return [int(w) for w in body] if all(w in DIGITS for w in body) else None


def _fmt_list(xs: list[int]) -> str:
    return "[ " + " ".join(map(str, xs)) + " ]"


def _subject(rng, scene: str) -> str:
    return rng.choice(SCENE_WORDS[scene]["subj"])


def _object(rng, scene: str) -> str:
    return rng.choice(SCENE_WORDS[scene]["obj"])


def _sentence(rng, scene: str, subject: str | None = None) -> str:
    """A toy-world sentence of one scene: ``det subj verb det obj .``."""
    return _sentence_and_subject(rng, scene, subject)[0]


def _sentence_and_subject(rng, scene: str, subject: str | None = None) -> tuple[str, str]:
    """:func:`_sentence` and its subject (the same draws)."""
    det = rng.choice(SHARED_WORDS["det"][:2])
    subject = subject or _subject(rng, scene)
    return f"{det} {subject} {rng.choice(SCENE_WORDS[scene]['verb'])} the {_object(rng, scene)} .", subject


def _math(rng, header="question", a_max=MAX_A, b_max=MAX_ADDEND):
    """``a ± b = ?`` with ``a`` in 10..``a_max`` and ``b`` in 1..``b_max``: a carry or borrow ties the answer's
    digits, and it ripples (``9 9 9 + 2`` -> ``1 0 0 1``, ``1 0 0 - 1`` -> ``9 9``).  The size knobs are
    arguments for ``scripts/dllm_sft_probe.py`` (before the recalibration: ``a_max=999, b_max=9``)."""
    a, b = rng.randint(10, a_max), rng.randint(1, b_max)
    op = rng.choice("+-")
    val = a + b if op == "+" else a - b
    q = f"{header} : {digits(a)} {op} {digits(b)} = ? answer :"
    # worked, computation first: the value (the step's result, its digits with their carries), then the equation it
    # solves (5-11 words), so Algorithm 3's window (the answer's first block) decides the result's digits, not a copy
    # of the question (docs/decisions.md: the room each format gives, measured before any rule ran on it)
    return {
        "question": q,
        "answer": f"{digits(val)} = {digits(a)} {op} {digits(b)}",
        "final": digits(val),
        "value": val,
    }


def _gsm8k(rng, header="question", b_max=MAX_ADDEND):
    """``a`` in 10..59 things, given ``b`` more or ``b`` taken away (``b`` in 1..``b_max``)."""
    scene = rng.choice(SCENES)
    other = rng.choice([s for s in SCENES if s != scene])
    subj, giver, obj = _subject(rng, scene), _subject(rng, other), _object(rng, scene)
    a, b = rng.randint(10, 59), rng.randint(1, b_max)
    if rng.random() < 0.5:  # the other one gives some more
        val, op, event = a + b, "+", f"the {giver} gives the {subj} {digits(b)} {obj} ."
    else:  # or takes some away
        val, op, event = a - b, "-", f"the {giver} takes {digits(b)} {obj} from the {subj} ."
    q = f"{header} : the {subj} has {digits(a)} {obj} . {event} how many {obj} does the {subj} have ? answer :"
    # worked, computation first: the count the story gives (its digits), then the equation from the story (7 words)
    return {
        "question": q,
        "answer": f"{digits(val)} = {digits(a)} {op} {digits(b)}",
        "final": digits(val),
        "value": val,
    }


def _list(rng, n_ops: int, template="question : {ops} {xs} answer :", lengths=(LIST_LENGTH, LIST_LENGTH)):
    """``n_ops`` distinct list operations applied to a list of ``lengths[0]..lengths[1]`` digits (the length is
    drawn only when the two differ; before the recalibration ``(3, 5)``)."""
    ops = rng.sample(LIST_OPS, n_ops)
    lo, hi = lengths
    xs = [rng.randint(0, 9) for _ in range(lo if lo == hi else rng.randint(lo, hi))]
    q = template.format(ops=" then ".join(ops), xs=_fmt_list(xs))
    # worked: each operation and the list it gives, the last one the result (7 or 14 words for lists of 4)
    steps, state = [], xs
    for op in ops:
        state = apply_ops([op], state)
        steps.append(f"{op} {_fmt_list(state)}")
    return {
        "question": q,
        "answer": " ".join(steps),
        "final": _fmt_list(state),
        "program": " ".join(ops) + " | " + " ".join(map(str, xs)),
    }


def _choices(rng, right: str, wrong: list[str]):
    options = [right] + wrong
    rng.shuffle(options)
    return options, LETTERS[options.index(right)]


def _mmlu(rng):
    """Which object belongs to the subject's scene; the model writes the object (a generative choice)."""
    scene = rng.choice(SCENES)
    others = rng.sample([s for s in SCENES if s != scene], 3)
    right = _object(rng, scene)
    options, gold = _choices(rng, right, [_object(rng, s) for s in others])
    subject = _subject(rng, scene)
    q = (
        f"question : which thing goes with the {subject} ? "
        + " ".join(f"{L} {o}" for L, o in zip(LETTERS, options))
        + " answer :"
    )
    # worked, decision first: the matching option named, then the subject it goes with, then its letter (8 words)
    return {"question": q, "answer": f"the {right} goes with the {subject} so {gold}", "final": gold, "gold": gold}


def _hellaswag(rng):
    """Which of four sentences continues the scene; the model writes that sentence's subject."""
    scene = rng.choice(SCENES)
    others = rng.sample([s for s in SCENES if s != scene], 3)
    subjects = [_subject(rng, s) for s in [scene] + others]
    sentences = [_sentence(rng, s, subj) for s, subj in zip([scene] + others, subjects)]
    options, gold = _choices(rng, sentences[0], sentences[1:])
    context, subject = _sentence_and_subject(rng, scene)
    q = (
        f"question : {context} what comes next ? "
        + " ".join(f"{L} {o}" for L, o in zip(LETTERS, options))
        + " answer :"
    )
    # worked, decision first: the continuation's subject, then the scene's it matches, then its letter (8 words)
    return {
        "question": q,
        "answer": f"the {subjects[0]} goes with the {subject} so {gold}",
        "final": gold,
        "gold": gold,
    }


def _livebench(rng):
    """Held-out templates: other headers and phrasings of the arithmetic, word-problem and list tasks."""
    kind = rng.randrange(3)
    if kind == 0:
        return {**_math(rng, header="problem"), "kind": "math"}
    if kind == 1:
        return {**_gsm8k(rng, header="problem"), "kind": "gsm8k"}
    return {**_list(rng, rng.choice((1, 2)), template="problem : apply {ops} to {xs} answer :"), "kind": "list"}


GENERATORS = {
    "toy_math": _math,
    "toy_gsm8k": _gsm8k,
    "toy_mbpp": lambda rng: _list(rng, 1),
    "toy_lcb": lambda rng: _list(rng, 2),
    "toy_livebench": _livebench,
    "toy_mmlu": _mmlu,
    "toy_hellaswag": _hellaswag,
}


MAX_TRAIN = 5000  # training documents per task at most; the test split excludes the first MAX_TRAIN


def task_seed(seed: int, task: str, split: str) -> int:
    return zlib.crc32(f"{seed}/{task}/{split}".encode())


def generate_task(task: str, split: str, n: int, seed: int = 0) -> list[dict]:
    """``n`` documents ``{id, question, answer, ...}`` of ``task``'s ``split`` (``train`` or ``test``).

    Documents of a split are distinct questions.  Test documents never repeat a training question: any of
    the first :data:`MAX_TRAIN` training questions is redrawn (a train split of ``n <= MAX_TRAIN`` is exactly
    those first ``n``)."""
    if task not in GENERATORS:
        raise KeyError(f"unknown toy task {task!r}; known: {', '.join(TASKS)}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be train or test, got {split!r}")
    rng = random.Random(task_seed(seed, task, split))
    seen = set()
    if split == "test" and task != "toy_livebench":
        seen = {d["question"] for d in generate_task(task, "train", MAX_TRAIN, seed)}
    if split == "train" and n > MAX_TRAIN:
        raise ValueError(f"at most {MAX_TRAIN} training documents per task (the test split excludes those)")
    docs = draw_distinct(GENERATORS[task], rng, n, seen, f"{task}: {split}")
    return [{"id": f"{task}/{split}/{i}", **doc} for i, doc in enumerate(docs)]


def draw_distinct(generate, rng: random.Random, n: int, seen: set, what: str) -> list[dict]:
    """``n`` documents of ``generate(rng)`` whose questions are distinct and not in ``seen`` (updated in place);
    ``RuntimeError`` naming ``what`` after more than 200,000 draws that repeat a question."""
    docs, misses = [], 0
    while len(docs) < n:
        doc = generate(rng)
        if doc["question"] in seen:
            misses += 1
            if misses > 200_000:
                raise RuntimeError(f"{what}: cannot draw {n} distinct questions (only {len(docs)})")
            continue
        seen.add(doc["question"])
        docs.append(doc)
    return docs


# ---------------------------------------------------------------------- scoring (one number per document)
PRIMARY_METRIC = {
    "toy_math": "exact_match",
    "toy_gsm8k": "exact_match",
    "toy_mbpp": "pass_at_1",
    "toy_lcb": "pass_at_1",
    "toy_livebench": "acc",
    "toy_mmlu": "acc",
    "toy_hellaswag": "acc",
}
MC_TASKS = ("toy_mmlu", "toy_hellaswag")


def _answer_words(completion: str) -> list[str]:
    """The completion's words up to (not including) the first ``<eos>`` word."""
    words = completion.split()
    return words[: words.index(EOS)] if EOS in words else words


def reference_list(program: str) -> list[int]:
    """Execute a list document's ``program`` (``"ops | xs"``, e.g. ``"sort reverse | 5 2 9"``) -> ``[9, 5, 2]``."""
    if not isinstance(program, str) or program.count("|") != 1:
        raise ValueError(f"a list program is 'ops | xs', got {program!r}")
    ops_text, xs_text = program.split("|")
    ops, xs_words = ops_text.split(), xs_text.split()
    if not ops or not all(w.lstrip("-").isdigit() for w in xs_words):
        raise ValueError(f"a list program needs at least one op and integer elements, got {program!r}")
    return apply_ops(ops, [int(w) for w in xs_words])


def final_words(words: list[str], *markers: str) -> list[str]:
    """The words after the last of any of ``markers`` (the final answer of a worked answer), or all of them
    without one."""
    at = max((i for i, w in enumerate(words) if w in markers), default=-1)
    return words[at + 1 :]


def result_words(words: list[str]) -> list[str]:
    """The result of a computation-first answer: the words before its first ``=`` (all of them without one)."""
    return words[: words.index("=")] if "=" in words else words


def _score_numbers(doc: dict, completion: str) -> float:
    """A document without a worked answer (``final`` absent: its ``answer`` is the final one) is scored the same way."""
    return float(result_words(_answer_words(completion)) == str(doc.get("final", doc["answer"])).split())


def _score_list(doc: dict, completion: str) -> float:
    if "program" not in doc or doc["program"] is None:
        raise KeyError(f"list document {doc.get('id')!r} has no 'program' to execute")
    return float(parse_list(" ".join(_answer_words(completion))) == reference_list(doc["program"]))


def _score_choice(doc: dict, completion: str) -> float:
    return float(final_words(_answer_words(completion), "so") == [str(doc["gold"]).strip()])


def score(task: str, doc: dict, completion: str) -> float:
    """1.0 if ``completion`` (the generated text after the prompt) answers ``doc`` of ``task``, else 0.0.

    * ``toy_math``, ``toy_gsm8k``: exact match of the words before the first ``=`` (the result a computation-first
      answer writes first; before the first ``<eos>``) with the final answer's words (``"7 3 = 7 1 + 2"`` and
      ``"7 3"`` count, ``"7 3 1 = ..."`` does not);
    * ``toy_mbpp``, ``toy_lcb``: *execution* of the reference program (:func:`reference_list`, i.e.
      :func:`apply_ops` on the document's ``program``) compared with :func:`parse_list` of the completion
      (its last list, before ``<eos>``); only integers parsed from the model's text reach :func:`apply_ops`, no
      model text is executed;
    * ``toy_mmlu``, ``toy_hellaswag``: the words after the last ``so`` are exactly the gold letter (``gold``);
    * ``toy_livebench``: per the document's ``kind`` (``math``/``gsm8k``: exact match, ``list``: execution).

    Raises ``KeyError`` for an unknown task (or a livebench ``kind``) and ``TypeError`` if ``completion``
    is not a string."""
    if task not in PRIMARY_METRIC:
        raise KeyError(f"unknown toy task {task!r}; known: {', '.join(TASKS)}")
    if not isinstance(completion, str):
        raise TypeError(f"completion for {task} must be a str, got {type(completion).__name__}")
    if task in ("toy_math", "toy_gsm8k"):
        return _score_numbers(doc, completion)
    if task in LIST_TASKS:
        return _score_list(doc, completion)
    if task in MC_TASKS:
        return _score_choice(doc, completion)
    kind = doc.get("kind")
    if kind in ("math", "gsm8k"):
        return _score_numbers(doc, completion)
    if kind == "list":
        return _score_list(doc, completion)
    raise KeyError(f"toy_livebench document {doc.get('id')!r} has unknown kind {kind!r}; known: math, gsm8k, list")
