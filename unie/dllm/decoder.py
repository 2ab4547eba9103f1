"""The decoders lm-eval drives (:mod:`unie.dllm.lmeval`): what a ``--model_args`` dict means and what it builds.

* :class:`ModelArgs`: lm-eval's ``model_args`` parsed into one frozen dataclass, the single home of each default
  (an unknown key is an error with a did-you-mean);
* :func:`build_decoder`: a :class:`DLLMDecoder` (a DLLM backbone and a registered DLLM sampler,
  :data:`~unie.core.registry.DLLM_SAMPLERS`) or an :class:`ARDecoder` from them;
* :func:`load_trained`: one of our checkpoints (a directory written by
  :func:`unie.pipeline.dllm_runs.train_dllm_model`) as a backbone or proxy.

The AR proxy has one name from a Table 3 row to the model that scores: ``proxy`` (the row key, the model_args
key, :attr:`ModelArgs.proxy`, the decoder's and every sampler's ``proxy`` argument, a
:class:`~unie.dllm.bridge.ProxyBridge` whose AR network is ``proxy.model``).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.options import ConfigError, from_dict
from ..core.precision import PRECISIONS, autocast, widen
from ..core.registry import DLLM_SAMPLERS, METHODS
from ..data.dllm_format import dllm_prompt_rows
from ..data.tokenizer import load_tokenizer
from ..models.checkpoint import CheckpointError, load_model, read_meta
from .backbone import (  # noqa: F401
    DEFAULT_MAX_GEN_TOKS,
    MC_NUM,
    DecodeOptions,
    greedy_matches,
    mc_loglikelihood,
    model_device,
    with_horizon,
)
from .bridge import ProxyBridge
from .energy_decoding import WINDOW_COUNTERS
from .rows import LOADING_KEYS, default_sampler  # noqa: F401  (torch-free there: a profile resolves without this module)

HF_GEN_LENGTH = 256  # gen_length of a Hugging Face checkpoint when model_args give none (ours: the trained one)

# loading keys a kind never reads (an error, not silently ignored): style, mask_token and attn_implementation are
# read for a kind=hf_dllm checkpoint, trust_remote_code for both Hugging Face kinds
NOT_READ_BY_KIND = {
    "unie": {"style", "mask_token", "attn_implementation", "trust_remote_code"},
    "hf_ar": {"style", "mask_token", "attn_implementation"},
}
KINDS = ("unie", "hf_dllm", "hf_ar")


def unread_keys(args: Mapping) -> list[str]:
    """The keys of ``args`` (a row or lm-eval's model_args) that its ``kind`` never reads (:data:`NOT_READ_BY_KIND`)."""
    return sorted(set(args) & NOT_READ_BY_KIND.get(args.get("kind", "unie"), set()))


def check_proxy(sampler: str, given: bool) -> None:
    """A DLLM sampler gets an AR proxy exactly when it reads one (its registry entry's ``needs_proxy``), else a
    :class:`ConfigError` naming it: the one check, for lm-eval's model_args (:class:`ModelArgs`, before any model is
    loaded), a decoder built from objects (:class:`DLLMDecoder`) and a config row
    (:func:`unie.config.checks.check_dllm`, before any job)."""
    needs = DLLM_SAMPLERS[sampler].needs_proxy
    if needs and not given:
        raise ConfigError(f"DLLM sampler {sampler!r} needs a proxy (proxy=<AR proxy>)")
    if given and not needs:
        raise ConfigError(f"DLLM sampler {sampler!r} takes no proxy")


def sampler_option_keys() -> set[str]:
    """Every registered DLLM sampler's option names."""
    return {k for entry in DLLM_SAMPLERS.values() for k in entry.option_names()}


MC_BATCH = 32  # copies of a continuation per Monte-Carlo pass of loglikelihood (LLaDA's eval: --batch_size)


def check_mc_num(mc_num) -> int:
    """``mc_num`` if :meth:`DLLMDecoder.loglikelihood` draws exactly that many Monte-Carlo copies: at most
    :data:`MC_BATCH` (one pass of ``mc_num`` copies) or a multiple of it (``mc_num / MC_BATCH`` passes); any
    other value a :class:`ConfigError` (LLaDA's ``eval_llada.py`` asserts ``mc_num % batch_size == 0`` too)."""
    n = int(mc_num)
    if n < 1 or (n > MC_BATCH and n % MC_BATCH):
        near = f" (e.g. {n - n % MC_BATCH} or {n - n % MC_BATCH + MC_BATCH})" if n > MC_BATCH else ""
        raise ConfigError(
            f"model_args mc_num={mc_num}: the Monte-Carlo ELBO draws its copies {MC_BATCH} per pass, "
            f"so mc_num must be 1..{MC_BATCH} or a multiple of {MC_BATCH}{near}"
        )
    return n


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def weights_record(path) -> dict | None:
    """The identity of the weights a model directory holds, for a row's results: ``{"path", "files": {name:
    sha256}, "sha256"}``: the SHA-256 of every weight file directly in ``path`` (``*.safetensors``, ``*.bin``,
    ``*.pt``, ``*.pth``: our ``model.safetensors``, a Hugging Face folder's shards) and one digest over them (the
    SHA-256 of their sorted ``name sha256`` lines).  None when ``path`` is not a local directory (a hub name)."""
    from ..core.integrity import file_sha256

    p = Path(str(path))
    if not p.is_dir():
        return None
    files = {f.name: file_sha256(f) for f in sorted(p.iterdir()) if f.is_file() and f.suffix in WEIGHT_SUFFIXES}
    lines = "".join(f"{name} {digest}\n" for name, digest in files.items())
    return {"path": str(p), "files": files, "sha256": hashlib.sha256(lines.encode()).hexdigest()}


def hf_dtype(precision: str) -> str:
    """The dtype a Hugging Face model's weights are loaded in: ``bfloat16`` under ``bf16`` (LLaDA's and Dream's
    evaluations load them so; float32 weights would double the memory and the time of an 8B model), else
    ``float32``."""
    return "bfloat16" if precision == "bf16" else "float32"


@dataclass(frozen=True)
class ModelArgs:
    """lm-eval's ``--model_args`` of a unie decoder (:meth:`parse` builds it from the dict).

    ``pretrained``: a model directory (``kind=unie``, our checkpoints) or a Hugging Face name or directory
    (``kind=hf_dllm`` with ``style`` llada|dream, ``trust_remote_code``, ``mask_token``, ``attn_implementation``;
    ``kind=hf_ar``).  ``sampler``: a registered DLLM sampler (default: :func:`default_sampler`), ``options`` its
    options as given (their defaults: the sampler's options class).  ``decoding``: the
    :class:`~unie.dllm.backbone.DecodeOptions` keys as given (their defaults: that class; ``gen_length``'s: the
    checkpoint's, :data:`HF_GEN_LENGTH` for a Hugging Face one).  ``proxy``: the AR proxy (a model directory or
    a Hugging Face name, with ``proxy_trust_remote_code``) of a sampler that reads one.  ``name``: the
    decoder's name (default: ``pretrained``'s last path component).  ``prompt_len``: the prompt positions
    (default: the checkpoint's; a Hugging Face model has none: prompts are batched by length, unpadded).
    ``seed`` seeds every request's generators (:func:`request_generator`), ``mc_num`` is the Monte-Carlo sample
    count of ``loglikelihood`` (LLaDA's default, 128; honoured exactly: up to :data:`MC_BATCH` or a multiple
    of it, anything else refused, :func:`check_mc_num`).  ``precision`` (``fp32`` | ``tf32`` | ``bf16``,
    :mod:`unie.core.precision`): the network passes of ``generate`` and ``loglikelihood`` (the model's and the
    proxy's) run under that autocast; a Hugging Face model or proxy is loaded in bfloat16 weights under ``bf16``
    (as LLaDA's and Dream's own evaluations load them), our own checkpoints keep float32 weights."""

    pretrained: str
    kind: str = "unie"
    sampler: str | None = None
    options: dict = field(default_factory=dict)
    decoding: dict = field(default_factory=dict)
    proxy: str | None = None
    proxy_trust_remote_code: bool = False
    device: str = "cpu"
    seed: int = 0
    mc_num: int = MC_NUM
    name: str | None = None
    prompt_len: int | None = None
    style: str = "llada"
    trust_remote_code: bool = False
    mask_token: str | None = None
    attn_implementation: str | None = None
    precision: str = "fp32"

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ConfigError(f"model_args precision={self.precision!r}; known: {', '.join(PRECISIONS)}")
        check_mc_num(self.mc_num)
        if self.sampler is None:
            object.__setattr__(self, "sampler", default_sampler(self.options))
        check_proxy(self.sampler, self.proxy is not None)
        if self.name is None:
            object.__setattr__(self, "name", Path(str(self.pretrained)).name)

    @staticmethod
    def keys() -> set[str]:
        """The model_args keys: this class's fields (``options`` and ``decoding`` spread out), the
        :class:`~unie.dllm.backbone.DecodeOptions` fields and every registered DLLM sampler's options."""
        own = {f.name for f in dataclasses.fields(ModelArgs)} - {"options", "decoding"}
        return own | {f.name for f in dataclasses.fields(DecodeOptions)} | sampler_option_keys()

    @classmethod
    def parse(cls, args: Mapping) -> ModelArgs:
        """The model_args dict ``args`` checked and parsed: an unknown key (with a did-you-mean), an option of
        another sampler, a missing ``pretrained`` or a loading key its ``kind`` never reads is a
        :class:`ConfigError`."""
        args = dict(args)
        known = cls.keys()
        unknown = sorted(set(args) - known)
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            hint = f". Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown model_args {unknown}; known: {sorted(known)}{hint}")
        sampler = default_sampler(args)
        if sampler not in DLLM_SAMPLERS:
            raise ConfigError(DLLM_SAMPLERS.unknown_message(sampler))
        entry = DLLM_SAMPLERS[sampler]
        foreign = sorted((set(args) & sampler_option_keys()) - set(entry.option_names()))
        if foreign:
            raise ConfigError(
                f"model_args {foreign} are not options of DLLM sampler {sampler!r} "
                f"(its options: {sorted(entry.option_names())})"
            )
        if "pretrained" not in args:
            raise ConfigError("model_args needs pretrained=<model directory>")
        ignored = unread_keys(args)
        if ignored:
            raise ConfigError(
                f"model_args {ignored} do not apply to kind={args.get('kind', 'unie')!r}: nothing would read them"
            )
        own = {f.name for f in dataclasses.fields(cls)} - {"options", "decoding", "sampler"}
        given = {k: args[k] for k in own if k in args}
        for key, convert in (
            ("seed", int),
            ("mc_num", int),
            ("name", str),
            ("trust_remote_code", bool),
            ("proxy_trust_remote_code", bool),
        ):
            if key in given:
                given[key] = convert(given[key])
        dec = {f.name for f in dataclasses.fields(DecodeOptions)}
        return cls(
            sampler=sampler,
            options={k: args[k] for k in entry.option_names() if k in args},
            decoding={k: args[k] for k in dec if k in args},
            **given,
        )


