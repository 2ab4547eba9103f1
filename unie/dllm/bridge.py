"""The tokenizer bridge of Algorithm 3: an AR proxy scores a DLLM's candidates through text.

LLaDA and Qwen2.5 (the paper's proxy) use different tokenizers, so the proxy cannot read the DLLM's ids
(the released code scores them anyway, ``docs/baselines.md``).  For each candidate row
``ids (L,)`` in the DLLM layout (:mod:`unie.data.dllm_format`):

1. the text is the DLLM tokens after the first ``<bos>`` and before the first ``<eos>`` that follows it,
   decoded piece by piece, so every DLLM position ``i`` owns a character span ``[a_i, b_i)``;
2. the proxy encodes that text with character offsets, gets ``<bos>`` in front and its ``<eos>`` behind when
   the row has one, and scores every proxy token by teacher forcing (one batched forward over all rows);
3. each proxy token's ``log p_AR`` is **assigned to the DLLM position holding its last character**
   (a word the DLLM splits into ``▁ba`` ``k`` ``er`` is scored at ``er``); the proxy's ``<eos>`` goes to the
   DLLM's first ``<eos>``.  Positions before ``<bos>`` (left padding), the DLLM's later ``<eos>`` padding and
   positions at or after ``score_until`` (an argument of the call; :meth:`ProxyBridge.until` fixes it for
   one block of Algorithm 3) get 0.

Summed over positions this is the proxy's teacher-forced log-probability of the candidate's text (what the
``teacher_forced`` energies need); per position it is what the carry-over reading sums over ``M_t``, ``D``,
``M_s``.  A word cut by ``score_until`` (its last piece lies in a later block) is scored with the block that
completes it.  Only teacher-forced readings can be bridged: a proxy cannot read another tokenizer's masks.
With the same tokenizer on both sides the bridge is the identity map (a test checks it).

**The masked reading** (``ar_context: masked``, :meth:`ProxyBridge.masked_logp`) needs no bridge and only works
without one: when the proxy shares the DLLM's tokenizer (the Dream-like model and the word-level proxy, as Dream
and Qwen2.5 share theirs; :attr:`ProxyBridge.shares_tokenizer`), the proxy reads the DLLM's row itself, masks
included, from its ``<bos>`` on: ``log p_AR(tokens_i | ctx_<i)`` at each DLLM position ``i``, with the same zeros
as the teacher-forced map (before ``<bos>``, after the scored row's first ``<eos>``, at or after ``score_until``).
Another tokenizer is refused (:meth:`ProxyBridge.require_shared_tokenizer`).

``on_model=True`` reads each proxy token's score from the model's ``next_token_logp`` (``(n, width - 1)``: the
log-softmax and the gather where the model computes, e.g. on its GPU) instead of copying the full ``(n, width, V)``
log-probabilities to the CPU first: for a network's raw logits the same numbers on the same device (a test checks
it bit for bit on the CPU), for the oracle its exact log-probabilities (not re-normalised), and what keeps a proxy with Qwen2.5's 151,936 outputs, or the oracle over its tokenizer
(:class:`~unie.dllm.oracle.TextOracleLM`), cheap per window iteration.  A model without ``next_token_logp`` is read
the usual way.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch


class BridgeError(ValueError):
    pass


_PLANS: dict = {}  # (DLLM tokenizer, proxy tokenizer, row) -> how the proxy reads the row (ProxyBridge._plans)
_PLAN_LIMIT = 400_000
_LAYOUTS: dict = {}  # (the two tokenizers, a batch of rows) -> its plans and distinct proxy sequences (_layout)
_LAYOUT_KEEP = 8


def logits_next_token_logp(model, x: torch.Tensor, share_prefixes: bool = False) -> torch.Tensor:
    """``(N, L)`` -> ``(N, L - 1)`` float64 on the CPU: ``log p(x[:, k + 1] | x[:, :k + 1])`` read from the model's
    ``logits`` (index ``k`` scores token ``k + 1``): their float64 log-softmax and the gather at the row's own next
    tokens, both where the model computes (an exact copy), then only those numbers to the host.  ``share_prefixes``:
    the model's logits with each common prefix read once (``ARModel.logits``; the same to float rounding)."""
    logp = (model.logits(x, share_prefixes=True) if share_prefixes else model.logits(x)).double().log_softmax(-1)
    return logp[:, :-1].gather(-1, x[:, 1:, None].to(logp.device)).squeeze(-1).cpu()


