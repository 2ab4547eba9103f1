"""The lm-eval adapter: any :class:`unie.core.protocols.TextDecoder` as an ``lm_eval`` model.

Registered as ``unie_dllm`` and ``unie_ar`` (the same class; the decoder decides what runs).  From Python::

    lm = UnieLM(decoder=my_decoder, batch_size=32, throughput_path="tp.json")
    lm_eval.simple_evaluate(model=lm, tasks=["toy_dllm"],
                            task_manager=TaskManager(include_path=task_dir, include_defaults=False))

From the shell, like LLaDA's ``eval_llada.py`` and Dream's ``eval/eval.py`` (importing this module is what
registers the models; lm-eval discovers no plugins)::

    python -m unie.dllm.lmeval --model unie_dllm --model_args k=v,... --tasks toy_dllm \\
        --include_path TASK_DIR --device cpu --batch_size 32

Without a ``decoder`` the constructor builds one with :func:`unie.dllm.decoder.build_decoder` from the
``--model_args`` (values literal-eval'd by lm-eval) plus ``device`` (``--device``; lm-eval's CLI default ``cuda:0``
falls back to cpu with a warning where CUDA is unavailable, :func:`resolve_device`).  ``lm_eval --model unie_dllm``
itself cannot find the model (lm-eval 0.4 has no plugin discovery); from Python, ``import unie.dllm.lmeval`` first and
``lm_eval.simple_evaluate(model="unie_dllm", model_args=...)`` works.

A request's answer does not depend on its batch, the task mix or the order (as with lm-eval's own models):
prompts are batched by the decoder's ``batch_key`` (their length where the padding depends on it), every
request's noise is seeded from the model's seed and the request itself (:mod:`unie.dllm.decoder`), and
``is_greedy`` is computed (the decoder's ``loglikelihood_greedy``).  The results' ``config`` records the decoder's
model arguments and options (:meth:`UnieLM.get_model_info`).

Throughput: only the decoder's ``generate`` calls are timed, after one untimed warm-up (the first batch is
generated once and discarded), so model loading, compilation and first-call allocations are excluded.
Counters (requests, generated tokens, NFE, seconds) accumulate over the adapter's lifetime and are written
to ``throughput_path`` after every ``generate_until`` call.

Data parallel, as LLaDA and Dream run their scripts under ``accelerate launch``: start N ranks with torchrun::

    torchrun --standalone --nproc_per_node=N -m unie.dllm.lmeval --model unie_dllm --model_args k=v,... \
        --tasks toy_dllm --include_path TASK_DIR --device cuda --batch_size 32 --output_path OUT --log_samples

Under torchrun (``WORLD_SIZE`` > 1) the adapter joins the process group (initialising it if needed: nccl with
the model on ``cuda:LOCAL_RANK`` for a CUDA ``--device``, else gloo on CPU) and reports its ``rank`` and
``world_size``.  lm-eval 0.4.13's evaluator then does the rest with the adapter's ``all_gather``,
``gather_object`` and ``barrier`` (no ``accelerate``): every rank builds the requests of every
``world_size``-th document, the adapter answers only those, and rank 0 gathers the per-document metrics and
samples and alone writes the results (:func:`evaluate`'s files too).  lm-eval pads a rank that has fewer
requests than another with copies of its last request; the adapter answers a copy with the original's result
instead of generating it again.  Throughput: each rank times its own generation; rank 0 writes a record of
the totals over the ranks (requests, tokens, NFE), whose ``seconds`` is the slowest rank's timed generation
(summed over ``generate_until`` calls, after each of which the ranks wait for one another), so
``tokens_per_s`` is the rate of all ranks together; the per-rank counters are under ``ranks``.
:func:`run_evaluation` runs :func:`evaluate` in this process or on N ranks (the ``dllm_eval`` rule).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from ..core.ranks import reporting_rank_errors, run_ranks
from .backbone import DEFAULT_MAX_GEN_TOKS
from .energy_decoding import WINDOW_COUNTERS

MODEL_NAMES = ("unie_dllm", "unie_ar")
DEFAULT_BATCH_SIZE = 32

log = logging.getLogger(__name__)


def _positive_int(name: str, value) -> int:
    """``value`` (an int or a digit string, as lm-eval passes it) as an int >= 1, or a ValueError naming it."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive integer, got {value!r}") from None
    if isinstance(value, bool) or n < 1 or (isinstance(value, float) and value != n):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return n


def truncate_at(text: str, until: list[str]) -> str:
    """``text`` cut before the earliest occurrence of any stop string in ``until`` (empty strings ignored)."""
    cut = min((i for i in (text.find(s) for s in until if s) if i >= 0), default=len(text))
    return text[:cut]


def _stop_strings(gen_kwargs: dict) -> list[str]:
    until = gen_kwargs.get("until") or []
    if isinstance(until, str):
        return [until]
    if not isinstance(until, (list, tuple)) or not all(isinstance(s, str) for s in until):
        raise ValueError(f"gen_kwargs 'until' must be a string or a list of strings, got {until!r}")
    return list(until)


def _atomic_write_json(path: Path, obj: dict) -> None:
    from ..core.integrity import atomic_write_text

    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


LMEVAL_OUTPUTS = ("results_*.json", "samples_*.jsonl")  # what lm-eval's EvaluationTracker writes (with a timestamp)


