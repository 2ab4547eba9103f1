"""APD, Adaptive Parallel Decoding (``docs/baselines.md``; danielmisrael/apd,
``dream/generation_utils.py::apd_sample, apd_accept_criterion``): a Table 3 baseline decoder ("+APD" rows).

A DLLM drafts several tokens at once, an AR proxy verifies them, and the longest prefix on which the draft
agrees with a sample of the mixture ``p_dlm^R · p_ar^(1-R)`` is committed.  Decoding goes **left to right** from
the first masked position ``curr`` of the generation region.  Each iteration, for every row that still holds a
mask:

1. **One DLLM forward** over the unfinished rows ``xt`` gives ``logp_dlm = log p_theta(x0 | xt)`` ``(B, T, V)``.
2. **Window.** ``[curr, curr + w)`` with ``w = min(m, block_end - curr)``: at most ``m`` positions (``lookahead``,
   default the decoder's ``tokens_per_step``) and never past the end of the current semi-AR block of
   ``block_length`` (the block structure the other Table 3 decoders respect; APD's own code has no blocks).
   Every window position is masked (decoding is left to right, so everything from ``curr`` on is masked).
3. **Draft** ``x̂_j = argmax_v (logp_dlm_j(v) / temperature + g_j(v))`` at each window position ``j``, with
   float64 Gumbel noise ``g`` ``(w, V)``: a product of independent marginals at the temperature
   (``temperature = 0``: the greedy ``argmax logp_dlm``, no noise).
4. **Verify** with the AR proxy, one batched proxy call per iteration over all rows (and candidates):
   ``logp_ar_j`` = the proxy's next-token log-probabilities at ``j`` conditioned on the prompt, the committed
   tokens and the draft tokens ``x̂_<j`` of the window.
5. **Mixture in logit space** ``ℓ*_j = R · logp_dlm_j + (1 - R) · logp_ar_j`` (a geometric mixture; APD's
   code mixes logits, not probabilities, whatever its paper's formula says), with ``0 · (-inf) = 0`` so that
   ``R = 1`` is ``logp_dlm`` and ``R = 0`` is ``logp_ar`` exactly.
6. **Coupled target** ``y_j = argmax_v (ℓ*_j(v) / temperature + g_j(v))`` with the **same** noise ``g`` as
   the draft.  ``accept_j = 1[x̂_j = y_j]``, the first position always accepted; the longest accepted prefix
   ``x̂[0:n]`` (``1 <= n <= w``) is committed, ``curr += n``.
7. A row is finished when its generation region holds no mask.  With ``stop_at_eos`` (APD stops on EOS) a
   committed ``<eos>`` ends the row: acceptance is cut after the first ``<eos>`` and the rest of the region is
   filled with ``<eos>`` (the DLLM layout's answer padding, :mod:`unie.data.dllm_format`), without forwards.

Readings (the Uni-E paper gives none of these; ``docs/baselines.md``):

* **"4 tokens per step" vs adaptive acceptance.** The paper evaluates the DLLM baselines with static decoding
  of ``m = 4`` tokens per step.  Here ``m`` is APD's look-ahead ``M`` (``max_lookahead``): the window holds at
  most ``m`` drafted positions, so an iteration commits between 1 and ``m`` tokens (``m`` when every draft
  token is accepted); APD's adaptivity is kept, and ``R = 1`` is exactly the static left-to-right decoder
  that commits the ``m`` drafted tokens per step.  ``lookahead > 0`` sets another window.
* **Blocks.** The window is cut at the end of the current block of ``block_length`` (the first block whose
  masks are not all committed); a block is finished before the next one is drafted.
* **Tokenizers** (``ar_scoring``).  When the DLLM and the proxy share a vocabulary (the same token strings
  in the same order, :func:`shared_vocabulary`: the Dream-like model and the word-level proxy), ``logp_ar``
  is the proxy's next-token log-softmax over the shared ids (:func:`direct_logp_ar`), as in APD (Dream and
  Qwen2.5).  Otherwise (the LLaDA-like BPE model and the word-level proxy, or ``ar_scoring = "bridge"``) the
  proxy cannot read the DLLM's ids and the mixture is restricted at each window position ``j`` to a
  **candidate set**: the draft token and the DLLM's top-``candidates`` tokens there (blocked ids left out).
  Candidate ``v`` at ``j`` is scored through the tokenizer bridge (``ProxyBridge.position_logp``, which reads
  complete rows only) on the row holding the committed tokens, the draft ``x̂_<j``, ``v`` at ``j``, the draft
  ``x̂_>j`` in the rest of the window and the DLLM's greedy ``argmax logp_dlm`` at the later masked positions
  (a deterministic fill, identical for every candidate): ``logp_ar_j(v)`` = the sum of the per-position
  proxy scores over the positions up to the end of the first word that ends at or after ``j``
  (:func:`word_ends`; ``<eos>`` counts as a word), i.e. the proxy's log-probability of the text up to the end
  of the word ``v`` starts, continues or ends (:func:`bridged_logp_ar`).  A word the candidate starts is
  completed by the fill (the bridge scores a word at its last piece); a bare space piece is scored with the
  word after it, so every candidate adds one word.  This is the proxy's log-probability of the text the
  candidate adds, plus a term that is the same for every candidate at ``(row, j)`` (the text before that
  word), which the argmax of step 6 ignores.  Tokens outside the set get ``-inf`` in the mixture, so
  ``R = 1`` still accepts every draft token (the draft is in its set).  With one shared word-level
  vocabulary both readings give the same ``logp_ar`` up to that constant (a test checks it).  All rows x
  window positions x candidates go through one ``position_logp`` call per iteration.
* **Noise per row.**  Each row draws its noise from its own ``torch.Generator`` (:func:`row_generators`),
  seeded from one draw of ``generator`` per call and the row's own input tokens (and its occurrence among
  identical rows), and draws ``(m, V)`` per iteration whatever its window: a row's result does not depend on
  the other rows of the batch, nor on its place in it (decoded alone with the same seed it is the same).
* The proxy is the tokenizer bridge passed as ``proxy`` (duck-typed: ``model``, ``dtok``, ``ptok``,
  ``position_logp``, ``forwards``), as for Algorithm 3; ``stats["accepted"]`` is APD's acceptance rate (mean
  tokens committed per row and iteration).

Where the released code differs (recorded, not copied; ``coupled = False`` gives the second):

* its draft noise is ``(-log u)^T`` dividing ``exp(logits / T)``, i.e. ``argmax(logits / T + T · g)``: a
  sample at temperature ``T²`` (0.04 for the harness's 0.2), with top-p 0.95; here the draft is an exact
  sample at ``temperature`` and no top-p is applied;
* ``apd_accept_criterion`` calls its Gumbel sampler at its default temperature 0, which drops the noise, so
  its target is the greedy ``argmax ℓ*`` (not the coupled sample its paper describes);
* it draws over the whole window of ``max_lookahead`` (100) tokens with a KV window of 16 and caches, batch
  size 1.  Our sequences are short; no cache is used (it would not change the decoding rule).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

from ..core.gumbel import gumbel_noise
from ..core.registry import register_dllm_sampler
from .backbone import DecodeOptions, normalise

AR_SCORINGS = ("auto", "bridge")


@dataclass(frozen=True)
class APDOptions:
    """APD's options (the single source of their defaults).

    * ``R``: the mixture weight ``apd_mixture_weight`` in ``[0, 1]`` (0.7, the APD demo's; larger trusts the
      DLLM more: more tokens accepted per iteration).
    * ``temperature``: of the Gumbel draft and of the coupled target (0.2, the APD harness's; 0 = greedy).
    * ``lookahead``: the window ``m`` (at most ``m`` tokens per iteration); 0 = the decoder's
      ``tokens_per_step`` (the paper's "4 tokens per step").
    * ``candidates``: the DLLM's top-``c`` tokens added to the draft token in the bridged candidate set.
    * ``ar_scoring``: ``auto`` (the proxy's ids directly when the vocabularies are the same, else the bridge)
      or ``bridge`` (always the candidate set through the bridge).
    * ``coupled``: the target uses the draft's noise (APD's paper); False = ``argmax ℓ*`` (its released code).
    * ``stop_at_eos``: a committed ``<eos>`` ends the row (the rest of the region is filled with ``<eos>``)."""

    R: float = 0.7
    temperature: float = 0.2
    lookahead: int = 0
    candidates: int = 4
    ar_scoring: str = "auto"
    coupled: bool = True
    stop_at_eos: bool = True

    def __post_init__(self):
        def number(name):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or math.isinf(v):
                raise ValueError(f"APD option {name} must be a finite number, got {v!r}")
            return v

        if not 0.0 <= number("R") <= 1.0:
            raise ValueError(f"APD option R (the mixture weight) must be in [0, 1], got {self.R!r}")
        if number("temperature") < 0:
            raise ValueError(f"APD option temperature must be >= 0, got {self.temperature!r}")
        for name, low in (("lookahead", 0), ("candidates", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"APD option {name} must be an integer >= {low}, got {v!r}")
        if self.ar_scoring not in AR_SCORINGS:
            raise ValueError(f"APD option ar_scoring must be one of {', '.join(AR_SCORINGS)}, got {self.ar_scoring!r}")
        for name in ("coupled", "stop_at_eos"):
            if type(getattr(self, name)) is not bool:
                raise ValueError(f"APD option {name} must be true or false, got {getattr(self, name)!r}")


# ---------------------------------------------------------------------- pieces
def shared_vocabulary(proxy) -> bool:
    """Whether the DLLM's tokenizer ``proxy.dtok`` and the proxy's ``proxy.ptok`` are the same vocabulary (the
    same token strings in the same order, and the same ``<bos>``/``<eos>`` ids)."""
    d, p = proxy.dtok, proxy.ptok
    if d is p:
        return True
    return (
        d.vocab_size == p.vocab_size
        and d.bos_id == p.bos_id
        and d.eos_id == p.eos_id
        and list(d.tokens) == list(p.tokens)
    )


def row_generators(x: torch.Tensor, generator: torch.Generator | None) -> list[torch.Generator]:
    """One ``torch.Generator`` (on ``x``'s device) per row of ``x`` ``(B, T)``: seeded from one draw of
    ``generator`` (the global RNG when None) hashed with the row's tokens and its occurrence index among the
    identical rows before it, so a row's noise does not depend on the other rows or its index.  A list of
    generators (one per row, as :class:`~unie.dllm.decoder.DLLMDecoder` passes them) is used as it is."""
    if isinstance(generator, (list, tuple)):
        if len(generator) != x.shape[0]:
            raise ValueError(f"{len(generator)} generators for {x.shape[0]} rows")
        return list(generator)
    if generator is not None:
        base = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
    else:
        base = int(torch.randint(0, 2**62, (1,)))
    seen: dict[bytes, int] = {}
    out = []
    for row in x.detach().cpu().to(torch.int64):
        key = row.numpy().tobytes()
        k = seen.get(key, 0)
        seen[key] = k + 1
        digest = hashlib.sha256(f"{base}:{k}:".encode() + key).digest()
        out.append(torch.Generator(device=x.device).manual_seed(int.from_bytes(digest[:8], "little") >> 1))
    return out


def mixture(logp_dlm: torch.Tensor, logp_ar: torch.Tensor, R: float, support: torch.Tensor | None = None):
    """``ℓ* = R · logp_dlm + (1 - R) · logp_ar`` ``(..., V)`` with ``0 · (-inf) = 0`` (``R = 1`` is ``logp_dlm``,
    ``R = 0`` is ``logp_ar``) and ``-inf`` outside the bool ``support`` (the bridged candidate sets)."""
    out = torch.zeros_like(logp_dlm)
    if R > 0:
        out = out + R * logp_dlm
    if R < 1:
        out = out + (1 - R) * logp_ar
    return out if support is None else out.masked_fill(~support, -math.inf)


def gumbel_choice(logits: torch.Tensor, g: torch.Tensor | None, temperature: float) -> torch.Tensor:
    """``argmax(logits / temperature + g)`` ``(..., V) -> (...)``; the plain argmax when ``g`` is None."""
    return logits.argmax(-1) if g is None else (logits / temperature + g).argmax(-1)


def accept_length(draft: torch.Tensor, y: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """APD's acceptance: ``n`` ``(B,)`` = the longest prefix of the ``valid`` window positions ``(B, m)`` on
    which ``draft == y``, the first position always accepted (``n >= 1`` for a row with a valid position)."""
    agree = (draft == y) & valid
    agree[:, 0] = valid[:, 0]
    return agree.long().cumprod(-1).sum(-1)


def _proxy_start(x: torch.Tensor, bos_id: int) -> torch.Tensor:
    """Per row ``(B,)``: the first position after the row's first ``<bos>`` (0 when it has none)."""
    is_bos = x == bos_id
    return torch.where(is_bos.any(-1), is_bos.long().argmax(-1) + 1, torch.zeros_like(x[:, 0]))


def direct_logp_ar(proxy, state: torch.Tensor, curr: torch.Tensor, width: torch.Tensor, m: int) -> torch.Tensor:
    """Shared vocabulary: ``logp_ar`` ``(B, m, V_ar)`` float64, the proxy's next-token log-probabilities at the
    window positions ``curr + k`` (``k < width``, ``(B,)``; later ``k`` repeat the last one) of ``state``
    ``(B, T)`` (committed tokens, then the draft in the window).

    Each row is read from after its ``<bos>`` (the DLLM layout's left ``<eos>`` pads are not text), given the
    proxy's own ``<bos>`` and right-padded with ``<eos>`` (causal: padding never changes earlier conditionals);
    window position ``curr + k`` is scored by the proxy logits at index ``curr + k - start``.  One forward."""
    model, ptok = proxy.model, proxy.ptok
    T = state.shape[1]
    start = _proxy_start(state, proxy.dtok.bos_id)
    length = curr + width - start + 1  # <bos> + tokens [start, curr + width)
    W = int(length.max())
    s = torch.arange(W, device=state.device)
    seq = state.gather(1, (start[:, None] - 1 + s).clamp(0, T - 1))
    seq[:, 0] = model.bos_id
    seq = seq.masked_fill(s >= length[:, None], ptok.eos_id)
    logp = model.logits(seq).double().log_softmax(-1).to(state.device)  # (B, W, V): index i scores i + 1
    at = (curr - start)[:, None] + torch.minimum(torch.arange(m, device=state.device), width[:, None] - 1)
    return logp.gather(1, at[..., None].expand(-1, -1, logp.shape[-1]))


def word_tables(tokenizer, vocab: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cont, text)`` ``(vocab,)`` bool over the DLLM's pieces: ``cont`` = the piece continues the word before
    it (its text does not start with whitespace; specials never continue); ``text`` = the piece writes a
    non-space character (``<eos>`` counts: it ends the text and the proxy scores it)."""
    surf = tokenizer.surfaces()
    special = {tokenizer.eos_id, tokenizer.bos_id, tokenizer.mask_id}
    cont, text = [], []
    for i in range(vocab):
        piece = surf[i] if i < len(surf) and i not in special else ""
        cont.append(bool(piece) and not piece[0].isspace())
        text.append(bool(piece.strip()) or i == tokenizer.eos_id)
    return (torch.tensor(cont, dtype=torch.bool, device=device), torch.tensor(text, dtype=torch.bool, device=device))


def word_ends(rows: torch.Tensor, p: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``e`` ``(N,)``: one past the end of the first word of ``rows`` ``(N, T)`` that ends at or after position
    ``p`` ``(N,)``: the first ``q >= p`` whose piece writes text (or is ``<eos>``) and is not continued by the
    piece at ``q + 1`` (``T`` when none).  The candidate at ``p`` is thus scored with the word it starts, ends
    or continues; a bare space piece, with the word after it."""
    cont, text = tables
    N, T = rows.shape
    continued = torch.cat([cont[rows[:, 1:]], torch.zeros(N, 1, dtype=torch.bool, device=rows.device)], dim=1)
    pos = torch.arange(T, device=rows.device)
    end = (pos >= p[:, None]) & text[rows] & ~continued
    return torch.where(end.any(-1), end.long().argmax(-1) + 1, torch.full_like(p, T))


def bridged_logp_ar(
    proxy,
    state: torch.Tensor,
    fill: torch.Tensor,
    curr: torch.Tensor,
    valid: torch.Tensor,
    cand: torch.Tensor,
    tables: tuple[torch.Tensor, torch.Tensor],
) -> tuple[torch.Tensor, dict]:
    """Different vocabularies: ``logp_ar`` ``(B, m, K)`` float64 of the candidates ``cand`` ``(B, m, K)`` through
    the tokenizer bridge (``-inf`` where ``valid`` ``(B, m, K)`` is False).

    ``state`` ``(B, T)``: committed tokens, the draft in the window, masks after it; ``fill`` ``(B, T)``: the
    deterministic tokens for those later masks.  Candidate ``cand[b, k, c]`` is put at ``curr[b] + k`` of the
    completed row and scored as the sum of the bridge's per-position proxy log-probabilities over positions
    ``< e`` (:func:`word_ends`: up to the end of the word the candidate writes; the bridge scores a word at its
    last piece and nothing after the first ``<eos>``).  One ``position_logp`` call over every valid (row,
    position, candidate).  Also returns the scored ``rows``
    ``(N, T)``, their ``index`` ``(N, 3)`` into ``cand`` and their ``ends`` ``(N,)`` (for checks)."""
    T = state.shape[1]
    mask_id = proxy.dtok.mask_id
    base = torch.where(state == mask_id, fill, state)
    index = valid.nonzero()  # (N, 3): b, k, c
    b, k, c = index.unbind(-1)
    p = curr[b] + k
    rows = base[b].clone()
    rows[torch.arange(len(b), device=rows.device), p] = cand[b, k, c]
    s = proxy.position_logp(rows).to(state.device)  # (N, T) float64
    pos = torch.arange(T, device=state.device)
    ends = word_ends(rows, p, tables)
    score = torch.where(pos < ends[:, None], s, torch.zeros_like(s)).sum(-1)
    out = torch.full(cand.shape, -math.inf, dtype=torch.float64, device=state.device)
    out[b, k, c] = score
    return out, {"rows": rows, "index": index, "ends": ends}


# ---------------------------------------------------------------------- the decoder
@torch.no_grad()
def apd_decode(
    backbone,
    proxy,
    x: torch.Tensor,
    decoding: DecodeOptions,
    options: APDOptions,
    generator=None,
    trace: list | None = None,
) -> tuple[torch.Tensor, dict]:
    """APD on prompts ``x`` ``(B, T)`` (DLLM layout, ``decoding.gen_length`` trailing masks).

    ``proxy``: the AR proxy as a :class:`~unie.dllm.bridge.ProxyBridge` (duck-typed: ``model``, ``dtok``, ``ptok``,
    ``position_logp``, ``forwards``).  Only the rows that still hold a mask are forwarded.  ``trace``: a list
    that receives one dict per iteration (``rows`` ``(B_a,)``, ``xt`` ``(B_a, T)``, ``curr``, ``width``,
    ``noise`` ``(B_a, m, V)`` or None, ``logp_dlm`` ``(B_a, m, V)``, ``logp_ar``, ``support``, ``draft``, ``y``
    ``(B_a, m)``, ``accepted`` ``(B_a,)``; for tests).  Returns the decoded ``(B, T)`` and ``{"nfe": DLLM
    forwards, "proxy_forwards": ..., "accepted": mean tokens committed per (row, iteration),
    "tokens_per_step": gen_length / nfe}``."""
    o = options
    x = x.clone()
    T = x.shape[1]
    mask_id = backbone.mask_id
    eos_id = getattr(backbone, "eos_id", None) if o.stop_at_eos else None
    P = T - decoding.gen_length
    bl = decoding.block_length
    m = o.lookahead or decoding.tokens_per_step
    blocked = (mask_id, *getattr(backbone, "blocked", ()))
    direct = o.ar_scoring == "auto" and shared_vocabulary(proxy)
    gens = row_generators(x, generator) if o.temperature > 0 else None
    ks = torch.arange(m, device=x.device)
    tables = None
    nfe = proxy_calls = row_iterations = committed = 0
    proxy_before = proxy.forwards
    while True:
        active = (x[:, P:] == mask_id).any(-1)
        if not bool(active.any()):
            break
        rows = active.nonzero().squeeze(-1)
        xt = x[rows]  # a copy
        x_before = xt.clone()
        Ba = len(rows)
        # window [curr, curr + width): the first masked position, at most m, inside the current block
        curr = P + (xt[:, P:] == mask_id).long().argmax(-1)
        block_end = torch.clamp(P + ((curr - P) // bl + 1) * bl, max=T)
        width = torch.clamp(block_end - curr, max=m)
        valid = ks < width[:, None]  # (Ba, m)
        win = (curr[:, None] + ks).clamp(max=T - 1)
        logp_all = normalise(backbone.logits(xt), blocked).to(x.device)  # (Ba, T, V_dlm)
        nfe += 1
        V = logp_all.shape[-1]
        if direct:  # the shared vocabulary (a DLLM head padded past it is cut, as APD cuts Dream's)
            V = min(V, proxy.ptok.vocab_size)
        logp_dlm = logp_all.gather(1, win[..., None].expand(-1, -1, logp_all.shape[-1]))[..., :V].double()  # (Ba, m, V)
        g = None
        if gens is not None:
            g = torch.stack([gumbel_noise((m, V), gens[int(r)]) for r in rows]).to(x.device)
        draft = gumbel_choice(logp_dlm, g, o.temperature)  # (Ba, m)
        state = xt.clone()
        b_idx, k_idx = valid.nonzero(as_tuple=True)
        state[b_idx, curr[b_idx] + k_idx] = draft[b_idx, k_idx]
        support = None
        if o.R == 1:
            logp_ar = torch.zeros_like(logp_dlm)  # not read: R = 1 trusts the DLLM alone (no proxy call)
        elif direct:
            logp_ar = direct_logp_ar(proxy, state, curr, width, m)[..., :V]
            proxy_calls += 1
        else:
            if tables is None:
                tables = word_tables(proxy.dtok, V, x.device)
            top = logp_dlm.topk(min(o.candidates, V), dim=-1).indices
            cand = torch.cat([draft[..., None], top], dim=-1)  # (Ba, m, K)
            ok = valid[..., None] & torch.isfinite(logp_dlm.gather(-1, cand))
            fill = logp_all.argmax(-1)  # the DLLM's greedy x0 at the later masked positions
            scores, _ = bridged_logp_ar(proxy, state, fill, curr, ok, cand, tables)
            logp_ar = torch.full_like(logp_dlm, -math.inf).scatter_(-1, cand, scores)
            support = torch.zeros_like(logp_dlm, dtype=torch.bool).scatter_(-1, cand, ok)
        target = mixture(logp_dlm, logp_ar, o.R, support)
        y = gumbel_choice(target, g if o.coupled else None, o.temperature)
        n = accept_length(draft, y, valid)
        if eos_id is not None:  # acceptance ends after the first <eos>
            is_eos = (draft == eos_id) & (ks < n[:, None])
            n = torch.where(is_eos.any(-1), is_eos.long().argmax(-1) + 1, n)
        take = ks < n[:, None]
        b_idx, k_idx = take.nonzero(as_tuple=True)
        xt[b_idx, curr[b_idx] + k_idx] = draft[b_idx, k_idx]
        if eos_id is not None:
            done = (xt[:, P:] == eos_id).any(-1, keepdim=True)
            xt[:, P:] = torch.where(done & (xt[:, P:] == mask_id), torch.full_like(xt[:, P:], eos_id), xt[:, P:])
        x[rows] = xt
        row_iterations += Ba
        committed += int(n.sum())
        if trace is not None:
            trace.append(
                {
                    "rows": rows,
                    "xt": x_before,
                    "curr": curr,
                    "width": width,
                    "noise": g,
                    "logp_dlm": logp_dlm,
                    "logp_ar": logp_ar,
                    "support": support,
                    "draft": draft,
                    "y": y,
                    "accepted": n,
                }
            )
    stats = {
        "nfe": nfe,
        "proxy_forwards": proxy_calls + proxy.forwards - proxy_before,
        "accepted": committed / max(row_iterations, 1),
        "tokens_per_step": decoding.gen_length / max(nfe, 1),
    }
    return x, stats


@register_dllm_sampler("apd", APDOptions, needs_proxy=True)
def apd_sampler(
    backbone, x: torch.Tensor, decoding: DecodeOptions, options: APDOptions, proxy=None, generator=None
) -> tuple[torch.Tensor, dict]:
    """Registered form of :func:`apd_decode` (the +APD rows of Table 3); ``proxy`` is the tokenizer bridge."""
    if proxy is None:
        raise ValueError("DLLM sampler 'apd' needs a proxy (the AR verifier)")
    return apd_decode(backbone, proxy, x, decoding, options, generator)
