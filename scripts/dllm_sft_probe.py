"""Probe how fast a small bidirectional model learns the toy tasks with LLaDA's SFT loss (docs/dllm.md).

Outside the workflow: nothing is read or written, the result is printed as one JSON line.  A word-level
tokenizer, a model trained from scratch on ``--n-train`` rows per task (answers in 16 positions: the worked answers
and their ``<eos>`` padding, only the answer masked, LLaDA's loss through ``--estimator``), then the backbone's own
decoder in the profile's geometry (16 positions in blocks of 4, m = 2 tokens per step, low-confidence) on
``--n-test`` held-out questions per task, scored by the tasks' own scorers (on the final answer).  The calibration
measurements in CHANGELOG.md were made before the worked answers, with 8 positions in one block, m = 4, and answers
without work.
For arithmetic tasks the share of items whose answer digit ``j`` is right is printed too.

The defaults are the profile's tasks; ``--a-max 999 --max-addend 9 --list-lengths 3-5`` gives the tasks as they
were before their recalibration (CHANGELOG.md).

    python scripts/dllm_sft_probe.py --tasks toy_mbpp --steps 400 --list-lengths 3-5
    python scripts/dllm_sft_probe.py --tasks toy_math --steps 400 --a-max 999 --max-addend 3 --buckets 2 \\
        --estimator count
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import tempfile
import time

import torch

from unie.core.options import ModelConfig, TrainConfig
from unie.core.train import train
from unie.data import tasks as T
from unie.data.dllm_format import content_lengths, dllm_prompt_rows, dllm_sft_rows, trim_padding
from unie.data.tokenizer import word_tokenizer
from unie.dllm.backbone import ESTIMATORS, DecodeOptions, LLaDA, decode
from unie.dllm.decoder import completion_text
from unie.models.transformer import Transformer

GEN_LENGTH = 16  # the profile's decoding canvas (dllm.decoding.gen_length)


def list_lengths(text: str) -> tuple[int, int]:
    """``"4"`` -> ``(4, 4)``, ``"3-5"`` -> ``(3, 5)``; ``""`` -> the profile's (:data:`unie.data.tasks.LIST_LENGTH`)."""
    if not text:
        return T.LIST_LENGTH, T.LIST_LENGTH
    try:
        lo, hi = (int(v) for v in text.split("-")) if "-" in text else (int(text), int(text))
    except ValueError:
        raise SystemExit(f"--list-lengths takes K or LO-HI, got {text!r}") from None
    if not 1 <= lo <= hi:
        raise SystemExit(f"--list-lengths needs 1 <= LO <= HI, got {text!r}")
    return lo, hi


def math_format(kind: str, max_addend: int):
    """``aligned``: ``a`` in 110..889 ± ``b`` in 1..``max_addend`` (every answer 3 digits); ``add``: the same,
    addition only."""

    def generate(rng):
        a, b = rng.randint(110, 889), rng.randint(1, max_addend)
        op = "+" if kind == "add" else rng.choice("+-")
        value = a + b if op == "+" else a - b
        return {"question": f"question : {T.digits(a)} {op} {T.digits(b)} = ? answer :", "answer": T.digits(value)}

    return generate


def generators(
    tasks: list[str],
    lengths: tuple[int, int] = (T.LIST_LENGTH, T.LIST_LENGTH),
    math: str = "profile",
    a_max: int = T.MAX_A,
    max_addend: int = T.MAX_ADDEND,
) -> dict:
    """The tasks' generators with the given difficulty knobs (the defaults are the profile's; before the tasks'
    recalibration: lengths ``(3, 5)``, ``a_max = 999``, ``max_addend = 9``)."""
    if max_addend < 1 or a_max < 10:
        raise SystemExit(f"--max-addend must be >= 1 and --a-max >= 10, got {max_addend} and {a_max}")
    out = {}
    for task in tasks:
        if task not in T.GENERATORS or task == "toy_livebench":
            raise SystemExit(
                f"unknown or test-only task {task!r}; choose from "
                f"{', '.join(t for t in T.TASKS if t != 'toy_livebench')}"
            )
        if task in T.LIST_TASKS:
            out[task] = functools.partial(T._list, n_ops=1 if task == "toy_mbpp" else 2, lengths=lengths)
        elif task == "toy_math":
            out[task] = (
                functools.partial(T._math, a_max=a_max, b_max=max_addend)
                if math == "profile"
                else math_format(math, max_addend)
            )
        elif task == "toy_gsm8k":
            out[task] = functools.partial(T._gsm8k, b_max=max_addend)
        else:
            out[task] = T.GENERATORS[task]
    return out