def clear_lmeval_outputs(output_path) -> list[Path]:
    """Remove what an earlier lm-eval run left under ``output_path`` (its timestamped ``results_*.json`` and
    ``samples_*.jsonl``, our ``throughput.json``), so that a rerun leaves exactly one result set; returns the
    removed paths."""
    output_path = Path(output_path)
    old = [f for pattern in LMEVAL_OUTPUTS for f in output_path.rglob(pattern)] + [
        f for f in [output_path / "throughput.json"] if f.exists()
    ]
    for f in old:
        f.unlink()
    return old


def join_world(device: str) -> tuple[int, int, str]:
    """``(rank, world size, device)`` of this process: ``(0, 1, device)`` unless launched by torchrun
    (``WORLD_SIZE`` > 1) or inside an initialised process group.  Under torchrun the default process group is
    initialised here if it is not yet: nccl when ``device`` is CUDA (which becomes ``cuda:LOCAL_RANK``), else gloo.
    The timeout is a year, as in lm-eval's HFLM: the ranks meet only after generating their shares, and one rank
    may finish hours before another (torchrun ends every rank when one fails, so nothing waits forever)."""
    import torch
    import torch.distributed as dist

    from unie.core.distributed import init_from_env

    grouped = dist.is_available() and dist.is_initialized()
    if not grouped and int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1, device
    if not grouped:
        device = init_from_env(device, timeout=timedelta(weeks=52))
        atexit.register(lambda: dist.is_initialized() and dist.destroy_process_group())  # ours to end
    elif str(device).startswith("cuda"):
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    return dist.get_rank(), dist.get_world_size(), device