# ---------------------------------------------------------------------- the decoders
def load_trained(model_dir, device: str = "cpu"):
    """``(wrapped model, tokenizer, layout)`` of a directory written by
    :func:`~unie.pipeline.dllm_runs.train_dllm_model`."""
    read_meta(model_dir)  # a missing checkpoint is named before its tokenizer is looked for
    tok = load_tokenizer(Path(model_dir) / "tokenizer")
    net, meta = load_model(model_dir, device, tokenizer_info=tok.info())
    cls = METHODS[meta["method"]]
    method = cls(
        tok.info(),
        from_dict(cls.Options, meta.get("extra", {}).get("options", {}) or {}, f"checkpoint {model_dir} options"),
    )
    wrapped = method.wrap(net)
    wrapped.tokenizer = tok
    layout = meta.get("extra", {}).get("layout")
    if layout is None:
        raise CheckpointError(f"{model_dir}: not a DLLM-half checkpoint (no layout in its config.json)")
    return wrapped, tok, layout


def completion_text(tok, ids: list[int]) -> str:
    """The generated text up to the first ``<eos>`` (masks never remain after decoding)."""
    ids = list(ids)
    if tok.eos_id in ids:
        ids = ids[: ids.index(tok.eos_id)]
    return tok.decode(ids).strip()


