"""Paper profile: the Hugging Face checkpoints Uni-E decodes (LLaDA-8B, Dream-7B) and its AR proxy (Qwen2.5-0.5B).

* :func:`load_hf_dllm` gives an :class:`HFDiffusionLM` (a :class:`unie.core.protocols.DLLMBackbone`) whose
  ``logits(x)`` are *aligned*: position ``i`` predicts token ``i``.  ``style="llada"`` is aligned as it
  comes; ``style="dream"`` predicts token ``i + 1`` at position ``i`` (its AR initialisation), so the
  logits are shifted right by one, ``[logits[:, :1], logits[:, :-1]]``, as every Dream caller does
  (``docs/baselines.md``, Dream).
* :func:`load_hf_causal` gives an :class:`HFCausalLM` (a :class:`unie.core.protocols.CausalLM`), Hugging
  Face's causal convention unchanged.

Loading is local only (``local_files_only=True``): the directory is a snapshot the paper profile's
download rule wrote; a missing directory, ``config.json`` or weight file is a ``FileNotFoundError``.

Which class loads a checkpoint: a ``config.json`` with an ``auto_map`` ships its own modeling code (LLaDA,
Dream) and is loaded with ``trust_remote_code=True`` through ``AutoModel`` when ``auto_map`` names
``AutoModel`` (both do), else through the ``auto_map`` class it names for ``AutoModelForCausalLM``; that
needs the profile's explicit grant (``trust_remote_code: true`` for the model in ``config/paper.yaml``),
checked from ``config.json`` alone, before any weights are read.  A checkpoint without ``auto_map`` (a
transformers-native architecture, e.g. Qwen2.5 or a test's tiny Llama stand-in) loads with
``AutoModelForCausalLM``.

The forward pass gets no attention mask: LLaDA's ``generate.py`` and Dream's ``eval.py`` call
``model(x).logits`` on unpadded rows, and both models attend bidirectionally by construction (Dream's SDPA
hard-codes ``is_causal=False`` and ignores a non-tensor mask).  A causal stand-in therefore stays causal.
Rows are never padded for these models: :class:`unie.dllm.decoder.DLLMDecoder` decodes the prompts of a call in
groups of equal token length (no ``prompt_len``), so a row's logits never see another row's padding and a
greedy decode does not depend on its batch (lm-eval's HFLM sorts by length for the same reason; it pads with an
attention mask, which LLaDA's and Dream's own ``generate`` do not pass).

**The transformers range.**  Remote code runs inside ``from_pretrained``, so the transformers version matters
beyond our own code: the ``paper`` extra of ``pyproject.toml`` names the range LLaDA's and Dream's modeling code is
known to run under (transformers 5 reads ``all_tied_weights_keys``, which ``post_init()`` sets and LLaDA's
``LLaDAModelLM``, written for 4.x, never calls: an ``AttributeError`` inside ``from_pretrained``).
:func:`check_remote_code_transformers` refuses a checkpoint with ``auto_map`` under a version outside it, in one line,
before any weights are read (the loaders, and ``prefetch`` on the submit host); ``docs/paper-profile.md`` says why.

``transformers`` is imported inside the functions (importing it costs ~1 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..core.errors import InputError
from ..data.tokenizer import HF_MASK, Tokenizer

STYLES = ("llada", "dream")
DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
# files that hold a checkpoint's weights (a single file or a sharded index)
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_DOWNLOAD_HINT = "run the paper profile's download rule for this model first (nothing is downloaded here)"


# ------------------------------------------------------------------------------------------------ wrappers
class _HFWrapped:
    """What both wrappers share: the model's device and its raw forward on ``(B, L)`` token ids."""

    model: torch.nn.Module

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_positions(self) -> int | None:
        """The longest sequence the model's position embeddings cover (``max_position_embeddings``; LLaDA's
        ``max_sequence_length``; GPT-2's ``n_positions``), or None when its config names none."""
        cfg = getattr(self.model, "config", None)
        for key in ("max_position_embeddings", "max_sequence_length", "n_positions", "n_ctx"):
            value = getattr(cfg, key, None)
            if isinstance(value, int) and value > 0:
                return value
        return None

    def raw_logits(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:
            raise ValueError(f"logits expects (B, L) token ids, got shape {tuple(x.shape)}")
        return self.model(x.to(self.device)).logits


class HFDiffusionLM(_HFWrapped):
    """A Hugging Face diffusion LM as :class:`unie.core.protocols.DLLMBackbone`.

    ``model`` is any module whose ``model(x).logits`` is ``(B, L, V)``.  ``shift=True`` (Dream) means the
    raw logit at position ``i`` predicts token ``i + 1``; :meth:`logits` re-aligns it.  ``vocab_size`` is
    the model's output width ``V`` (LLaDA pads 126,464 > its tokenizer's length; ids at or above the
    tokenizer's length are never real tokens)."""

    def __init__(
        self,
        model,
        tokenizer: Tokenizer,
        *,
        mask_id: int,
        eos_id: int,
        shift: bool,
        vocab_size: int,
        style: str | None = None,
        path: str | None = None,
    ):
        self.model, self.tokenizer = model, tokenizer
        self.mask_id, self.eos_id = int(mask_id), int(eos_id)
        self.shift, self.vocab_size, self.style, self.path = bool(shift), int(vocab_size), style, path

    @torch.no_grad()
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` int64 (masks included) -> aligned ``(B, L, V)`` float32 on ``x``'s device."""
        out = self.raw_logits(x)
        if self.shift:  # Dream: position i's raw logits predict token i + 1 (issue #31)
            out = torch.cat([out[:, :1], out[:, :-1]], dim=1)
        return out.float().to(x.device)

    @torch.no_grad()
    def logits_and_attention(self, x: torch.Tensor, n_layers: int) -> tuple[torch.Tensor, torch.Tensor]:
        """DAWN's input from one forward pass: the aligned logits ``(B, L, V)`` (as :meth:`logits`) and the softmax
        attention probabilities of the last ``n_layers`` layers averaged over heads and layers, ``A`` ``(B, L, L)``
        float32 (row ``i`` = query, column ``j`` = key), not re-aligned for Dream (DAWN's Dream code does not).

        * LLaDA-style modeling code (its blocks attend in ``_scaled_dot_product_attention(q, k, v, attn_mask,
          dropout_p, is_causal)``; its forward refuses ``output_attentions``): for this call the last
          ``n_layers`` such modules also compute ``softmax(q k^T / sqrt(d) + attn_mask)`` beside their own
          attention, as DAWN's modified ``modeling_llada.py`` does (``attn_avg`` in layers 28-31).
        * Otherwise transformers' ``output_attentions=True``; a model that returns no attention probabilities
          (SDPA without an eager fallback) is a ``TypeError`` naming the fix."""
        import inspect
        import math

        blocks = [m for m in self.model.modules() if hasattr(type(m), "_scaled_dot_product_attention")]
        if blocks:
            if n_layers > len(blocks):
                raise ValueError(f"DAWN attn_layers={n_layers} but {self.path} has {len(blocks)} attention layers")
            probs = []

            def capture(orig):
                # the arguments by position (q, k, v, the mask) and is_causal by name, whatever the variant calls
                # its mask and dropout arguments (attn_mask / attention_mask, dropout_p / dropout, drop_mask)
                sig = inspect.signature(orig)

                def sdpa(*args, **kwargs):
                    bound = sig.bind(*args, **kwargs)
                    bound.apply_defaults()
                    values = list(bound.arguments.values())
                    q, k, attn_mask = values[0], values[1], values[3] if len(values) > 3 else None
                    kk = k if k.size(1) == q.size(1) else k.repeat_interleave(q.size(1) // k.size(1), dim=1)
                    s = q.float() @ kk.float().transpose(-2, -1) / math.sqrt(q.size(-1))
                    if attn_mask is not None:
                        s = (
                            s.masked_fill(~attn_mask, -math.inf)
                            if attn_mask.dtype == torch.bool
                            else s + attn_mask.float()
                        )
                    if bound.arguments.get("is_causal", False):
                        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), -math.inf)
                    probs.append(s.softmax(-1).mean(1))  # (B, L, L), heads averaged
                    return orig(*args, **kwargs)

                return sdpa

            last = blocks[-n_layers:]
            before = [vars(m).get("_scaled_dot_product_attention") for m in last]  # an instance attribute, if any
            for m in last:
                m._scaled_dot_product_attention = capture(m._scaled_dot_product_attention)  # instance attribute
            try:
                raw = self.raw_logits(x)
            finally:
                for m, had in zip(last, before):
                    if had is None:
                        del m._scaled_dot_product_attention  # the class's method again
                    else:
                        m._scaled_dot_product_attention = had
            if len(probs) != n_layers:
                raise TypeError(
                    f"DAWN: {self.path} ran {len(probs)} of its last {n_layers} attention layers' "
                    "_scaled_dot_product_attention in one forward pass"
                )
            A = torch.stack(probs).mean(0)
        else:
            out = self.model(x.to(self.device), output_attentions=True)
            att = getattr(out, "attentions", None)
            if not att or any(a is None for a in att[-n_layers:]):
                raise TypeError(
                    f"DAWN needs attention probabilities, and {self.path} returned none with "
                    "output_attentions=True: load it with attn_implementation='eager' "
                    "(model_args attn_implementation=eager)"
                )
            if n_layers > len(att):
                raise ValueError(f"DAWN attn_layers={n_layers} but {self.path} has {len(att)} attention layers")
            raw, A = out.logits, torch.stack([a.float() for a in att[-n_layers:]]).mean(dim=(0, 2))
        if self.shift:
            raw = torch.cat([raw[:, :1], raw[:, :-1]], dim=1)
        return raw.float().to(x.device), A.float().to(x.device)

    def __repr__(self) -> str:
        return (
            f"HFDiffusionLM(style={self.style!r}, path={self.path!r}, V={self.vocab_size}, "
            f"mask={self.mask_id}, eos={self.eos_id}, shift={self.shift})"
        )


class HFCausalLM(_HFWrapped):
    """A Hugging Face causal LM as :class:`unie.core.protocols.CausalLM`: ``logits(x)[:, i]`` scores token
    ``i + 1`` given ``x[:, :i+1]`` (no re-alignment).  ``vocab_size`` is the model's output width."""

    def __init__(
        self, model, tokenizer: Tokenizer, *, bos_id: int, eos_id: int, vocab_size: int, path: str | None = None
    ):
        self.model, self.tokenizer = model, tokenizer
        self.bos_id, self.eos_id, self.vocab_size, self.path = int(bos_id), int(eos_id), int(vocab_size), path

    @torch.no_grad()
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, L)`` int64 -> ``(N, L, V)`` float32 on ``x``'s device (all-ones attention: unpadded rows)."""
        return self.raw_logits(x).float().to(x.device)

    @torch.no_grad()
    def next_token_logp(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, L)`` int64 -> ``(N, L - 1)`` float64 on the CPU: ``log p(x[:, k + 1] | x[:, :k + 1])``, the float64
        log-softmax of :meth:`logits` and its gather done on the model's device (only ``N (L - 1)`` numbers travel
        to the host; on the CPU the same operations as reading :meth:`logits` there: the same numbers)."""
        logp = self.raw_logits(x).float().double().log_softmax(-1)
        return logp[:, :-1].gather(-1, x[:, 1:, None].to(logp.device)).squeeze(-1).cpu()

    @torch.no_grad()
    def greedy_continue(self, prompts: list[list[int]], gen_len: int) -> torch.Tensor:
        """Greedy continuations ``(B, gen_len)`` of token-id prompts (an AR row of Table 3 on a Hugging Face model).

        Prompts of the same length are decoded together with the model's KV cache and no padding (so a prompt's
        completion never depends on the other prompts of its batch, and no attention mask is needed); ties go to
        the lowest id (``argmax``), no sampling and none of the checkpoint's ``generation_config`` (repetition
        penalties, top-p).  After a row's EOS the rest is EOS; a group stops once every row has ended.  An empty
        prompt starts from BOS."""
        import inspect

        out = torch.full((len(prompts), gen_len), self.eos_id, dtype=torch.long)
        params = inspect.signature(self.model.forward).parameters
        # the KV cache's keyword: `cache` in transformers 5.x, `past_key_values` before; logits of the last position
        # only where the model can (a prompt's full (B, L, V) logits are large with a 150k vocabulary)
        key = "cache" if "cache" in params else "past_key_values"
        last_only = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        groups: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            groups.setdefault(len(p), []).append(i)
        for length, idx in groups.items():
            seq = torch.tensor([prompts[i] if length else [self.bos_id] for i in idx], device=self.device)
            x, past, done = seq, None, torch.zeros(len(idx), dtype=torch.bool, device=self.device)
            for t in range(gen_len):
                o = self.model(input_ids=x, use_cache=True, **last_only, **({key: past} if past is not None else {}))
                past = getattr(o, "cache", None)
                past = getattr(o, "past_key_values", None) if past is None else past
                nxt = o.logits[:, -1].float().argmax(-1)
                nxt = torch.where(done, torch.full_like(nxt, self.eos_id), nxt)
                out[idx, t] = nxt.cpu()
                done |= nxt == self.eos_id
                if bool(done.all()):
                    break
                seq = torch.cat([seq, nxt[:, None]], dim=1)
                x = nxt[:, None] if past is not None else seq  # a model without a cache: the whole sequence again
        return out

    def __repr__(self) -> str:
        return f"HFCausalLM(path={self.path!r}, V={self.vocab_size}, bos={self.bos_id}, eos={self.eos_id})"


# ------------------------------------------------------------------------------------------------ checks
def read_config(path) -> dict:
    """``path/config.json`` as a dict; a missing directory or file is a ``FileNotFoundError`` naming it."""
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"model directory {p} does not exist; {_DOWNLOAD_HINT}")
    cfg = p / "config.json"
    if not cfg.is_file():
        raise FileNotFoundError(f"model directory {p} has no config.json; {_DOWNLOAD_HINT}")
    return json.loads(cfg.read_text())


def check_trust(config: dict, path, trust_remote_code: bool) -> bool:
    """Whether the checkpoint needs its own modeling code (``auto_map`` in ``config.json``); a
    ``PermissionError`` when it does and the profile did not grant ``trust_remote_code``."""
    needs = bool(config.get("auto_map"))
    if needs and not trust_remote_code:
        raise PermissionError(
            f"model at {path} needs trust_remote_code (its config.json has auto_map) but config/paper.yaml does "
            f"not grant it for this model; set trust_remote_code: true for it"
        )
    return needs


class RemoteCodeVersionError(InputError, RuntimeError):
    """A checkpoint's remote code under a transformers version outside the range it is known to run under."""


def remote_code_transformers() -> str | None:
    """The transformers range of the ``paper`` extra (``pyproject.toml``, read from the installed package's
    metadata, so it is written once): the versions LLaDA's and Dream's remote code is known to run under.  None
    when the package's metadata is not there (a source tree that was never installed)."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    try:
        declared = requires("unie") or []
    except PackageNotFoundError:
        return None
    for line in declared:
        req = Requirement(line)
        if req.name == "transformers" and req.marker is not None and req.marker.evaluate({"extra": "paper"}):
            return str(req.specifier)
    return None


def check_remote_code_transformers(path, version: str | None = None) -> None:
    """A :class:`RemoteCodeVersionError` (one line) when the installed transformers (or ``version``) is outside
    :func:`remote_code_transformers`: the checkpoint at ``path`` ships modeling code written for that range."""
    from packaging.specifiers import SpecifierSet

    spec = remote_code_transformers()
    if version is None:
        import transformers

        version = transformers.__version__
    if spec and not SpecifierSet(spec).contains(version, prereleases=True):
        raise RemoteCodeVersionError(
            f"{path}: its remote code (config.json auto_map) is known to run under transformers {spec}, this is "
            f"transformers {version} (transformers 5 fails inside from_pretrained on LLaDA's code written for 4.x: "
            f"docs/paper-profile.md); install the paper extra: pip install -e '.[paper]'"
        )


def check_weights(path) -> None:
    """A ``FileNotFoundError`` naming ``path`` when it holds no weight file (e.g. only the tokenizer was fetched)."""
    p = Path(path)
    if any((p / f).is_file() for f in WEIGHT_FILES) or any(p.glob("*.safetensors")):
        return
    raise FileNotFoundError(f"model directory {p} has no weights (none of {', '.join(WEIGHT_FILES)}); {_DOWNLOAD_HINT}")


def model_vocab_size(model) -> int:
    """The model's vocabulary: ``config.vocab_size``, else its output embedding's rows."""
    v = getattr(getattr(model, "config", None), "vocab_size", None)
    if v is None:
        v = model.get_output_embeddings().weight.shape[0]
    return int(v)


def check_vocab(model, tokenizer, path, n_tokens: int | None = None) -> int:
    """The model's vocabulary size, after checking the tokenizer fits it.

    ``tokenizer`` is our :class:`Tokenizer` or a Hugging Face tokenizer; ``n_tokens`` overrides its length
    (the ids the model may actually be fed).  A tokenizer longer than ``config.vocab_size`` (a tokenizer
    from another model, or a mask token appended past the model's vocabulary) is a ``ValueError``: such ids
    would index past the embedding table."""
    v = model_vocab_size(model)
    if n_tokens is None:
        n_tokens = tokenizer.vocab_size if isinstance(tokenizer, Tokenizer) else len(tokenizer)
    if n_tokens > v:
        raise ValueError(
            f"tokenizer mismatch for model at {path}: the tokenizer has {n_tokens} tokens but the model's "
            f"vocabulary (config.vocab_size) has only {v}; ids >= {v} cannot be embedded (a tokenizer from "
            f"another model, or a mask token appended past the model's vocabulary)"
        )
    return v


def _dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def _raw_tokenizer(path, trust_remote_code: bool = False):
    """The checkpoint's own tokenizer, offline; with the model's remote-code grant (Dream ships its tokenizer's code:
    without the grant transformers would ask on stdin, which a batch job does not have)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=trust_remote_code)


def _load_model(
    path, config: dict, remote: bool, dtype, device, prefer_auto_model: bool, attn_implementation: str | None = None
):
    """Load the weights: ``AutoModel`` + remote code when ``auto_map`` names ``AutoModel`` (and a DLLM is
    wanted), the ``auto_map``'s ``AutoModelForCausalLM`` otherwise, and ``AutoModelForCausalLM`` for a
    transformers-native checkpoint (no ``auto_map``).  ``attn_implementation`` (e.g. ``eager``, which returns
    attention probabilities for DAWN) is passed to ``from_pretrained`` when given."""
    from transformers import AutoModel, AutoModelForCausalLM

    auto_map = config.get("auto_map") or {}
    use_auto_model = (
        remote and "AutoModel" in auto_map and (prefer_auto_model or "AutoModelForCausalLM" not in auto_map)
    )
    cls = AutoModel if use_auto_model else AutoModelForCausalLM
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    model = cls.from_pretrained(
        str(path), local_files_only=True, trust_remote_code=remote, dtype=_dtype(dtype), **extra
    )
    return model.to(device).eval()


def _config_mask_ids(path, config: dict) -> set[int]:
    """``mask_token_id`` as ``config.json`` / ``generation_config.json`` declare it (LLaDA, Dream), if they do."""
    ids = {config.get("mask_token_id")}
    gen = Path(path) / "generation_config.json"
    if gen.is_file():
        ids.add(json.loads(gen.read_text()).get("mask_token_id"))
    return {int(i) for i in ids if i is not None}


# ------------------------------------------------------------------------------------------------ loaders
def load_hf_dllm(
    path,
    *,
    style: str,
    trust_remote_code: bool,
    mask_token: str | None = None,
    dtype="float32",
    device="cpu",
    attn_implementation: str | None = None,
) -> HFDiffusionLM:
    """A local LLaDA- or Dream-style checkpoint as an aligned :class:`HFDiffusionLM`.

    Order: ``config.json`` and the ``trust_remote_code`` grant (no weights touched), the weight files,
    the tokenizer and its mask, the weights, the vocabulary check.  The mask id is ``mask_token``'s id
    when given (LLaDA: ``<|mdm_mask|>``, 126336; it must already be in the tokenizer's vocabulary: a
    freshly appended token would be one the model never saw), else the tokenizer's own mask token (Dream:
    ``<|mask|>``, 151666); a tokenizer without one is a ``ValueError`` (no mask is appended for a DLLM).
    A ``mask_token_id`` in ``config.json``/``generation_config.json`` must agree.  EOS is the tokenizer's."""
    if style not in STYLES:
        raise ValueError(f"style {style!r}: expected one of {STYLES}")
    config = read_config(path)
    remote = check_trust(config, path, trust_remote_code)
    if remote:
        check_remote_code_transformers(path)
    check_weights(path)

    hf = _raw_tokenizer(path, remote)
    if mask_token is not None:
        mid = hf.convert_tokens_to_ids(mask_token)
        if mid is None or mid == hf.unk_token_id or hf.convert_ids_to_tokens(mid) != mask_token:
            raise ValueError(f"mask token {mask_token!r} is not in the vocabulary of the tokenizer at {path}")
        if hf.mask_token != mask_token:
            hf.mask_token = mask_token  # names an existing token: the vocabulary does not grow
    elif hf.mask_token_id is None:
        raise ValueError(
            f"the tokenizer at {path} has no mask token and no mask_token was given: a diffusion LM "
            f"cannot be decoded without its mask (LLaDA: mask_token '<|mdm_mask|>')"
        )
    tok = Tokenizer("hf", hf=hf)
    tok.path = str(path)
    declared = _config_mask_ids(path, config)
    if declared and declared != {tok.mask_id}:
        raise ValueError(
            f"mask id {tok.mask_id} ({hf.mask_token!r}) disagrees with mask_token_id "
            f"{sorted(declared)} in the config of the model at {path}"
        )

    model = _load_model(
        path, config, remote, dtype, device, prefer_auto_model=True, attn_implementation=attn_implementation
    )
    v = check_vocab(model, tok, path)
    return HFDiffusionLM(
        model,
        tok,
        mask_id=tok.mask_id,
        eos_id=tok.eos_id,
        shift=(style == "dream"),
        vocab_size=v,
        style=style,
        path=str(path),
    )


def load_hf_causal(path, *, trust_remote_code: bool, dtype="float32", device="cpu") -> HFCausalLM:
    """A local causal LM (the Qwen2.5-0.5B proxy, an AR row) as :class:`HFCausalLM`.

    Its :class:`Tokenizer` gets ``<|mask|>`` appended when the tokenizer has none (our class needs one;
    the causal model is never fed it), so the vocabulary check counts the tokenizer's own tokens only.
    ``bos_id`` is the tokenizer's BOS, or its EOS when it has none (Qwen2.5, GPT-2)."""
    config = read_config(path)
    remote = check_trust(config, path, trust_remote_code)
    if remote:
        check_remote_code_transformers(path)
    check_weights(path)

    hf = _raw_tokenizer(path, remote)
    n_real = len(hf)
    if hf.mask_token_id is None:
        hf.add_special_tokens({"mask_token": HF_MASK})
    tok = Tokenizer("hf", hf=hf)
    tok.path = str(path)

    model = _load_model(path, config, remote, dtype, device, prefer_auto_model=False)
    v = check_vocab(model, tok, path, n_tokens=n_real)
    return HFCausalLM(model, tok, bos_id=tok.bos_id, eos_id=tok.eos_id, vocab_size=v, path=str(path))