def resolve_device(device) -> str:
    """``device``, or ``cpu`` with a warning when it names CUDA and this torch has no usable CUDA (lm-eval's CLI
    passes ``cuda:0`` when no ``--device`` is given; lm-eval's HFLM falls back the same way)."""
    import torch

    device = "cpu" if device in (None, "") else str(device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        log.warning(
            "device %r requested but CUDA is not available (no GPU, or torch built without CUDA): using "
            "cpu; pass --device cpu to silence this",
            device,
        )
        return "cpu"
    return device


GEN_KWARGS_READ = ("until", "max_gen_toks")  # what the adapter applies; the decoder's own options decide the rest


def _is_sampling(gen_kwargs: dict) -> bool:
    temperature = gen_kwargs.get("temperature")
    return bool(gen_kwargs.get("do_sample")) or (temperature not in (None, 0, 0.0, "0", "0.0"))


def padding_copies(requests) -> dict[int, int]:
    """Positions of lm-eval's padding in ``requests`` -> the position of the request each one repeats.

    Under data parallelism lm-eval's evaluator (0.4.13, ``padding_requests``) appends to a rank's requests
    ``repeats`` more copies of its last ``Instance`` per request another rank has in excess, so that every rank
    runs as many; an ``Instance`` occurring more often than its ``repeats`` is such a copy (its result is
    appended to that request's responses, where lm-eval's ``take_first`` filter never reads it)."""
    seen: dict[int, list[int]] = {}
    pad = {}
    for i, req in enumerate(requests):
        where = seen.setdefault(id(req), [])
        if len(where) >= (getattr(req, "repeats", None) or 1):
            pad[i] = where[0]
        else:
            where.append(i)
    return pad


@register_model(*MODEL_NAMES)
class UnieLM(LM):
    """An lm-eval ``LM`` over a :class:`~unie.core.protocols.TextDecoder` (batched; one process, or one rank of
    a torchrun launch: see the module docstring).

    ``batch_size`` prompts (or likelihood pairs) go to the decoder per call; ``"auto"`` means
    ``max_batch_size`` if given, else :data:`DEFAULT_BATCH_SIZE`.  ``device`` goes to
    ``build_decoder`` with the other model arguments (``cuda:LOCAL_RANK`` for a CUDA device under torchrun;
    a ready ``decoder`` keeps its own device).  ``throughput_path``: where the generation throughput JSON goes
    (None: nowhere; rank 0 writes it)."""

    def __init__(
        self,
        decoder=None,
        batch_size=DEFAULT_BATCH_SIZE,
        throughput_path=None,
        device="cpu",
        max_batch_size=None,
        **model_args,
    ):
        super().__init__()
        if isinstance(batch_size, str) and batch_size.startswith("auto"):
            batch_size = DEFAULT_BATCH_SIZE if max_batch_size is None else max_batch_size
        self.batch_size = _positive_int("batch_size", batch_size)  # checked before any model is loaded
        if decoder is not None and model_args:
            raise ValueError(
                f"model arguments {sorted(model_args)} given together with a ready decoder "
                f"{getattr(decoder, 'name', decoder)!r}; pass one or the other"
            )
        resolved = resolve_device(device)
        if resolved != str(device) and model_args.get("precision", "fp32") != "fp32":  # CUDA asked for, CPU used
            log.warning(
                "precision %s was asked for %s; the cpu runs fp32 (unie.core.precision.for_device)",
                model_args["precision"],
                device,
            )
            model_args = {**model_args, "precision": "fp32"}
        # what a command line must pass to build this decoder again (:func:`lmeval_command`): the model arguments
        # as given (fp32 after a CUDA fallback) and the device before torchrun's cuda:LOCAL_RANK
        self.given_model_args = None if decoder is not None else dict(model_args)
        self.given_device = resolved
        rank, world_size, device = join_world(resolved)
        if decoder is None:
            from unie.dllm.decoder import build_decoder

            # lm-eval hands ``--device`` (or a ``device=`` model arg) to this constructor, never inside
            # model_args, so it is passed on to the decoder factory here
            decoder = build_decoder({**model_args, "device": device})
        for attr in ("name", "generate", "loglikelihood"):
            if not hasattr(decoder, attr):
                raise TypeError(f"decoder {decoder!r} lacks {attr!r}: not a unie.core.protocols.TextDecoder")
        self.decoder = decoder
        self.throughput_path = None if throughput_path in (None, "") else Path(throughput_path)
        self._rank, self._world_size, self._device = rank, world_size, device  # the properties are read-only
        self.stats = {"requests": 0, "generated_tokens": 0, "nfe": 0, "seconds": 0.0, "cpu_seconds": 0.0}
        self._warmed_up = False
        self._world_seconds, self._rank_stats = 0.0, []  # rank 0 of several: see throughput()
        self._warned: set[str] = set()

    def _warn_once(self, key: str, message: str) -> None:
        """``message`` as a warning, once per distinct ``key`` over the adapter's lifetime (rank 0 only)."""
        if key not in self._warned:
            self._warned.add(key)
            if self.rank == 0:
                log.warning(message)

    def get_model_info(self) -> dict:
        """What lm-eval's evaluator adds to the results' ``config`` (lm-eval 0.4.13 records ``model_args: None``
        for a ready model instance): ``model_args`` (the decoder's parsed model arguments: checkpoint, sampler,
        options, decoding, seed, ...; for a ready decoder without them, its :meth:`info`), and ``unie_decoder``,
        the decoder's own record (checkpoint, proxy, the SHA-256 of their weights, sampler, its resolved options,
        decoding, seed, precision, the device its model is on).  :func:`evaluate` also has lm-eval record the
        batch size and the device actually used (``config.batch_size``, ``config.device``)."""
        info = self.decoder.info() if hasattr(self.decoder, "info") else {"decoder": self.decoder.name}
        model_args = getattr(self.decoder, "model_args", None)
        if model_args:
            info["checkpoint"] = str(model_args.get("pretrained", info.get("checkpoint", "")))
        return {"model_args": model_args or info, "unie_decoder": info}

    # ------------------------------------------------------------------ data parallel (lm-eval's evaluator)
    def _comm_device(self):
        """Where collectives run: the current GPU for nccl, the CPU for gloo."""
        import torch
        import torch.distributed as dist

        if dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def all_gather(self, tensor):
        """Every rank's ``tensor`` concatenated in rank order (a 0-d tensor counts as one element), as
        ``accelerate``'s ``gather`` that lm-eval's HFLM uses; on ``tensor``'s device."""
        if self.world_size == 1:
            return tensor
        import torch
        import torch.distributed as dist

        t = tensor.reshape(1) if tensor.dim() == 0 else tensor
        t = t.to(self._comm_device())
        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(parts, t)
        return torch.cat(parts).to(tensor.device)

    def gather_object(self, obj, dst=0):
        """Every rank's ``obj`` in a list on rank ``dst`` (None elsewhere)."""
        if self.world_size == 1:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world_size if self.rank == dst else None
        dist.gather_object(obj, out, dst=dst)
        return out

    def barrier(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    # ------------------------------------------------------------------ generation
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """One completion per request ``(context, gen_kwargs)``, in input order.

        Requests with identical ``gen_kwargs`` are batched together, sorted by the decoder's ``batch_key`` (the
        prompt length where the padding depends on it) so that a batch holds prompts of one key, as lm-eval's HFLM
        sorts by length; each completion is cut at its earliest ``until`` string.  ``max_gen_toks`` goes to the
        decoder (beyond its ``gen_length`` it cannot be honoured: a warning); sampling keys (``do_sample``,
        ``temperature``) and any other key are not applied (the sampler's options decide): a warning, once per
        distinct setting.  Each row's noise is seeded from the model's seed, the context, the ``gen_kwargs`` and
        the request's repeat index (decoders whose ``generate`` takes ``keys``), so an answer does not depend on its
        batch, the task mix or the order.  ``generated_tokens`` counts per row the tokens up to and including the
        first ``<eos>``, or up to the stop-string cut (decoders that report ``row_tokens``).
        With several ranks every rank must call this as often as the others (lm-eval does: once per run), since
        rank 0 gathers the throughput counters at the end."""
        import inspect

        if not requests and self.world_size == 1:
            return []
        pad = padding_copies(requests) if self.world_size > 1 else {}
        groups: dict[str, list[int]] = {}
        for i, req in enumerate(requests):
            context, gen_kwargs = req.args
            if not isinstance(context, str) or not isinstance(gen_kwargs, dict):
                raise TypeError(f"generate_until request {i} must be (str, dict), got {req.args!r}")
            if i not in pad:
                groups.setdefault(json.dumps(gen_kwargs, sort_keys=True, default=str), []).append(i)
        if requests and hasattr(self.decoder, "check"):  # prompts that do not fit, unreadable text: before any work
            self.decoder.check([req.args[0] for req in requests])
        gen_length = getattr(self.decoder, "gen_length", None)
        for key, idx in groups.items():
            gen_kwargs = requests[idx[0]].args[1]
            _stop_strings(gen_kwargs)  # malformed ``until``: before any work
            max_new = _positive_int("max_gen_toks", gen_kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
            if gen_length is not None and max_new > gen_length:
                self._warn_once(
                    f"max_gen_toks={max_new}",
                    f"max_gen_toks={max_new} exceeds the decoder's gen_length "
                    f"{gen_length}: completions are at most {gen_length} tokens (raise gen_length in "
                    "model_args to honour it)",
                )
            ignored = {k: v for k, v in gen_kwargs.items() if k not in GEN_KWARGS_READ}
            if _is_sampling(gen_kwargs) or set(ignored) - {"do_sample", "temperature"}:
                self._warn_once(
                    json.dumps(ignored, sort_keys=True, default=str),
                    f"gen_kwargs {ignored} are not applied by {self.decoder.name!r}: its sampler and "
                    "options decide how it decodes (set them in model_args)",
                )
        batch_key = getattr(self.decoder, "batch_key", None)
        takes_keys = "keys" in inspect.signature(self.decoder.generate).parameters
        repeat, seen = {}, {}  # lm-eval's ``repeats`` are copies of one Instance: their index seeds distinct noise
        for i, req in enumerate(requests):
            if i not in pad:
                repeat[i] = seen.get(id(req), 0)
                seen[id(req)] = repeat[i] + 1
        out: list[str | None] = [None] * len(requests)
        seconds_before = self.stats["seconds"]
        bar = tqdm(
            total=len(requests) - len(pad),
            desc=f"generate_until ({self.decoder.name})",
            disable=disable_tqdm or self.rank != 0,
        )
        for gk_key, idx in groups.items():
            gen_kwargs = requests[idx[0]].args[1]
            until = _stop_strings(gen_kwargs)
            max_new = _positive_int("max_gen_toks", gen_kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
            by_key: dict = {}
            for i in idx:  # input order kept inside a key
                by_key.setdefault(batch_key(requests[i].args[0]) if batch_key else 0, []).append(i)
            batches = [
                same[s : s + self.batch_size]
                for k in sorted(by_key)
                for same in [by_key[k]]
                for s in range(0, len(same), self.batch_size)
            ]
            for batch in batches:
                prompts = [requests[i].args[0] for i in batch]
                extra = {"keys": [json.dumps([gk_key, repeat[i]]) for i in batch]} if takes_keys else {}
                if not self._warmed_up:  # untimed, discarded: loading/compilation/allocator warm-up
                    self.decoder.generate(prompts, max_new, **extra)
                    self._warmed_up = True
                c0, t0 = time.process_time(), time.perf_counter()
                texts, counters = self.decoder.generate(prompts, max_new, **extra)
                self.stats["seconds"] += time.perf_counter() - t0
                self.stats["cpu_seconds"] += time.process_time() - c0  # the process's CPU over the same stretches
                if len(texts) != len(prompts):
                    raise ValueError(
                        f"decoder {self.decoder.name!r} returned {len(texts)} completions for {len(prompts)} prompts"
                    )
                missing = {"nfe", "generated_tokens"} - set(counters)
                if missing:
                    raise KeyError(
                        f"decoder {self.decoder.name!r} returned counters {sorted(counters)} without {sorted(missing)}"
                    )
                self.stats["requests"] += len(prompts)
                self.stats["nfe"] += int(counters["nfe"])
                for k in WINDOW_COUNTERS:  # Algorithm 3's window counters, when the sampler reports them
                    if k in counters:
                        self.stats[k] = self.stats.get(k, 0) + int(counters[k])
                rows = counters.get("row_tokens")
                tokens = 0 if rows is not None else int(counters["generated_tokens"])
                for n, (i, text) in enumerate(zip(batch, texts)):
                    out[i] = truncate_at(text, until)
                    if rows is not None:
                        cut = out[i] != text and hasattr(self.decoder, "count_tokens")
                        tokens += min(int(rows[n]), self.decoder.count_tokens(out[i])) if cut else int(rows[n])
                    self.cache_hook.add_partial("generate_until", requests[i].args, out[i])
                self.stats["generated_tokens"] += tokens
                bar.update(len(batch))
        bar.close()
        for i, j in pad.items():
            out[i] = out[j]
        if self.world_size > 1:  # every rank's counters and the seconds of this call, on rank 0
            gathered = self.gather_object((dict(self.stats), self.stats["seconds"] - seconds_before))
            if self.rank == 0:
                self._rank_stats = [stats for stats, _ in gathered]
                self._world_seconds += max(seconds for _, seconds in gathered)
        if self.throughput_path is not None and self.rank == 0:
            _atomic_write_json(self.throughput_path, self.throughput())
        return out

    def throughput(self) -> dict:
        """The accumulated generation counters and rates (warm-up excluded).

        On rank 0 of several: the totals over the ranks, with ``seconds`` the slowest rank's timed generation
        (per ``generate_until`` call, summed over calls: the ranks generate at the same time), ``world_size``,
        and each rank's own counters under ``ranks``; ``batch_size`` is per rank.  On another rank: its own."""
        s, extra = self.stats, {}
        if self.world_size > 1 and self.rank == 0:
            s = {
                k: sum(r.get(k, 0) for r in self._rank_stats)
                for k in ("requests", "generated_tokens", "nfe", *WINDOW_COUNTERS)
                if k in self.stats
            }
            s["seconds"] = self._world_seconds
            extra = {"world_size": self.world_size, "ranks": self._rank_stats}
        secs = s["seconds"]
        # the process CPU time of the timed generation (all its threads), beside its wall-clock ``seconds``: a pass
        # that shared its cores shows less CPU than wall x threads (unie.eval.timing); one process's only
        cpu = s.get("cpu_seconds") if not extra else None
        return {
            "requests": s["requests"],
            "generated_tokens": s["generated_tokens"],
            "nfe": s["nfe"],
            "seconds": secs,
            "cpu_seconds": cpu,
            "tokens_per_s": s["generated_tokens"] / secs if secs > 0 else None,
            "requests_per_s": s["requests"] / secs if secs > 0 else None,
            "batch_size": self.batch_size,
            "warmup_excluded": True,
            "decoder": self.decoder.name,
            **{k: s[k] for k in WINDOW_COUNTERS if k in s},
            **extra,
        }

    # ------------------------------------------------------------------ likelihood
    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """``(log p(continuation | context), is_greedy)`` per request ``(context, continuation)``, in input order;
        lm-eval's padding copies are not recomputed.  Both come from the decoder's ``loglikelihood_greedy``
        (an AR model: exact, ``is_greedy`` when every continuation token is the argmax; a DLLM: LLaDA's MC-ELBO, its
        noise seeded per request, and LLaDA's greedy-decode rule, see
        :meth:`unie.dllm.decoder.DLLMDecoder.loglikelihood_greedy`); a decoder without it gives ``is_greedy``
        False, with a warning (a task's ``acc`` that reads it would be 0)."""
        pad = padding_copies(requests) if self.world_size > 1 else {}
        todo = [i for i in range(len(requests)) if i not in pad]
        both = getattr(self.decoder, "loglikelihood_greedy", None)
        if both is None and todo:
            self._warn_once(
                "is_greedy",
                f"decoder {self.decoder.name!r} does not compute is_greedy: it is False "
                "for every request (a loglikelihood task's acc reads it)",
            )
        out: list[tuple[float, bool] | None] = [None] * len(requests)
        for start in tqdm(
            range(0, len(todo), self.batch_size),
            desc=f"loglikelihood ({self.decoder.name})",
            disable=disable_tqdm or self.rank != 0,
        ):
            idx = todo[start : start + self.batch_size]
            batch = [requests[i].args for i in idx]
            ctxs, conts = [c for c, _ in batch], [x for _, x in batch]
            res = (
                both(ctxs, conts)
                if both is not None
                else [(ll, False) for ll in self.decoder.loglikelihood(ctxs, conts)]
            )
            if len(res) != len(batch):
                raise ValueError(
                    f"decoder {self.decoder.name!r} returned {len(res)} log-likelihoods for {len(batch)} requests"
                )
            for i, args, (ll, greedy) in zip(idx, batch, res):
                out[i] = (float(ll), bool(greedy))
                self.cache_hook.add_partial("loglikelihood", args, out[i])
        for i, j in pad.items():
            out[i] = out[j]
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(
            "unie_dllm/unie_ar do not implement loglikelihood_rolling (perplexity tasks such as wikitext); "
            "use tasks with output_type generate_until or multiple_choice"
        )


_ENV_INFO: dict = {}


def _cached_env_info(storage: dict) -> None:
    """lm-eval's ``add_env_info`` (torch's ``collect_env``: subprocesses, ~0.3 s a call here) collected once per
    process: a sweep runs many evaluations in one process, whose environment does not change.  The results JSON
    gets the same keys and values."""
    from lm_eval.loggers.utils import add_env_info

    if not _ENV_INFO:
        add_env_info(_ENV_INFO)
    storage.update(_ENV_INFO)


SUPPORTED_OUTPUT_TYPES = ("generate_until", "multiple_choice", "loglikelihood")


def check_output_types(tasks: dict) -> None:
    """A ``ValueError`` naming the first of ``tasks`` (name -> lm-eval Task) whose ``output_type`` the adapter does
    not answer (:data:`SUPPORTED_OUTPUT_TYPES`)."""
    for name, task in tasks.items():
        kind = task.get_config("output_type") or getattr(task, "OUTPUT_TYPE", None)
        if kind not in SUPPORTED_OUTPUT_TYPES:
            raise ValueError(
                f"task {name!r} has output_type {kind!r}, which unie_dllm/unie_ar do not answer "
                f"(supported: {', '.join(SUPPORTED_OUTPUT_TYPES)}); remove it from the task list"
            )


def _checking_evaluate(real):
    """lm-eval's ``evaluator.evaluate`` preceded, for our adapter, by :func:`check_output_types` on the loaded
    tasks: on the command line (:func:`main`) an unsupported task is refused before any request is answered."""

    def evaluate(*args, **kwargs):
        lm, task_dict = kwargs.get("lm", args[0] if args else None), kwargs.get("task_dict")
        if isinstance(lm, UnieLM) and isinstance(task_dict, dict):
            check_output_types(task_dict.get("tasks", {}))
        return real(*args, **kwargs)

    return evaluate


def load_supported_tasks(task_manager, tasks) -> list:
    """``tasks`` (names of tasks, groups or tags) loaded once by lm-eval's ``task_manager``, as the Task/Group
    objects ``simple_evaluate`` accepts, after checking that every leaf task's ``output_type`` is one the adapter
    answers: a task of another type (``loglikelihood_rolling``: perplexity tasks such as wikitext) is a
    ``ValueError`` naming it, before any model is loaded or request answered (lm-eval itself would run every
    other task first and fail at the end, writing nothing)."""
    out = []
    for spec in tasks:
        loaded = task_manager.load(spec)
        check_output_types(loaded["tasks"])
        if isinstance(spec, str) and spec in loaded["groups"]:
            out.append(loaded["groups"][spec])
        elif isinstance(spec, str) and spec in loaded["tasks"]:
            out.append(loaded["tasks"][spec])
        else:  # a tag (or a path, a dict): its tasks
            out.extend(loaded["tasks"].values())
    return out


RERUN_DIR = "rerun"  # where a recorded command writes (ignored by git), never a row's folder (the workflow reads it)


def relative_path(path, cwd=None) -> str:
    """``path`` relative to ``cwd`` (default: the working directory) when it is absolute and lies under it, else
    as given: a recorded command names the clone's (or run directory's) files the way a user there types them."""
    path = str(path)
    if not os.path.isabs(path):
        return path
    base = os.path.abspath(cwd or os.getcwd())
    full = os.path.abspath(path)
    return os.path.relpath(full, base) if os.path.commonpath([full, base]) == base else path


def rerun_path(output_path, cwd=None) -> str:
    """Where a recorded command writes its lm-eval files: ``rerun/<output_path>`` for an output under ``cwd`` (a row's
    ``results/dllm/rows/llada_uni`` -> ``rerun/results/dllm/rows/llada_uni``), else ``<output_path>.rerun`` beside it.
    Never inside ``output_path``: the workflow reads the newest ``results_*.json`` under a row's folder."""
    rel = relative_path(output_path, cwd)
    if os.path.isabs(rel) or rel.split(os.sep)[0] == os.pardir:
        return str(output_path).rstrip("/") + ".rerun"
    return os.path.join(RERUN_DIR, rel)


def format_model_args(args: dict) -> str:
    """``args`` as lm-eval's ``--model_args``: ``key=value,...`` when lm-eval's command line parses that back to
    the same keys, values and types (``lm_eval._cli.utils.key_val_to_dict``, lm-eval 0.4.13), else JSON (which the
    command line reads first): a string that would read as a number, a value with a comma, ..."""

    def text(v):
        return v if isinstance(v, str) else repr(v) if isinstance(v, (list, tuple, dict)) else str(v)

    kv = ",".join(f"{k}={text(v)}" for k, v in args.items())
    try:
        from lm_eval._cli.utils import key_val_to_dict

        back = key_val_to_dict(kv)
    except (ImportError, ValueError):
        back = None
    if (
        back is not None
        and list(back) == list(args)
        and all(type(back[k]) is type(v) and back[k] == v for k, v in args.items())
    ):
        return kv
    return json.dumps(args, separators=(",", ":"))


def lmeval_command(
    model_args: dict,
    tasks: list[str],
    include_path=None,
    output_path=None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    limit=None,
    seed: int | None = 0,
    allow_code_execution: bool = False,
    device: str = "cpu",
    model: str = "unie_dllm",
    nproc: int = 1,
    cwd=None,
) -> str:
    """The shell command that runs lm-eval's own command line (``python -m unie.dllm.lmeval``, which registers the
    models) as :func:`evaluate` ran: the same model arguments (``seed`` among them: it seeds the decoder's noise),
    tasks, task folder, device, batch size, lm-eval seeds (``--seed S``: all four), ``--limit``, code execution
    (``HF_ALLOW_CODE_EVAL=1 ... --confirm_run_unsafe_code``) and, for ``nproc`` > 1 ranks, torchrun.  ``device`` is
    a command-line flag, never a model argument (lm-eval passes both to the adapter: a duplicate is a TypeError).
    Absolute paths under ``cwd`` become relative (:func:`relative_path`); the output goes to
    :func:`rerun_path`, with ``--log_samples``.  Returns one line (``shlex.join``; ``shlex.split`` gives the argv)."""
    import shlex

    if "device" in model_args:
        raise ValueError("device is a command-line flag (--device), not a model argument, in a recorded command")
    args = {k: relative_path(v, cwd) if isinstance(v, str) and os.path.isabs(v) else v for k, v in model_args.items()}
    env = ["HF_ALLOW_CODE_EVAL=1"] if allow_code_execution else []
    launch = (
        ["python", "-m", "unie.dllm.lmeval"]
        if nproc <= 1
        else ["torchrun", "--standalone", f"--nproc_per_node={nproc}", "-m", "unie.dllm.lmeval"]
    )
    argv = [
        *env,
        *launch,
        "--model",
        model,
        "--model_args",
        format_model_args(args),
        "--tasks",
        ",".join(str(t) for t in tasks),
    ]
    if include_path is not None:
        argv += ["--include_path", relative_path(include_path, cwd)]
    argv += ["--device", str(device), "--batch_size", str(batch_size)]
    if seed is not None:
        argv += ["--seed", str(seed)]
    if limit is not None:
        argv += ["--limit", str(limit)]
    if allow_code_execution:
        argv += ["--confirm_run_unsafe_code"]
    if output_path is not None:
        argv += ["--output_path", rerun_path(output_path, cwd), "--log_samples"]
    return shlex.join(argv)


def evaluate(
    model_args: dict,
    tasks: list[str],
    include_path,
    output_path,
    batch_size: int,
    include_defaults: bool = False,
    limit=None,
    seed: int = 0,
    allow_code_execution: bool = False,
    log=print,
) -> Path | None:
    """Run lm-eval once over ``tasks`` for the decoder ``model_args`` describes; lm-eval's own
    ``EvaluationTracker`` writes ``results_<time>.json`` and the per-task ``samples_*.jsonl`` (as
    ``--output_path ... --log_samples`` does) under ``output_path/<model name>/``; the generation
    throughput goes to ``output_path/throughput.json``.  Returns the path of lm-eval's results JSON.

    Under torchrun every rank calls this and answers its share of the documents (see the module docstring);
    rank 0 writes the files, with each task's samples in the order of a single process (filter, then document),
    and returns the path; the other ranks return None.

    ``seed`` seeds lm-eval (sampling of few-shot examples, ...) and, unless ``model_args`` has its own ``seed``,
    the decoder's per-request noise.

    The results JSON's ``config.unie_command`` is this run as one command line of lm-eval's own
    (:func:`lmeval_command`: ``python -m unie.dllm.lmeval ...``, paths relative to the working directory, the output
    under ``rerun/``); run from the same directory, it gives the same answers (docs/dllm.md).

    A task whose ``output_type`` the adapter does not answer (``loglikelihood_rolling``) is refused before the
    model loads (:func:`load_supported_tasks`; the tasks are loaded once, here, and handed to lm-eval).

    ``allow_code_execution`` (config ``dllm.tasks.allow_code_execution``) is lm-eval's
    ``--confirm_run_unsafe_code`` plus ``HF_ALLOW_CODE_EVAL=1``: tasks that run model-written code (``mbpp``,
    LiveCodeBench) are refused without it, before any generation."""
    import lm_eval
    import lm_eval.evaluator
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    if getattr(lm_eval.evaluator, "add_env_info", None) is not None:
        lm_eval.evaluator.add_env_info = _cached_env_info

    output_path = Path(output_path)
    tm = TaskManager(include_path=str(include_path), include_defaults=include_defaults)
    loaded = load_supported_tasks(tm, tasks)  # an unsupported task is refused before the model loads
    # lm-eval's seed reaches the decoder's noise unless model_args set one
    model_args = {**model_args, "seed": model_args.get("seed", seed)}
    lm = UnieLM(batch_size=batch_size, throughput_path=output_path / "throughput.json", **model_args)
    from .decoder import ARDecoder

    # this run as one command line (lm-eval's own), recorded in the results JSON's config.unie_command
    command = lmeval_command(
        lm.given_model_args,
        tasks,
        include_path,
        output_path,
        batch_size=lm.batch_size,
        limit=limit,
        seed=seed,
        allow_code_execution=allow_code_execution,
        device=lm.given_device,
        nproc=lm.world_size,
        model="unie_ar" if isinstance(lm.decoder, ARDecoder) else "unie_dllm",
    )
    if lm.rank == 0:  # one result set per run: an earlier run's timestamped files would sit beside the new ones
        stale = clear_lmeval_outputs(output_path)
        if stale:
            log(f"removed {len(stale)} files of an earlier lm-eval run under {output_path}")
    tracker = EvaluationTracker(output_path=str(output_path))
    if allow_code_execution:
        os.environ["HF_ALLOW_CODE_EVAL"] = "1"
    try:
        # batch_size and device are only recorded (config.batch_size, config.device) for a ready model: the
        # adapter's batch and the device its decoder runs on (cpu after a CUDA fallback), not what was asked for
        res = lm_eval.simple_evaluate(
            model=lm,
            tasks=loaded,
            task_manager=tm,
            log_samples=True,
            limit=limit,
            batch_size=lm.batch_size,
            device=str(lm.device),
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=seed,
            fewshot_random_seed=seed,
            evaluation_tracker=tracker,
            bootstrap_iters=1000,
            confirm_run_unsafe_code=allow_code_execution,
        )  # mean: analytic s.e.
    except ValueError as e:
        if "unsafe" in str(e) and not allow_code_execution:
            raise PermissionError(
                f"{e} -- these tasks execute model-written code; grant it with "
                "dllm.tasks.allow_code_execution: true in the config"
            ) from e
        raise
    if lm.rank != 0:
        return None
    samples = res.pop("samples")
    if lm.world_size > 1:  # gathered rank after rank: back to a single process's order
        for rows in samples.values():
            filters = list(dict.fromkeys(row["filter"] for row in rows))
            rows.sort(key=lambda row: (filters.index(row["filter"]), row["doc_id"]))
    res["config"]["unie_command"] = command
    log(f"lm-eval command: {command}")
    tracker.general_config_tracker.model_name = model_args.get("name", lm.decoder.name)
    tracker.general_config_tracker.model_name_sanitized = str(lm.decoder.name).replace("/", "__")
    tracker.save_results_aggregated(results=res, samples=samples)
    for task in res["configs"]:
        tracker.save_results_samples(task_name=task, samples=samples[task])
    found = sorted(output_path.rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise RuntimeError(f"lm-eval wrote no results JSON under {output_path}")
    log(f"lm-eval results: {found[-1]}")
    return found[-1]


RANK_FLAG = "--evaluate-json"  # python -m unie.dllm.lmeval --evaluate-json ARGS.json: one rank of run_evaluation


def tasks_all_in(include_path, names) -> bool:
    """Whether every task or group in ``names`` is defined by a YAML under ``include_path``, and so is every member
    of such a group (recursively).  lm-eval's command line always indexes its own thousands of task files as well
    (about 9 s of start-up on a CPU); for such tasks that index is not needed.  Anything else (a built-in task, a
    tag, a pattern, a path given as a task) answers False."""
    from lm_eval.tasks import TaskManager

    if not include_path or not names or not Path(include_path).is_dir():
        return False
    index = TaskManager(include_path=str(include_path), include_defaults=False).task_index

    def all_own(members, seen: frozenset) -> bool:
        return all(own(m, seen) for m in (members if isinstance(members, list) else [members]))

    def own(name, seen: frozenset) -> bool:
        if isinstance(name, dict):  # a member given with overrides: of the task or group it names, else inline
            group, task = name.get("group"), name.get("task")
            if group is None:
                return isinstance(task, str) and own(task, seen)
            if not isinstance(group, str) or not (task is None or all_own(task, seen)):
                return False
            return own(group, seen) if group in index else task is not None  # registered, or inline with members
        entry = index.get(name) if isinstance(name, str) else None
        if entry is None or name in seen:
            return False
        kind = entry.kind.name
        if kind == "TASK":
            return True
        return kind == "GROUP" and all_own(entry.cfg.get("task") or [], seen | {name})

    return all(own(n, frozenset()) for n in names)


def _cli_tasks(argv: list[str]) -> tuple[list[str], str | None] | None:
    """The ``--tasks`` and ``--include_path`` of an lm-eval command line (None with a ``--config`` file, which may
    name others)."""
    import argparse

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--tasks", "-t", nargs="+", action="append", default=[])  # lm-eval adds up repeated --tasks
    p.add_argument("--include_path", default=None)
    p.add_argument("--config", "-C", default=None)
    try:
        args, _ = p.parse_known_args(argv)
    except SystemExit:
        return None
    if args.config is not None:
        return None
    return [n for ts in args.tasks for t in ts for n in t.split(",") if n], args.include_path


def _index_no_defaults() -> None:
    """Every ``TaskManager`` of this process indexes ``include_path`` only (:func:`main`, when
    :func:`tasks_all_in`)."""
    import inspect

    from lm_eval.tasks import TaskManager

    init = TaskManager.__init__
    signature = inspect.signature(init)

    def without_defaults(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["include_defaults"] = False
        init(*bound.args, **bound.kwargs)

    TaskManager.__init__ = without_defaults


def run_evaluation(kwargs: dict, nproc: int = 1, log=print, threads: int = 1) -> Path:
    """:func:`evaluate` with ``kwargs`` (JSON-serialisable, without ``log``) in this process when ``nproc`` is 1,
    else data-parallel on ``nproc`` ranks of :func:`_rank_main` (:func:`unie.core.ranks.run_ranks`), each
    with ``threads // nproc`` threads; what the ranks print is copied to this process's stderr (a rule's log), and a failed rank raises
    :class:`RuntimeError` here.  Returns the results JSON (rank 0's)."""
    if nproc <= 1:
        return evaluate(**kwargs, log=log)
    if kwargs.get("limit") is not None and kwargs["limit"] < nproc:
        raise ValueError(
            f"limit={kwargs['limit']} documents per task is fewer than the {nproc} ranks: a rank without "
            "requests would leave lm-eval's collectives unmatched; lower the GPU count or raise the limit"
        )
    with tempfile.TemporaryDirectory(prefix="unie-lmeval-") as tmp:
        result_file = Path(tmp, "result")
        run_ranks(
            nproc,
            ("unie.dllm.lmeval", RANK_FLAG),
            {"kwargs": kwargs, "result_file": str(result_file)},
            tmp,
            log,
            threads,
            "lm-eval data-parallel",
        )
        found = Path(result_file.read_text())
    log(f"lm-eval results: {found}")
    return found


def _rank_main(args_file) -> None:
    """One rank of :func:`run_evaluation`: :func:`evaluate` (whose adapter joins the process group), rank 0
    reporting where the results are."""
    import torch

    args = json.loads(Path(args_file).read_text())
    torch.set_num_threads(int(args["threads"]))
    with reporting_rank_errors(args_file):
        found = evaluate(**args["kwargs"])
    if found is not None:
        Path(args["result_file"]).write_text(str(found))


def main() -> None:
    """``python -m unie.dllm.lmeval ...``: lm-eval's own command line, offline, with our models registered
    (``python -m unie.dllm.lmeval --evaluate-json ARGS.json``: one rank of :func:`run_evaluation`)."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if sys.argv[1:2] == [RANK_FLAG]:
        if len(sys.argv) != 3:
            raise SystemExit(f"usage: python -m unie.dllm.lmeval {RANK_FLAG} ARGS.json")
        _rank_main(sys.argv[2])
        return
    import lm_eval.evaluator
    from lm_eval.__main__ import cli_evaluate

    # this process only: refuse unsupported tasks (loglikelihood_rolling) before the adapter answers anything
    lm_eval.evaluator.evaluate = _checking_evaluate(lm_eval.evaluator.evaluate)
    asked = _cli_tasks(sys.argv[1:])
    if asked is not None and tasks_all_in(asked[1], asked[0]):  # the same tasks, without indexing lm-eval's own
        _index_no_defaults()
        print(
            "unie: every task asked for is defined under --include_path: lm-eval's built-in tasks not indexed",
            file=sys.stderr,
        )
    cli_evaluate()


if __name__ == "__main__":
    # run as a script this module is ``__main__``; alias it so a later ``import unie.dllm.lmeval`` finds the
    # same class instead of registering a second one under the same names (a registry collision)
    sys.modules.setdefault("unie.dllm.lmeval", sys.modules[__name__])
    main()
