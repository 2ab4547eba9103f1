"""Sequence layouts of the DLLM half (Table 3): how a prompt and its answer become a fixed-length row.

* **DLLM layout** (LLaDA-like and Dream-like, bidirectional): ``[<eos> pads; <bos>; prompt; answer; <eos> pads]``.
  The prompt is left-padded with ``<eos>`` to ``prompt_len`` positions so that every answer starts at the same
  position ``prompt_len``, and the answer is followed by ``<eos>`` up to ``gen_len`` positions (LLaDA's SFT:
  the ``<eos>`` padding inside the answer is trained as tokens, so the model learns where to stop).
  Training and decoding use the same layout (the pads are visible, as in training).  A model trained on
  length-bucketed batches (``pad_to_batch``) and a Hugging Face DLLM decode each prompt padded only to its own
  length (:class:`unie.dllm.decoder.DLLMDecoder` groups a call's prompts by length), so the padding a row sees
  never depends on the other rows of its batch.
* **AR layout** (the AR rows and the proxy, causal): ``[prompt; answer; <eos>; <eos> pads]`` right-padded to
  ``prompt_len + gen_len`` (the AR prepends its ``<bos>`` itself); right padding never changes a causal
  model's earlier conditionals.

SFT rows are ``(N, 2, T)`` int64: row 0 the tokens, row 1 the loss mask (1 on answer positions, the
answer's ``<eos>`` padding included for the DLLM layout; the answer and its first ``<eos>`` for the AR
layout).  Pretraining rows are ``(N, T)`` (every position is a target).
"""

from __future__ import annotations

import torch

# the layout of each DLLM-half method's rows (config `dllm.models.NAME.method`)
LAYOUTS = {"llada": "dllm", "dream": "dllm", "ar": "ar"}


def prompt_length(tokenizer, prompts: list[str]) -> int:
    """Positions the longest prompt needs in the DLLM layout (``<bos>`` included)."""
    return 1 + max(len(ids) for ids in tokenizer.encode_batch(prompts))


def dllm_prompt_rows(tokenizer, prompts: list[str], prompt_len: int, gen_len: int) -> torch.Tensor:
    """``(N, prompt_len + gen_len)``: left-padded prompts followed by ``gen_len`` masks (decoding input)."""
    rows = []
    for text, ids in zip(prompts, tokenizer.encode_batch(prompts)):
        pad = prompt_len - 1 - len(ids)
        if pad < 0:
            raise ValueError(f"prompt of {len(ids)} tokens does not fit prompt_len={prompt_len}: {text[:60]!r}...")
        rows.append([tokenizer.eos_id] * pad + [tokenizer.bos_id] + ids + [tokenizer.mask_id] * gen_len)
    return torch.tensor(rows, dtype=torch.long)


def dllm_sft_rows(tokenizer, prompts: list[str], answers: list[str], prompt_len: int, gen_len: int) -> torch.Tensor:
    """``(N, 2, T)`` SFT rows in the DLLM layout (loss on the ``gen_len`` answer positions)."""
    x = dllm_prompt_rows(tokenizer, prompts, prompt_len, gen_len)
    for n, ids in enumerate(tokenizer.encode_batch(answers)):
        if len(ids) >= gen_len:
            raise ValueError(f"answer of {len(ids)} tokens does not fit gen_len={gen_len} (one <eos> at least)")
        x[n, prompt_len:] = torch.tensor(ids + [tokenizer.eos_id] * (gen_len - len(ids)))
    loss_mask = torch.zeros_like(x)
    loss_mask[:, prompt_len:] = 1
    return torch.stack([x, loss_mask], dim=1)


def ar_sft_rows(tokenizer, prompts: list[str], answers: list[str], length: int) -> torch.Tensor:
    """``(N, 2, length)`` SFT rows in the AR layout (loss on the answer and its first ``<eos>``)."""
    rows, masks = [], []
    for p, a in zip(tokenizer.encode_batch(prompts), tokenizer.encode_batch(answers)):
        seq = p + a + [tokenizer.eos_id]
        if len(seq) > length:
            raise ValueError(f"prompt + answer of {len(seq)} tokens does not fit length={length}")
        rows.append(seq + [tokenizer.eos_id] * (length - len(seq)))
        masks.append([0] * len(p) + [1] * (len(a) + 1) + [0] * (length - len(seq)))
    return torch.stack([torch.tensor(rows), torch.tensor(masks)], dim=1).long()


def pack_text(tokenizer, texts: list[str], length: int) -> torch.Tensor:
    """Pretraining rows ``(N, length)``: the texts encoded, joined by ``<eos>`` and cut into rows."""
    flat = []
    for ids in tokenizer.encode_batch(texts):
        flat += ids + [tokenizer.eos_id]
    n = len(flat) // length
    if n == 0:
        raise ValueError(f"{len(flat)} tokens make no row of length {length}")
    return torch.tensor(flat[: n * length], dtype=torch.long).view(n, length)


def split_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens (B, T), loss_mask (B, T) bool)`` of SFT rows ``(B, 2, T)`` or pretraining rows ``(B, T)``."""
    if x.dim() == 3:
        return x[:, 0], x[:, 1].bool()
    return x, torch.ones_like(x, dtype=torch.bool)


def _content(x: torch.Tensor, pad_id: int) -> torch.Tensor:
    """``(B, T)`` bool: positions of SFT rows ``(B, 2, T)`` that are not padding (padding = ``pad_id`` with no loss)."""
    return (x[:, 0] != pad_id) | (x[:, 1] != 0)


def content_lengths(x: torch.Tensor, pad_id: int) -> torch.Tensor:
    """``(N,)``: the span from each SFT row's first to its last non-padding position (pretraining rows ``(N, T)``:
    ``T``).  The DLLM layout's leading ``<eos>`` pads and the AR layout's trailing ones are padding; the DLLM
    answer's ``<eos>`` positions carry a loss and are not."""
    if x.dim() == 2:
        return torch.full((x.shape[0],), x.shape[1], dtype=torch.long)
    keep = _content(x, pad_id)
    T = keep.shape[1]
    first = keep.float().argmax(1)
    last = T - 1 - keep.flip(1).float().argmax(1)
    return (last - first + 1).clamp(min=0)


def trim_padding(x: torch.Tensor, pad_id: int) -> torch.Tensor:
    """SFT rows ``(B, 2, T)`` without the leading and trailing columns that are padding in every row (a
    length-bucketed batch); pretraining rows are returned as they are.  Relative positions, hence a rotary
    model's view of the content, are unchanged."""
    if x.dim() == 2:
        return x
    cols = _content(x, pad_id).any(0).nonzero().flatten()
    if len(cols) == 0:
        return x
    return x[..., int(cols[0]) : int(cols[-1]) + 1]
