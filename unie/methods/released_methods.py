"""Released checkpoints as the sampler-facing objects our own checkpoints give (the parameterisation layer).

:func:`load_released` reads an upstream checkpoint with :func:`unie.models.released.load_released_net` (our
DiT, their weights) and wraps it with the method whose parameterisation is upstream's:

* ``mdlm`` / ``bd3lm``: SUBS (``Diffusion._subs_parameterization``): mask logit at -inf, log-softmax, unmasked
  positions carry their token (log 1) -- :func:`unie.methods.mdlm.subs_logp` (exact -inf where upstream adds
  -1e6); BD3-LM with the block size the checkpoint states, no time conditioning (``sigma`` zeroed).
* ``sedd``: ``log s = o - log(e^sigma - 1) - log(V - 1)``, entry of ``xt_i`` set to 0
  (``SEDD.forward``/``_sedd_parameterization``) -- :func:`unie.methods.sedd.sedd_log_score` (V - 1 = the
  50,257 real GPT-2 tokens; its mask column is -inf where upstream leaves it raw, a column that the absorbing
  graph never uses on unmasked positions and that both set to 0 on masked ones).
* ``duo``: ``log_softmax`` of the output over all 50,258 ids of upstream's tokenizer, GPT-2 + ``[PAD]``
  (``DUO_BASE._process_model_output``; the network is ``len(tokenizer)`` wide), conditioned on
  ``sigma = -log alpha_t`` -- :class:`unie.methods.duo.DuoDenoiser` with ``pad_state``: ``[PAD]`` (upstream id
  50,257) is our tokenizer's mask id, a state of the process (:data:`DUO_PAD_ID`).
* ``ar``: mask logit blocked, ``log_softmax`` (``AR.forward``) -- :class:`unie.methods.ar.ARModel`; with the
  option ``chunk_bos`` (the paper profile's) it reads a chunk as upstream does, ``x0[:, :-1]`` with ``x0[:, 0] =
  bos`` (GPT-2's bos = eos = 50256), as a likelihood, a proxy and a sampler (BOS then ``L - 1`` draws).

The tokenizer must be upstream's: GPT-2 + the appended mask (vocab 50,258, mask 50,257, bos = eos = 50,256).
"""

from __future__ import annotations

import torch

from ..core.registry import METHODS
from ..models.released import SOURCES, ReleasedCheckpointError, load_released_net

# upstream's tokenizer: GPT-2 (50,257 tokens) with the mask appended (Diffusion.__init__: mask_index = vocab_size)
GPT2_MASKED = {"vocab_size": 50258, "mask_id": 50257, "bos_id": 50256, "eos_id": 50256}
# Duo's tokenizer is GPT-2 with [PAD] appended instead (dataloader.get_tokenizer: add_special_tokens pad_token),
# its network len(tokenizer) = 50,258 wide, and [PAD] a state of its uniform process.  The mapping: upstream's ids
# 0..50,256 are GPT-2's, ours too; upstream's [PAD] (the last id, 50,257) is the id our tokenizer gives its mask (the
# last id): one embedding row, one output column, read as the state [PAD] (Duo option pad_state).
DUO_PAD_ID = GPT2_MASKED["mask_id"]  # upstream's [PAD] = our mask id


def check_vocab(kind: str, net_vocab: int, info: dict, where) -> None:
    """Mask-based models predict over the whole tokenizer (mask included).  Duo predicts over upstream's whole
    tokenizer, GPT-2 + ``[PAD]`` (:data:`DUO_PAD_ID`): its output is the tokenizer's width too, and the tokenizer's
    mask must be its last id, the column of upstream's ``[PAD]``."""
    if kind == "duo":
        ok = info["mask_id"] == info["vocab_size"] - 1 and net_vocab == info["vocab_size"]
        need = (
            f"vocab_size {net_vocab} (its outputs: upstream's tokenizer, GPT-2 + [PAD]) with the mask as its last "
            f"id, where upstream has [PAD]"
        )
        if net_vocab == info["vocab_size"] - 1 == GPT2_MASKED["vocab_size"]:
            # a tokenizer that keeps [PAD] as a token and appends a mask after it: the network is fine
            need += (
                f"; the network's {net_vocab:,} outputs are GPT-2 + [PAD], as every released Duo's, and this "
                f"tokenizer has one id more ({info['vocab_size']:,}: a mask appended after [PAD]); read it with "
                f"the paper profile's tokenizer, GPT-2 + the mask ({net_vocab:,}), whose mask id plays [PAD]"
            )
        elif net_vocab == info["vocab_size"] - 1:
            need += (
                f"; the tokenizer has one id more than the network's {net_vocab} outputs: either it appends a "
                f"mask after [PAD] (use one whose last id, the mask, is upstream's [PAD]) or the network lacks "
                f"[PAD] (no released Duo does)"
            )
    else:
        ok = net_vocab == info["vocab_size"] and info["mask_id"] < net_vocab
        need = f"vocab_size {net_vocab} with the mask inside it"
    if not ok:
        raise ReleasedCheckpointError(
            f"{where}: tokenizer mismatch: the checkpoint needs {need}, the tokenizer has "
            f"vocab_size {info['vocab_size']}, mask {info['mask_id']}"
        )


def load_released(
    kind: str,
    path,
    *,
    tokenizer_info: dict | None = None,
    trust_remote_code: bool = False,
    device="cpu",
    dtype=torch.float32,
    options: dict | None = None,
    **net_kwargs,
):
    """An upstream checkpoint as its method's sampler-facing object (``MDLMDenoiser``, ``SEDDScore``,
    ``DuoDenoiser``, ``BD3Denoiser``, ``ARModel``), with ``method_name``, ``released`` (the loader's meta)
    and ``method`` (the method object: its ``nll``/``loss`` take ``wrapped.net``) attached.

    ``tokenizer_info`` defaults to upstream's (GPT-2 + mask); ``options`` are the method's options (BD3-LM's
    ``block_size`` comes from the checkpoint); ``net_kwargs`` go to :func:`load_released_net` (``use_ema``,
    ``n_heads``, ``block_size``)."""
    info = {**GPT2_MASKED, **(tokenizer_info or {})}
    net, meta = load_released_net(
        kind, path, trust_remote_code=trust_remote_code, device=device, dtype=dtype, **net_kwargs
    )
    check_vocab(kind, net.cfg.vocab_size, info, path)
    opts = dict(options or {})
    if kind == "duo":  # upstream's vocabulary: [PAD] (our mask id) is a state (DUO_PAD_ID)
        if not opts.get("pad_state", True):
            raise ReleasedCheckpointError(
                f"{path}: options pad_state=false, but a released Duo's states are its "
                f"{net.cfg.vocab_size} outputs, [PAD] included (upstream's vocabulary)"
            )
        opts["pad_state"] = True
    if kind == "bd3lm":
        if opts.get("block_size", net.cfg.block_size) != net.cfg.block_size:
            raise ReleasedCheckpointError(
                f"{path}: options block_size={opts['block_size']} but the checkpoint was "
                f"trained with block_size={net.cfg.block_size}"
            )
        opts["block_size"] = net.cfg.block_size
    cls = METHODS[SOURCES[kind].method]
    method = cls(info, opts)
    wrapped = method.wrap(net)
    wrapped.method_name = SOURCES[kind].method
    wrapped.released = meta
    wrapped.method = method
    return wrapped