def draw(gen, n: int, seed: int, exclude=frozenset()) -> list[dict]:
    """``n`` distinct questions not in ``exclude``; an error when the task has too few."""
    try:
        return T.draw_distinct(gen, random.Random(seed), n, set(exclude), "probe")
    except RuntimeError as e:
        raise SystemExit(f"{e}: lower --n-train/--n-test") from None


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", required=True, help="comma-separated toy tasks (toy_math, toy_mbpp, ...)")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--estimator", choices=ESTIMATORS, default="time")
    p.add_argument("--list-lengths", default="", help="K or LO-HI digits per list (default: the profile's)")
    p.add_argument("--math", choices=("profile", "aligned", "add"), default="profile")
    p.add_argument("--a-max", type=int, default=T.MAX_A, help="a's largest value in toy_math's a ± b")
    p.add_argument("--max-addend", type=int, default=T.MAX_ADDEND, help="b's largest value (toy_math, toy_gsm8k)")
    p.add_argument("--n-train", type=int, default=3000)
    p.add_argument("--n-test", type=int, default=200)
    p.add_argument("--buckets", type=int, default=1, help="train.length_buckets")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--d-model", type=int, default=96)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    gens = generators(args.tasks.split(","), list_lengths(args.list_lengths), args.math, args.a_max, args.max_addend)
    tok = word_tokenizer(T.task_vocabulary(), unk=True)
    train_docs = {t: draw(g, args.n_train, args.seed * 1000 + i) for i, (t, g) in enumerate(gens.items())}
    seen = {d["question"] for docs in train_docs.values() for d in docs}
    test_docs = {t: draw(g, args.n_test, args.seed * 1000 + 100 + i, seen) for i, (t, g) in enumerate(gens.items())}
    rows = [d for docs in train_docs.values() for d in docs]
    P = 1 + max(len(tok.encode(d["question"])) for docs in (*train_docs.values(), *test_docs.values()) for d in docs)
    data = dllm_sft_rows(tok, [d["question"] for d in rows], [d["answer"] for d in rows], P, GEN_LENGTH)
    method = LLaDA(tok.info(), estimator=args.estimator)
    torch.manual_seed(args.seed)
    net = Transformer(
        ModelConfig(
            vocab_size=tok.vocab_size,
            max_len=P + GEN_LENGTH,
            d_model=args.d_model,
            n_layers=args.layers,
            n_heads=4,
            causal=False,
        )
    )
    cfg = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup=50,
        ema=0.99,
        ckpt_every=10**9,
        length_buckets=args.buckets,
        seed=args.seed,
    )
    bucketed = {}
    if args.buckets > 1:
        bucketed = {
            "row_lengths": content_lengths(data, tok.eos_id),
            "collate": functools.partial(trim_padding, pad_id=tok.eos_id),
        }
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as ckpt:
        ema, _ = train(net, method.loss, data, cfg, ckpt, log=lambda s: None, progress=False, **bucketed)
    seconds = time.perf_counter() - start
    backbone = method.wrap(ema.eval())
    options = DecodeOptions(gen_length=GEN_LENGTH, block_length=4, tokens_per_step=2)  # the profile's
    result = {"args": vars(args), "train_seconds": round(seconds, 1), "accuracy": {}, "digit_accuracy": {}}
    for task, docs in test_docs.items():
        prompts = [d["question"] for d in docs]
        Pb = 1 + max(len(tok.encode(q)) for q in prompts) if args.buckets > 1 else P
        with torch.no_grad():
            out, _ = decode(backbone, dllm_prompt_rows(tok, prompts, Pb, GEN_LENGTH), options)
        texts = [completion_text(tok, row[Pb:].tolist()) for row in out]
        result["accuracy"][task] = round(100 * sum(T.score(task, d, c) for d, c in zip(docs, texts)) / len(docs), 1)
        if task in ("toy_math", "toy_gsm8k"):
            width = max(len(d["answer"].split()) for d in docs)
            right = [
                sum(
                    j < len(c.split()) and j < len(d["answer"].split()) and c.split()[j] == d["answer"].split()[j]
                    for d, c in zip(docs, texts)
                )
                for j in range(width)
            ]
            result["digit_accuracy"][task] = [round(100 * r / len(docs)) for r in right]
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