def next_token_scores(model, x: torch.Tensor) -> torch.Tensor:
    """The model's own ``next_token_logp(x)`` where it has one, else :func:`logits_next_token_logp`."""
    return model.next_token_logp(x) if hasattr(model, "next_token_logp") else logits_next_token_logp(model, x)


class ProxyBridge:
    """The AR proxy as the DLLM samplers see it: a :class:`~unie.core.protocols.Proxy` over DLLM ids backed by
    ``model``, a :class:`~unie.core.protocols.CausalLM` with its own tokenizer.  ``forwards`` counts the model's
    forward passes."""

    def __init__(self, model, dllm_tokenizer, batch_size: int = 256, on_model: bool = False):
        self.model, self.dtok, self.ptok = model, dllm_tokenizer, model.tokenizer
        self.batch_size = batch_size
        self.on_model = bool(on_model) and hasattr(model, "next_token_logp")  # module doc
        self.forwards = 0
        self._surf = dllm_tokenizer.surfaces()
        # the two tokenizers' identities (their fingerprints: an object id can be reused once a tokenizer is gone):
        # bridges that read the same DLLM tokenizer through the same proxy tokenizer share their plans
        self._key = tuple(
            t.info()["fingerprint"] if callable(getattr(t, "info", None)) else id(t)
            for t in (dllm_tokenizer, self.ptok)
        )

    # -- checks ---------------------------------------------------------------------------------
    def check(self, texts: list[str]) -> None:
        """Refuse a proxy that cannot read the DLLM's text: every text must survive DLLM encode -> decode and be
        encodable by the proxy's tokenizer with the same text back (a :class:`BridgeError` naming the text)."""
        for text in texts:
            back = self.dtok.decode(self.dtok.encode(text))
            try:
                ids = self.ptok.encode(back)
            except ValueError as e:
                raise BridgeError(f"the proxy's tokenizer cannot encode the DLLM's text {back[:80]!r}: {e}") from None
            if self.ptok.decode(ids).strip() != back.strip():
                raise BridgeError(
                    f"the proxy's tokenizer does not round-trip the DLLM's text {back[:80]!r} "
                    f"(got {self.ptok.decode(ids)[:80]!r}): the two tokenizers cannot be bridged"
                )

    # -- the map ----------------------------------------------------------------------------------
    def _row_text(self, ids: list[int]):
        """``(text, spans, eos_pos)``: text after ``<bos>``, DLLM position -> char span, first ``<eos>`` position."""
        if self.dtok.mask_id in ids:
            raise BridgeError("the bridge scores complete candidates; this row still holds a mask")
        try:
            start = ids.index(self.dtok.bos_id) + 1
        except ValueError:
            start = 0
        eos = next((i for i in range(start, len(ids)) if ids[i] == self.dtok.eos_id), None)
        stop = len(ids) if eos is None else eos
        spans, text = {}, ""
        for i in range(start, stop):
            piece = self._surf[ids[i]]
            if not text:
                piece = piece.lstrip()
            spans[i] = (len(text), len(text) + len(piece))
            text += piece
        return text, spans, eos

    def _plans(self, rows: list[list[int]]) -> list[tuple[list[int], list[int], int | None]]:
        """Per DLLM row, how the proxy reads it: ``(proxy ids with <bos> (and <eos>), the DLLM position each proxy
        token's score goes to, the DLLM's first <eos> position)``.  A pure function of the two tokenizers and the
        row, remembered across calls and across the bridges of one DLLM tokenizer and one proxy tokenizer (the map
        reads the same candidates through several proxies that share a tokenizer)."""
        key0 = self._key
        todo = [r for r in dict.fromkeys(map(tuple, rows)) if (key0, r) not in _PLANS]
        if todo:
            if len(_PLANS) > _PLAN_LIMIT:
                _PLANS.clear()
            parsed = [self._row_text(list(r)) for r in todo]
            encoded = self.ptok.encode_with_offsets([p[0] for p in parsed])
            for r, (text, spans, eos), (enc_ids, offsets) in zip(todo, parsed, encoded):
                owner = {}
                for i, (a, b) in spans.items():
                    for c in range(a, b):
                        owner[c] = i
                targets = []
                for k, (a, b) in enumerate(offsets):
                    if b <= a:
                        targets.append(None)
                        continue
                    i = owner.get(b - 1)
                    if i is None:
                        raise BridgeError(f"proxy token {k} of {text[:60]!r} ends on whitespace the DLLM does not own")
                    targets.append(i)
                if eos is not None:
                    targets.append(eos)
                pids = [self.ptok.bos_id] + list(enc_ids) + ([self.ptok.eos_id] if eos is not None else [])
                _PLANS[(key0, r)] = (pids, targets, eos)
        return [_PLANS[(key0, tuple(r))] for r in rows]

    def _layout(self, ids: torch.Tensor):
        """``(plans, which, distinct)`` of DLLM rows ``ids (N, L)``: each row's plan (:meth:`_plans`), the index of its
        proxy sequence among the batch's distinct ones, and those in order of first use.  Remembered for the last
        few batches across the bridges of one DLLM tokenizer and one proxy tokenizer (the map's proxies read the
        same candidates one after another)."""
        key = (self._key, tuple(ids.shape), ids.cpu().numpy().tobytes())
        hit = _LAYOUTS.get(key)
        if hit is None:
            plans = self._plans(ids.tolist())
            distinct: dict[tuple, int] = {}
            which = [distinct.setdefault(tuple(plan[0]), len(distinct)) for plan in plans]
            hit = (plans, which, list(distinct))
            if len(_LAYOUTS) >= _LAYOUT_KEEP:
                _LAYOUTS.pop(next(iter(_LAYOUTS)))
            _LAYOUTS[key] = hit
        return hit

    def position_logp(self, ids: torch.Tensor, score_until: int | None = None) -> torch.Tensor:
        """Per-DLLM-position teacher-forced proxy log-probabilities ``(N, L)`` float64 of DLLM rows ``ids (N, L)``;
        positions at or after ``score_until`` (None: none) get 0.

        The proxy reads each distinct proxy sequence once: rows that read as the same text (identical candidates,
        the same text in two tokenisations) share its forward, each row's scores then summed into its own positions."""
        N, L = ids.shape
        plans, which, seqs_all = self._layout(ids)
        scores: list = []
        for lo in range(0, len(seqs_all), self.batch_size):
            seqs = seqs_all[lo : lo + self.batch_size]
            width = max(len(s) for s in seqs)
            x = torch.tensor([list(s) + [self.ptok.eos_id] * (width - len(s)) for s in seqs], dtype=torch.long)
            if self.on_model:
                tok_lp = self.model.next_token_logp(x).tolist()  # score of token k + 1, computed where the model is
            else:
                tok_lp = logits_next_token_logp(self.model, x).tolist()  # score of token k + 1
            self.forwards += 1
            scores.extend(tok_lp)
        block = [[0.0] * L for _ in range(N)]  # Python floats are float64: the same sums, in the same order
        for n in range(N):
            acc, lp = block[n], scores[which[n]]
            for k, i in enumerate(plans[n][1]):
                if i is not None:
                    acc[i] += lp[k]
        out = torch.tensor(block, dtype=torch.float64).reshape(N, L)
        if score_until is not None:
            out[:, score_until:] = 0.0
        return out

    # -- the masked reading (same tokenizer only) --------------------------------------------------
    @functools.cached_property
    def shares_tokenizer(self) -> bool:
        """Whether the proxy's tokenizer is the DLLM's (the same vocabulary and special ids): then it can read the
        DLLM's ids, masks included (:meth:`masked_logp`)."""
        return self.ptok.info() == self.dtok.info()

    def require_shared_tokenizer(self) -> None:
        """A :class:`BridgeError` unless :attr:`shares_tokenizer`: the masked reading feeds the DLLM's ids to the
        proxy as they are."""
        if not self.shares_tokenizer:
            p, d = self.ptok.info(), self.dtok.info()
            raise BridgeError(
                f"ar_context 'masked' needs a proxy that shares the DLLM's tokenizer (it reads the "
                f"DLLM's ids and masks as they are): the proxy's is {p['kind']} with {p['vocab_size']} "
                f"tokens ({p['fingerprint']}), the DLLM's {d['kind']} with {d['vocab_size']} "
                f"({d['fingerprint']}); use ar_context teacher_forced through the bridge"
            )

    def masked_logp(self, ctx: torch.Tensor, tokens: torch.Tensor, score_until: int | None = None) -> torch.Tensor:
        """``log p_AR(tokens[n, m, i] | ctx[n, :i])`` ``(N, M, L)`` float64 for DLLM rows ``ctx`` ``(N, L)`` (masks
        included) and token sets ``tokens`` ``(N, M, L)``: the proxy reads ``[<bos>; ctx after its <bos>]`` (one
        forward per row, right-padded with ``<eos>``, which a causal model never reads back), its score of DLLM
        position ``i`` is its prediction after position ``i - 1``.  Zero before and at ``<bos>``, after the first
        ``<eos>`` of ``tokens[n, m]`` that follows it (the scored text ends there, as in :meth:`position_logp`) and at
        or after ``score_until``.  Needs :attr:`shares_tokenizer`."""
        self.require_shared_tokenizer()
        ctx, tokens = ctx.cpu(), tokens.cpu()
        N, L = ctx.shape
        pos = torch.arange(L)
        is_bos = ctx == self.dtok.bos_id
        start = torch.where(is_bos.any(-1), is_bos.float().argmax(-1) + 1, 0)  # (N,): first position after <bos>
        width = 1 + L - int(start.min())
        j = pos[None] - start[:, None]  # (N, L): the proxy input index that holds DLLM position i (its <bos> is 0)
        inp = torch.full((N, width), self.ptok.eos_id, dtype=torch.long)
        inp[:, 0] = self.ptok.bos_id
        keep = j >= 0
        inp[keep.nonzero()[:, 0], 1 + j[keep]] = ctx[keep]
        out = torch.empty(tokens.shape, dtype=torch.float64)
        for lo in range(0, N, self.batch_size):
            hi = min(N, lo + self.batch_size)
            logp = self.model.logits(inp[lo:hi]).double().log_softmax(-1).cpu()  # index k scores input k + 1
            self.forwards += 1
            out[lo:hi] = logp[torch.arange(hi - lo)[:, None, None], j[lo:hi, None].clamp(min=0), tokens[lo:hi]]
        eos = (tokens == self.dtok.eos_id) & keep[:, None]
        after = eos.cumsum(-1) - eos.long() > 0  # past the first <eos>
        scored = keep[:, None] & ~after & (pos < (L if score_until is None else score_until))
        return torch.where(scored, out, torch.zeros_like(out))

    def token_logp(self, ctx: torch.Tensor, tokens: torch.Tensor, score_until: int | None = None) -> torch.Tensor:
        """The :class:`~unie.core.protocols.Proxy` interface: a teacher-forced reading (``tokens`` is ``ctx[:, None]``)
        through the bridge, ``(N, 1, L)`` cut at ``score_until`` as :meth:`position_logp`; any other (the masked
        reading) by :meth:`masked_logp`, only for a proxy that shares the DLLM's tokenizer."""
        if tokens.shape[1] != 1 or not torch.equal(tokens[:, 0].cpu(), ctx.cpu()):
            if not self.shares_tokenizer:
                raise BridgeError(
                    "the tokenizer bridge supports only teacher-forced readings of the proxy "
                    "(ar_context teacher_forced or teacher_forced_carry_over): a proxy cannot read "
                    "another tokenizer's masked state"
                )
            return self.masked_logp(ctx, tokens, score_until).to(ctx.device)
        return self.position_logp(ctx, score_until)[:, None].to(ctx.device)

    def until(self, score_until: int) -> ProxyUntil:
        """This proxy with its scores cut at ``score_until``, as the energies read it (``token_logp(ctx, tokens)``)."""
        return ProxyUntil(self, score_until)


@dataclass(frozen=True)
class ProxyUntil:
    """A :class:`ProxyBridge` whose scores stop at ``score_until``: what Algorithm 3 hands the energies for the
    block ending there (:meth:`ProxyBridge.until`)."""

    proxy: ProxyBridge
    score_until: int

    def token_logp(self, ctx: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return self.proxy.token_logp(ctx, tokens, self.score_until)
