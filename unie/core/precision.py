"""Numeric precision of the network passes: ``fp32`` (the default), ``tf32`` or ``bf16`` (docs/precision.md).

* ``fp32``: nothing changes (the toy profile, every CPU run of the workflow; bit-identical to a run without it).
* ``tf32``: on CUDA, float32 matmuls and convolutions use TF32 tensor cores (the flags are restored on exit);
  a no-op elsewhere.
* ``bf16``: ``torch.autocast(device_type, dtype=torch.bfloat16)``, as the released code (Lightning
  ``precision: bf16``): matmuls run in bfloat16, the weights, the optimiser state and the EMA stay float32.  On
  the CPU too when asked for explicitly (the tests do).

What keeps float32 (or float64) under ``bf16``: every network returns float32 logits (``Transformer.forward``,
the Hugging Face wrappers, the energy network cast their output), log-softmax / cross-entropy / logsumexp run on
them in float32 (:func:`widen` at the sites that take another network's raw output), the losses are
float32, the NELBOs and Gen PPL sums float64, the Gumbel noise and argmax decisions float64
(:mod:`unie.core.gumbel`); autocast never touches float64 tensors.

The workflow's ``precision`` key asks for the accelerator's precision: :func:`for_device` runs a CPU device in
``fp32`` whatever the key says.  The module imports torch only where a tensor is touched (:func:`autocast`,
:func:`widen`): the workflow reads :func:`for_device` as it starts (``unie.config.settings``), before any job.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

PRECISIONS = ("fp32", "tf32", "bf16")


def check_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else a ValueError naming them."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    return precision


def for_device(precision: str, device) -> str:
    """The precision the workflow runs on ``device``: the configured one on an accelerator, ``fp32`` on the CPU."""
    check_precision(precision)
    return "fp32" if str(device).partition(":")[0] == "cpu" else precision  # torch.device(device).type, without torch


def precision_record(precision: str) -> dict:
    """``{"precision": precision}`` for a result's metadata, ``{}`` for ``fp32`` (records of fp32 runs are the same
    as before the option existed)."""
    return {} if check_precision(precision) == "fp32" else {"precision": precision}


@contextlib.contextmanager
def autocast(device, precision: str = "fp32"):
    """Run the enclosed network passes on ``device`` in ``precision`` (module doc); ``fp32`` is a no-op."""
    import torch

    check_precision(precision)
    kind = torch.device(device).type
    if precision == "bf16":
        with torch.autocast(kind, dtype=torch.bfloat16):
            yield
    elif precision == "tf32" and kind == "cuda":
        saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    else:
        yield


def widen(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 at least: a bfloat16/float16 tensor is cast, any other is returned as it is (the same
    object).  The rule for logits before any log-softmax, cross-entropy or logsumexp, and for a loss."""
    import torch

    return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t