def produced_tokens(ids: list[int], eos_id: int) -> int:
    """The tokens a row produced: up to and including its first ``<eos>`` (all of them when it has none)."""
    ids = list(ids)
    return ids.index(eos_id) + 1 if eos_id in ids else len(ids)


def request_seed(seed: int, *parts) -> int:
    """A 63-bit seed from ``seed`` and a request's identity ``parts`` (strings, ints): sha256, so the same request
    gets the same noise in any batch, task mix, order, process or rank (Python's ``hash`` of a str is salted)."""
    digest = hashlib.sha256(json.dumps([int(seed), *parts], ensure_ascii=False).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def request_generator(seed: int, *parts) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with :func:`request_seed` (the samplers move CPU draws to the model)."""
    return torch.Generator().manual_seed(request_seed(seed, *parts))


def occurrence_keys(prompts: list[str]) -> list[str]:
    """Each prompt's occurrence index among the identical prompts before it (``"0"``, ``"1"``, ...): the default
    per-row key of :meth:`DLLMDecoder.generate`, so repeated prompts (lm-eval's ``repeats``) get distinct noise."""
    seen: dict[str, int] = {}
    out = []
    for p in prompts:
        out.append(str(seen.get(p, 0)))
        seen[p] = seen.get(p, 0) + 1
    return out


def check_positions(model, name: str, prompt_positions: int, gen_length: int) -> None:
    """A :class:`ConfigError` before any generation when the longest prompt plus ``gen_length`` exceeds the positions
    the model covers (a Hugging Face model's ``max_position_embeddings``: beyond it, a raw indexing error mid-run)."""
    limit = getattr(model, "max_positions", None)
    if limit is not None and prompt_positions + gen_length > limit:
        raise ConfigError(
            f"{name}: the longest prompt ({prompt_positions} positions) + gen_length {gen_length} = "
            f"{prompt_positions + gen_length} exceeds the {limit} positions the model covers "
            f"(max_position_embeddings of {getattr(model, 'path', name)}); lower gen_length in "
            "model_args (dllm.decoding) or shorten the prompts"
        )


def encode_pair(tok, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """A log-likelihood request's ``(context ids, continuation ids)`` as lm-eval's HFLM and LLaDA's
    ``eval_llada.py`` (``_encode_pair``) cut them: the context's trailing whitespace moves to the continuation, the
    context and continuation are encoded *together*, and the continuation is what follows the context's own
    encoding, so a token that spans the boundary is not split in two.  The toy world's word tokenizer (``kind``
    ``word``) encodes the two apart: its words never span a boundary, and a continuation without a leading space
    (``"the"`` + ``"boat"``) means the next word there, not the glued ``"theboat"`` it cannot read."""
    if getattr(tok, "kind", None) == "word":
        return tok.encode(context), tok.encode(continuation)
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole, ctx = tok.encode(context + continuation), tok.encode(context)
    return ctx, whole[len(ctx) :]


class DLLMDecoder:
    """A :class:`~unie.core.protocols.TextDecoder` over a DLLM backbone and a registered DLLM sampler
    (:data:`~unie.core.registry.DLLM_SAMPLERS`: ``plain``, the backbone's own decoder; ``energy``, Algorithm 3;
    the baselines).  Without ``sampler`` it is ``energy`` when ``options`` are given, else ``plain``.

    **Batch invariance.**  A request's answer does not depend on the other requests of its call:

    * layout: with a fixed ``prompt_len`` every prompt is left-padded to it; otherwise (``pad_to_batch``, a Hugging
      Face model) the prompts of a call are split into groups of equal length (:meth:`batch_key`), each decoded
      without padding, so no row ever sees padding that depends on its neighbours (the Hugging Face DLLMs get no
      attention mask: LLaDA's and Dream's forwards are called on unpadded rows, as their own ``generate`` does);
    * noise: every row gets its own generator, seeded from ``seed``, the prompt and a per-row key
      (:func:`request_generator`; the adapter passes the request's ``gen_kwargs`` and its occurrence, repeated
      prompts included); the samplers that draw noise (``energy``, ``apd``) take these per-row generators;
    * the Monte-Carlo ELBO of :meth:`loglikelihood` draws from a generator seeded from ``seed``, the context and
      the continuation (:func:`request_generator`), apart from generation.

    What then remains batch-dependent is the floating-point result of a batched forward pass (a BLAS kernel may
    block a matrix product differently for another number of rows); ``tests/test_lmeval_determinism.py`` measures
    that it does not change a greedy decode or a log-likelihood on the CPU at batch sizes 1, 8 and 64."""

    def __init__(
        self,
        backbone,
        tokenizer,
        prompt_len: int | None,
        decode_options: DecodeOptions,
        options=None,
        proxy: ProxyBridge | None = None,
        seed: int = 0,
        mc_num: int = MC_NUM,
        name: str = "dllm",
        pad_to_batch: bool = False,
        sampler: str | None = None,
        precision: str = "fp32",
    ):
        """``prompt_len``: the prompt positions the model was trained with (longer prompts are refused); prompts
        are left-padded to it, or only to their own length when ``pad_to_batch`` (a model trained on
        length-bucketed batches, which never saw more padding than its bucket needed) or when it is None.
        ``options``: the sampler's options object (or mapping); ``proxy``: the AR proxy, for a sampler that needs
        one; ``sampler``: a registered DLLM sampler (default: :func:`default_sampler` of ``options``); ``seed``: of
        every request's generators; ``precision``: of every network pass (:func:`~unie.core.precision.autocast`)."""
        sampler = sampler or default_sampler(options)
        check_proxy(sampler, proxy is not None)
        self.sampler_name = sampler
        self.sampler = DLLM_SAMPLERS[sampler]
        self.backbone, self.tok, self.prompt_len, self.pad_to_batch = backbone, tokenizer, prompt_len, pad_to_batch
        self.decode_options, self.proxy = decode_options, proxy
        self.options = self.sampler.options(options)
        self.seed = int(seed)
        self.mc_num, self.name, self.precision = mc_num, name, precision

    @property
    def gen_length(self) -> int:
        return self.decode_options.gen_length

    def _positions(self, n_ids: int) -> int:
        """Prompt positions of a prompt of ``n_ids`` tokens (``<bos>`` included) in the decoding layout."""
        if self.prompt_len is not None and not self.pad_to_batch:
            return self.prompt_len
        return n_ids + 1

    def batch_key(self, prompt: str) -> int:
        """Prompts with the same key are decoded in one batch (the adapter sorts and batches by it): the prompt
        positions when they vary with the prompt (``pad_to_batch`` or no ``prompt_len``), else 0."""
        if self.prompt_len is not None and not self.pad_to_batch:
            return 0
        return self._positions(len(self.tok.encode(prompt)))

    def check(self, prompts: list[str]) -> None:
        """Errors before any generation: prompts that do not fit (the trained prompt length, or a Hugging Face
        model's position limit for prompt + ``gen_length``), text the proxy cannot read."""
        lengths = [len(ids) + 1 for ids in self.tok.encode_batch(prompts)]
        if self.prompt_len is not None and max(lengths) > self.prompt_len:
            raise ValueError(
                f"a prompt needs {max(lengths)} positions; the model was trained with prompt_len {self.prompt_len}"
            )
        check_positions(self.backbone, self.name, max(self._positions(n - 1) for n in lengths), self.gen_length)
        if self.proxy is not None:
            self.proxy.check(prompts)

    def generate(
        self, prompts: list[str], max_new_tokens: int, keys: list[str] | None = None
    ) -> tuple[list[str], dict]:
        """Completions of ``prompts`` (``max_new_tokens`` of the ``gen_length`` decoded positions kept) and the
        counters ``nfe`` (network passes, summed over the length groups), ``generated_tokens`` (tokens produced:
        per row up to and including its first ``<eos>``), ``row_tokens`` (that count per row),
        ``proxy_forwards`` and, for a sampler that reports them, :data:`WINDOW_COUNTERS`.  ``keys``: one string per prompt that, with the seed and the prompt, seeds the row's
        generator (default: :func:`occurrence_keys`)."""
        G = self.gen_length
        keys = occurrence_keys(prompts) if keys is None else list(keys)
        if len(keys) != len(prompts):
            raise ValueError(f"{len(keys)} keys for {len(prompts)} prompts")
        groups: dict[int, list[int]] = {}
        for i, ids in enumerate(self.tok.encode_batch(prompts)):
            groups.setdefault(self._positions(len(ids)), []).append(i)
        check_positions(self.backbone, self.name, max(groups), G)
        texts: list[str | None] = [None] * len(prompts)
        row_tokens = [0] * len(prompts)
        counters = {"nfe": 0, "proxy_forwards": 0}
        device = model_device(self.backbone)  # an HF backbone's GPU too: its logits never travel to the host
        for P, idx in groups.items():
            x = dllm_prompt_rows(self.tok, [prompts[i] for i in idx], P, G).to(device)
            gens = [request_generator(self.seed, "generate", prompts[i], keys[i]) for i in idx]
            with autocast(model_device(self.backbone), self.precision):
                out, stats = self.sampler.fn(
                    with_horizon(self.backbone, self.decode_options),
                    x,
                    self.decode_options,
                    self.options,
                    proxy=self.proxy,
                    generator=gens,
                )
            counters["nfe"] += int(stats["nfe"])
            counters["proxy_forwards"] += int(stats.get("proxy_forwards", 0))
            for k in WINDOW_COUNTERS:  # Algorithm 3's: what the energy had to act on (unie.dllm.energy_decoding)
                if k in stats:
                    counters[k] = counters.get(k, 0) + int(stats[k])
            for i, g in zip(idx, out[:, P : P + min(G, max_new_tokens)].tolist()):
                texts[i] = completion_text(self.tok, g)
                row_tokens[i] = produced_tokens(g, self.tok.eos_id)
        return texts, {**counters, "generated_tokens": sum(row_tokens), "row_tokens": row_tokens}

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` (a completion cut at a stop string: what the adapter counts as produced)."""
        return len(self.tok.encode(text))

    def loglikelihood_greedy(self, contexts: list[str], continuations: list[str]) -> list[tuple[float, bool]]:
        """``(log p(continuation | context), is_greedy)`` per pair, the two encoded together (:func:`encode_pair`):
        LLaDA's Monte-Carlo ELBO (:func:`~unie.dllm.backbone.mc_loglikelihood`, ``mc_num`` copies, its noise from
        :func:`request_generator` of the pair), and whether the continuation is what the backbone decodes greedily
        from the context with one token per step, highest confidence first (LLaDA's ``is_check_greedy`` rule:
        :func:`~unie.dllm.backbone.greedy_matches`)."""
        out = []
        device = model_device(self.backbone)
        for c, t in zip(contexts, continuations):
            ctx, target = encode_pair(self.tok, c, t)
            prefix = [self.tok.bos_id] + ctx
            gen = request_generator(self.seed, "loglikelihood", c, t)
            with autocast(device, self.precision):
                ll = mc_loglikelihood(
                    self.backbone,
                    prefix,
                    target,
                    mc_num=self.mc_num,
                    batch_size=min(self.mc_num, MC_BATCH),
                    generator=gen,
                )
                greedy = greedy_matches(self.backbone, prefix, target, self.decode_options.confidence)
            out.append((ll, greedy))
        return out

    def loglikelihood(self, contexts: list[str], continuations: list[str]) -> list[float]:
        out = []
        device = model_device(self.backbone)
        for c, t in zip(contexts, continuations):
            ctx, target = encode_pair(self.tok, c, t)
            gen = request_generator(self.seed, "loglikelihood", c, t)
            with autocast(device, self.precision):
                out.append(
                    mc_loglikelihood(
                        self.backbone,
                        [self.tok.bos_id] + ctx,
                        target,
                        mc_num=self.mc_num,
                        batch_size=min(self.mc_num, MC_BATCH),
                        generator=gen,
                    )
                )
        return out

    def info(self) -> dict:
        """What made this decoder's answers (the results' ``config``, :meth:`unie.dllm.lmeval.UnieLM.get_model_info`)."""
        return {
            "decoder": self.name,
            "type": "dllm",
            "sampler": self.sampler_name,
            "options": dataclasses.asdict(self.options)
            if dataclasses.is_dataclass(self.options)
            else repr(self.options),
            "decoding": dataclasses.asdict(self.decode_options),
            "prompt_len": self.prompt_len,
            "pad_to_batch": self.pad_to_batch,
            "seed": self.seed,
            "mc_num": self.mc_num,
            "precision": self.precision,
            "device": str(model_device(self.backbone)),
            "checkpoint": str(getattr(self.backbone, "path", None) or getattr(self.tok, "path", None) or ""),
            "proxy": str(getattr(getattr(self.proxy, "model", None), "path", None) or "") or None,
            **getattr(self, "provenance", {}),
        }


class ARDecoder:
    """A :class:`~unie.core.protocols.TextDecoder` over an AR model (greedy, ``gen_length`` tokens).  A prompt's
    completion and log-likelihood never depend on the other prompts of a call (prompts of the same length are
    decoded together without padding; one forward pass per log-likelihood)."""

    def __init__(self, model, tokenizer, gen_length: int, name: str = "ar", precision: str = "fp32"):
        self.model, self.tok, self.gen_length, self.name = model, tokenizer, gen_length, name
        self.precision, self.device = precision, model_device(model)

    def batch_key(self, prompt: str) -> int:
        return len(self.tok.encode(prompt))

    def check(self, prompts: list[str]) -> None:
        lengths = [len(ids) for ids in self.tok.encode_batch(prompts)]
        check_positions(self.model, self.name, max(lengths), self.gen_length)

    def generate(self, prompts: list[str], max_new_tokens: int, keys=None) -> tuple[list[str], dict]:
        G = min(self.gen_length, max_new_tokens)
        ids = self.tok.encode_batch(prompts)
        check_positions(self.model, self.name, max(len(p) for p in ids), self.gen_length)
        with autocast(self.device, self.precision):
            gen = self.model.greedy_continue(ids, G).tolist()
        rows = [produced_tokens(g, self.tok.eos_id) for g in gen]
        # forwards: one per token until every row has written <eos> (greedy_continue stops there)
        return [completion_text(self.tok, g) for g in gen], {
            "nfe": max(rows, default=0),
            "generated_tokens": sum(rows),
            "row_tokens": rows,
        }

    def count_tokens(self, text: str) -> int:
        return len(self.tok.encode(text))

    @torch.no_grad()
    def loglikelihood_greedy(self, contexts: list[str], continuations: list[str]) -> list[tuple[float, bool]]:
        """``(log p(continuation | context), is_greedy)`` per pair; ``is_greedy``: every continuation token is the
        argmax of its conditional (lm-eval's HFLM rule)."""
        out = []
        for c, t in zip(contexts, continuations):
            ctx, tgt = encode_pair(self.tok, c, t)
            x = torch.tensor([[self.tok.bos_id] + ctx + tgt])
            with autocast(self.device, self.precision):
                logits = self.model.logits(x)
            logp = widen(logits).log_softmax(-1)[0, :-1]
            lp = logp.gather(-1, x[0, 1:, None].to(logp.device)).squeeze(-1)
            greedy = bool((logp[len(ctx) :].argmax(-1).cpu() == x[0, 1 + len(ctx) :]).all())
            out.append((float(lp[len(ctx) :].double().sum()), greedy))
        return out

    def loglikelihood(self, contexts: list[str], continuations: list[str]) -> list[float]:
        return [ll for ll, _ in self.loglikelihood_greedy(contexts, continuations)]

    def info(self) -> dict:
        return {
            "decoder": self.name,
            "type": "ar",
            "sampler": "greedy",
            "gen_length": self.gen_length,
            "precision": self.precision,
            "device": str(self.device),
            "checkpoint": str(getattr(self.model, "path", None) or getattr(self.tok, "path", None) or ""),
            **getattr(self, "provenance", {}),
        }


# ---------------------------------------------------------------------- model_args -> decoder
def load_backbone(a: ModelArgs):
    """``(model, tokenizer, prompt_len, pad_to_batch, default gen_length, is_ar)`` of ``a.pretrained``."""
    if a.kind == "unie":
        model, tok, layout = load_trained(a.pretrained, a.device)
        prompt_len = layout["prompt_len"] if a.prompt_len is None else a.prompt_len
        return (
            model,
            tok,
            prompt_len,
            bool(layout.get("pad_to_batch", False)),
            layout["gen_length"],
            layout["kind"] == "ar",
        )
    if a.kind in ("hf_dllm", "hf_ar"):
        from ..models.hf import load_hf_causal, load_hf_dllm

        if a.kind == "hf_ar":
            model = load_hf_causal(
                a.pretrained, trust_remote_code=a.trust_remote_code, device=a.device, dtype=hf_dtype(a.precision)
            )
        else:
            model = load_hf_dllm(
                a.pretrained,
                style=a.style,
                trust_remote_code=a.trust_remote_code,
                mask_token=a.mask_token,
                device=a.device,
                attn_implementation=a.attn_implementation,
                dtype=hf_dtype(a.precision),
            )
        return model, model.tokenizer, a.prompt_len, False, HF_GEN_LENGTH, a.kind == "hf_ar"
    raise ConfigError(f"unknown decoder kind {a.kind!r}; known: {', '.join(KINDS)}")


def load_proxy(a: ModelArgs, tokenizer) -> ProxyBridge:
    """The AR proxy ``a.proxy`` (one of our AR checkpoints, an oracle checkpoint of the toy tasks
    (:mod:`unie.dllm.oracle`), else a Hugging Face causal LM) read through the DLLM's ``tokenizer``."""
    from .oracle import ORACLE_FILE, OracleLM

    if Path(str(a.proxy), ORACLE_FILE).exists():
        model = OracleLM.load(a.proxy)
    elif Path(str(a.proxy), "tokenizer").exists():
        model, _, layout = load_trained(a.proxy, a.device)
        if layout["kind"] != "ar":
            raise ConfigError(f"proxy {a.proxy} is not an autoregressive model")
    else:
        from ..models.hf import load_hf_causal

        model = load_hf_causal(
            a.proxy, trust_remote_code=a.proxy_trust_remote_code, device=a.device, dtype=hf_dtype(a.precision)
        )
    if not hasattr(model, "logits") or not hasattr(model, "bos_id"):
        raise ConfigError(f"proxy {a.proxy} is not an autoregressive model")
    return ProxyBridge(model, tokenizer)


def build_decoder(args: Mapping | ModelArgs):
    """A decoder from lm-eval's ``--model_args`` (a dict, parsed by :meth:`ModelArgs.parse`, or a
    :class:`ModelArgs`): an :class:`ARDecoder` for an AR model, else a :class:`DLLMDecoder` with the sampler, its
    options and, for a sampler that reads one, the proxy.  An unknown key, an option of another sampler, a
    missing checkpoint or an unbridgeable proxy is an error before any generation."""
    a = args if isinstance(args, ModelArgs) else ModelArgs.parse(args)
    model, tok, prompt_len, pad_to_batch, default_gen, is_ar = load_backbone(a)
    gen_length = int(a.decoding.get("gen_length", default_gen))
    decoder = _build(a, model, tok, prompt_len, pad_to_batch, gen_length, is_ar)
    decoder.model_args = {k: v for k, v in dataclasses.asdict(a).items()}  # what made it (the results' config)
    # what its answers came from, in its info() (the results' config.unie_decoder): the model and the proxy as
    # given, the SHA-256 of their weight files
    decoder.provenance = {
        "checkpoint": str(a.pretrained),
        "proxy": None if a.proxy is None else str(a.proxy),
        "weights": {
            "model": weights_record(a.pretrained),
            **({"proxy": weights_record(a.proxy)} if a.proxy is not None else {}),
        },
    }
    return decoder


def _build(a: ModelArgs, model, tok, prompt_len, pad_to_batch, gen_length, is_ar):
    if is_ar:
        if a.proxy is not None or a.sampler != "plain" or a.options:
            raise ConfigError("an AR model decodes left to right: sampler/proxy options apply to DLLMs only")
        return ARDecoder(model, tok, gen_length, name=a.name, precision=a.precision)
    entry = DLLM_SAMPLERS[a.sampler]
    d_opts = from_dict(DecodeOptions, {**a.decoding, "gen_length": gen_length}, "decoding options")
    s_opts = from_dict(entry.options_cls, a.options, f"DLLM sampler {a.sampler!r} options")
    common = dict(
        seed=a.seed, mc_num=a.mc_num, name=a.name, pad_to_batch=pad_to_batch, sampler=a.sampler, precision=a.precision
    )
    proxy = None if a.proxy is None else load_proxy(a, tok)  # a.proxy is given iff the sampler reads one (ModelArgs)
    if entry.preflight is not None:
        try:
            entry.preflight(model, s_opts, proxy)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"DLLM sampler {a.sampler!r} cannot decode {a.pretrained}: {e}") from e
    return DLLMDecoder(model, tok, prompt_len, d_opts, s_opts, proxy, **common)
