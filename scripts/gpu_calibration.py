"""The map's calibration point: LLaDA-8B-Instruct + Qwen2.5-0.5B on GSM8K at Table 3's settings, on a GPU.

On the first --limit GSM8K test items: the backbone's own decode, Algorithm 3 with the proxy (Uni-E argmin) with the
window's candidate disagreement and steering, Algorithm 3 with an oracle proxy that knows each item's reference
solution (Ind-E argmin: the oracle ceiling), each scored by lm-eval's gsm8k metric; then, as time allows, the
window's candidate tree (explored ceiling and floor, pairwise AUCs).  Every decoding number comes from the resolved
config/paper.yaml (rows llada, llada_uni, llada_ind; dllm.decoding, dllm.energy, dllm.map.oracle_eps); what it
measures and how to read it against the map: docs/gpu-runs.md, "The calibration point" (unie/pipeline/calibration.py).

    python scripts/gpu_calibration.py --out DIR                      # on a CUDA machine with the models cached
    python scripts/gpu_calibration.py --out DIR --tiny --device cpu  # the same code on tiny random stand-ins

Offline by default (HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1): the models come from --backbone/--proxy (folders or
hub ids), else resources/hf/<name> (the paper profile's download rule), else the Hugging Face cache; GSM8K from
--data (its test parquet, or a folder holding main/test-*.parquet), else the cache's openai/gsm8k.
Writes DIR/calibration.json and DIR/calibration.md after every item (a time-out keeps what was measured)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the checkout, without pip install

# the tiny stand-ins' decoding: N = 32 / 4 = 8 iterations (tokens_per_step stays the paper's 4), the window's first 2
TINY_DECODING = {"gen_length": 32, "block_length": 8}
TINY_CHAT = (
    "{% for m in messages %}<user> {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant> {% endif %}"
)
TINY_NAMES = ["Ann", "Bob", "Cid", "Dee"]


def tiny_gsm8k(n: int, seed: int = 0) -> list[dict]:
    """``n`` GSM8K-like items (``question``, ``answer`` with its ``<<a+b=c>>`` note and ``#### c``): small sums."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        name, a, b = rng.choice(TINY_NAMES), rng.randint(1, 4), rng.randint(1, 4)
        out.append(
            {
                "question": f"{name} has {a} apples and gets {b} more. How many apples does {name} have?",
                "answer": f"{name} has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}",
            }
        )
    return out


def write_tiny(folder: Path, test_file: Path | None) -> tuple[Path, Path, Path]:
    """Tiny random stand-ins (unie.models.standins.write_hf_standin) of the backbone (a LLaDA-style folder: a byte-pair
    tokenizer with a mask and a chat template) and of the proxy (another byte-pair tokenizer: the bridge is
    needed), trained on the items' texts; without ``test_file``, GSM8K-like test and train parquet files in
    openai/gsm8k's layout.  Returns the two model folders and the data (``test_file`` or the written folder)."""
    import pandas as pd

    from unie.data.tokenizer import bpe_tokenizer
    from unie.models.standins import write_hf_standin

    data = test_file
    if data is None:
        data = folder / "gsm8k"
        (data / "main").mkdir(parents=True, exist_ok=True)
        for split, n, seed in (("test", 12, 0), ("train", 12, 1)):
            pd.DataFrame(tiny_gsm8k(n, seed)).to_parquet(data / "main" / f"{split}-00000-of-00001.parquet")
        test_file = data / "main" / "test-00000-of-00001.parquet"
    docs = pd.read_parquet(test_file) if test_file.suffix == ".parquet" else pd.read_json(test_file, lines=True)
    texts = [f"<user> Question: {q}\nAnswer:\n<assistant> {a}" for q, a in zip(docs["question"], docs["answer"])]
    texts = (texts + [" ".join(TINY_NAMES) + " 0 1 2 3 4 5 6 7 8 9 #### <<=+>> Question: Answer:"]) * 20
    backbone, proxy = bpe_tokenizer(texts, 110), bpe_tokenizer(texts, 80)
    backbone.hf.chat_template = TINY_CHAT
    write_hf_standin(folder / "backbone", backbone, seed=0, max_positions=256)
    write_hf_standin(folder / "proxy", proxy, seed=1, max_positions=256)
    return folder / "backbone", folder / "proxy", data


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for calibration.json / calibration.md")
    ap.add_argument("--limit", type=int, default=100, help="the first N GSM8K test items (default 100)")
    ap.add_argument(
        "--max-minutes",
        type=float,
        default=9.0,
        help="stop before the item that would pass this many minutes since the start (default 9)",
    )
    ap.add_argument(
        "--cap",
        type=int,
        default=8,
        help="the candidate tree's distinct nodes per level beyond the rules' paths (default 8)",
    )
    ap.add_argument("--no-tree", action="store_true", help="skip the candidate-tree phase")
    ap.add_argument("--num-fewshot", type=int, default=0, help="lm-eval gsm8k shots (default 0; 5 is its own)")
    ap.add_argument(
        "--no-chat-template",
        action="store_true",
        help="lm-eval's plain prompt instead of the backbone's chat template (lm-eval's --apply_chat_template)",
    )
    ap.add_argument("--w", type=float, default=None, help="another window than dllm.energy.w (another map cell)")
    ap.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="another candidate temperature than dllm.energy.temperature (another map cell)",
    )
    ap.add_argument("--backbone", default=None, help="LLaDA-8B-Instruct: a folder or a hub id")
    ap.add_argument("--proxy", default=None, help="Qwen2.5-0.5B: a folder or a hub id")
    ap.add_argument("--data", default=None, help="GSM8K's test parquet/jsonl, or a folder holding main/test-*.parquet")
    ap.add_argument("--config", default=str(REPO / "config" / "paper.yaml"))
    ap.add_argument("--allow-download", action="store_true", help="let the hub fill the cache (default: offline)")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--precision", default=None, help="default: the config's (bf16); fp32 with --tiny")
    ap.add_argument(
        "--hash-weights",
        action="store_true",
        help="record the SHA-256 of the weight files (~20 s for LLaDA-8B; default: paths and sizes)",
    )
    ap.add_argument("--tiny", action="store_true", help="tiny random stand-ins (a CPU check of the same code)")
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    if not a.allow_download:
        for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
            os.environ[k] = "1"

    import torch

    from unie.config.profile import resolve_config
    from unie.pipeline.calibration import (
        CalibrationError,
        build_decoders,
        chat_renderer,
        gsm8k_requests,
        gsm8k_task,
        paper_settings,
        reference_completion,
        resolve_data,
        resolve_model,
        run_calibration,
    )
    from unie.eval.room import leaf_scores

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if a.tiny:
        torch.set_num_threads(1)  # tiny matrices: threads only wait on each other (a shared CPU: 0.1 s per layer)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        config = resolve_config([a.config])
        precision = a.precision or ("fp32" if a.tiny else config.get("precision", "fp32"))
        energy = {k: v for k, v in (("w", a.w), ("temperature", a.temperature)) if v is not None}
        settings = paper_settings(
            config,
            device,
            precision,
            decoding=TINY_DECODING if a.tiny else None,
            energy=energy,
            loading={"mask_token": None} if a.tiny else None,
        )
        if a.tiny:
            given = resolve_data(a.data, False)["test"] if a.data else None
            backbone_dir, proxy_dir, data = write_tiny(out / "standins", given)
            files = resolve_data(str(data), False)
        else:
            shared = REPO / "resources" / "hf"
            backbone_dir = resolve_model(
                a.backbone, settings.model_names["backbone"], settings.hub_ids["backbone"], shared, a.allow_download
            )
            proxy_dir = resolve_model(
                a.proxy, settings.model_names["proxy"], settings.hub_ids["proxy"], shared, a.allow_download
            )
            files = resolve_data(a.data, a.allow_download)
        task = gsm8k_task(files, a.num_fewshot, settings.seed)
    except CalibrationError as e:
        sys.exit(f"gpu_calibration: {e}")
    dev_name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    print(
        f"device {device} ({dev_name}), torch {torch.__version__}; backbone {backbone_dir}, proxy {proxy_dir}, "
        f"data {files['test']}",
        flush=True,
    )

    # the prompts need the backbone's tokenizer (its chat template) before the models are loaded: read it alone
    from unie.data.tokenizer import hf_tokenizer

    chat = None if a.no_chat_template else chat_renderer(hf_tokenizer(backbone_dir))
    try:
        reqs = gsm8k_requests(task, a.limit, chat)
    except CalibrationError as e:
        sys.exit(f"gpu_calibration: {e}")
    references = {r["prompt"]: reference_completion(task, r["doc"], chat is not None) for r in reqs}
    t0 = time.perf_counter()
    dec = build_decoders(settings, backbone_dir, proxy_dir, references, a.hash_weights)
    for d in dec.decoders.values():  # prompts that do not fit, text the proxy cannot read: before any decode
        d.check([r["prompt"] for r in reqs])
    load_s = time.perf_counter() - t0
    print(f"models loaded in {load_s:.0f} s; {len(reqs)} items", flush=True)
    info = dec.info["decoders"]
    record = {
        "_t0": t_start,
        "device": f"{device} ({dev_name})",
        "torch": torch.__version__,
        "tiny": a.tiny,
        "requested_items": a.limit,
        "load_s": load_s,
        "max_minutes": a.max_minutes,
        "models": {k: v for k, v in dec.info.items() if k != "decoders"},
        "settings": {
            "backbone_label": "tiny stand-in" if a.tiny else "LLaDA-8B-Instruct",
            "proxy_label": "tiny stand-in" if a.tiny else settings.hub_ids["proxy"],
            "rows": {"backbone": "llada", "energy": "llada_uni", "oracle": "llada_ind"},
            "decoding": info["backbone"]["decoding"],
            "energy_options": info["energy"]["options"],
            "oracle_options": info["oracle"]["options"],
            "oracle_eps": settings.oracle_eps,
            "precision": precision,
            "seed": settings.seed,
            "metric": settings.metric,
            "prompt": f"lm-eval gsm8k, {a.num_fewshot}-shot, "
            + ("plain" if chat is None else "through the backbone's chat template"),
            "data": str(files["test"]),
            "config": str(a.config),
        },
    }

    def score(doc, texts, until):
        return leaf_scores(task, doc, texts, until, settings.metric)

    deadline = t_start + 60 * a.max_minutes
    record = run_calibration(reqs, dec, score, out, record, deadline, None if a.no_tree else a.cap)
    print((out / "calibration.md").read_text(), f"total {time.perf_counter() - t_start:.0f} s", flush=True)
    return record


if __name__ == "__main__":
    main()
