"""The toy world: a synthetic language whose distribution ``pi`` is known exactly.

A hidden Markov model over words (``docs/toy-world.md``; the words: :mod:`unie.data.toy_vocab`).  The hidden state is
``(scene, role)``: ``scene`` is a latent topic (cat, dog, car, ...) that persists through a
sentence and is redrawn with small probability at sentence boundaries (always at a document
boundary); ``role`` walks a small sentence grammar
``det [adj] subj verb [det [adj] obj] [prep det place] punct [<eos>]``.  Emissions depend on both:
determiners, prepositions and punctuation are shared, nouns/verbs/adjectives are mostly
scene-specific ("bone" goes with "dog") with some shared, ambiguous words ("friend", "food").

This gives the two traps of Section 3.1:
* dependency: subject and object of one sentence are jointly but not independently predictable
  (both masked -> independent marginals produce "the cat chews the bone");
* invariance: a sentence-initial ambiguous subject ("the friend ...") is decided only by a later word.

Every data sequence is a length-``L`` window of the stationary stream (documents joined by
``<eos>``), so ``pi(x)`` of a training chunk is exactly the forward algorithm started from the
stationary distribution.  A small uniform "typo" emission (``noise``) gives every sequence
positive probability, so generative perplexity under ``pi`` is always finite.

Exact quantities (batched, float64): ``log_marginal`` (forward algorithm with missing observations),
``predictive`` (pi(x_i | visible x_<i): the oracle AR), ``posterior`` (pi(x_i | all other visible
tokens): the oracle denoiser), and ``sample``.  :class:`OracleDenoiser` and :class:`OracleAR` expose
the same interface as the trained models.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import torch

from .toy_vocab import EOS_WORD, ROLE_CATEGORY, ROLES, SCENE_WORDS, SCENES, SHARED_WORDS, word_list  # noqa: F401


@dataclass(frozen=True)
class Domain:
    """Knobs of one domain (the training domain and seven shifted variants share the grammar)."""

    name: str
    p_adj: float = 0.35  # adjective before a noun
    p_adj_more: float = 0.1  # a second adjective
    p_obj: float = 0.7  # the verb takes an object
    p_prep: float = 0.35  # a prepositional phrase follows
    p_eos: float = 0.2  # a document ends after a sentence
    p_change: float = 0.25  # the scene is redrawn at a sentence boundary
    p_shared: float = 0.15  # a noun/verb/adjective slot uses a shared (ambiguous) word
    zipf: float = 1.0  # within-list Zipf exponent (lower = rarer words more common)
    sharpness: float = 1.0  # emission inverse temperature
    scene_skew: float = 0.5  # Zipf exponent of the scene prior (0 = uniform)
    scene_order: tuple[int, ...] = tuple(range(len(SCENES)))
    noise: float = 0.01  # uniform "typo" emission probability (full support)


# The training domain ("owt") and seven zero-shot variants named after the paper's Table 1 columns.
DOMAINS: dict[str, Domain] = {
    "owt": Domain("owt"),
    "ptb": Domain("ptb", p_adj=0.1, p_prep=0.1, sharpness=1.5, p_obj=0.8),  # short, formulaic sentences
    "wikitext": Domain("wikitext", p_adj=0.6, p_adj_more=0.3, p_prep=0.6, p_eos=0.05),  # long sentences, long docs
    "lm1b": Domain("lm1b", p_eos=0.9, p_change=0.9),  # one-sentence documents
    "lambada": Domain("lambada", p_change=0.03, p_eos=0.05, p_shared=0.3),  # long-range scene persistence
    "ag_news": Domain("ag_news", scene_skew=2.0, scene_order=(2, 5, 7, 3, 6, 4, 0, 1)),  # car/ship/school news
    "pubmed": Domain("pubmed", zipf=0.3, p_shared=0.05, scene_order=(3, 6, 4, 1, 0, 2, 5, 7)),  # rare words
    "arxiv": Domain("arxiv", sharpness=0.7, p_change=0.6, zipf=0.6, noise=0.03),  # flat, noisy, topic-hopping
}


def _zipf(n: int, a: float) -> torch.Tensor:
    w = 1.0 / torch.arange(1, n + 1, dtype=torch.float64) ** a
    return w / w.sum()


class HMM:
    """Exact toy-world distribution for one domain.

    Attributes:
        T: ``(S, S)`` transition matrix, rows sum to 1.
        E: ``(S, V_hmm)`` emission matrix over words + ``<eos>`` (ids ``0..V_hmm-1``).
        pi0: ``(S,)`` stationary distribution of the hidden chain (start of every window).
    """

    def __init__(self, domain: Domain | str = "owt"):
        self.domain = DOMAINS[domain] if isinstance(domain, str) else domain
        self.words = word_list()
        self.V = len(self.words) + 1  # + <eos>
        self.eos_id = len(self.words)
        self.states = [(c, r) for c in range(len(SCENES)) for r in ROLES]
        self.S = len(self.states)
        self.T, self.E = self._build()
        self.pi0 = self._stationary()

    @classmethod
    def from_matrices(cls, T: torch.Tensor, E: torch.Tensor, pi0: torch.Tensor | None = None) -> "HMM":
        """An HMM with given transition ``(S, S)`` and emission ``(S, V)`` matrices (for brute-force tests).

        Symbols are ``0..V-1`` with the last one playing ``<eos>``; ``pi0`` defaults to the stationary law."""
        self = cls.__new__(cls)
        self.domain = None
        self.T, self.E = T.double(), E.double()
        self.S, self.V = self.T.shape[0], self.E.shape[1]
        self.words = [f"w{i}" for i in range(self.V - 1)]
        self.eos_id = self.V - 1
        self.states = list(range(self.S))
        self.pi0 = self._stationary() if pi0 is None else pi0.double()
        return self

    # ------------------------------------------------------------------ construction
    def _role_transitions(self) -> dict[str, dict[str, float]]:
        d = self.domain
        return {
            "s_det": {"s_adj": d.p_adj, "subj": 1 - d.p_adj},
            "s_adj": {"s_adj": d.p_adj_more, "subj": 1 - d.p_adj_more},
            "subj": {"verb": 1.0},
            "verb": {"o_det": d.p_obj, "prep": (1 - d.p_obj) * d.p_prep, "punct": (1 - d.p_obj) * (1 - d.p_prep)},
            "o_det": {"o_adj": d.p_adj, "obj": 1 - d.p_adj},
            "o_adj": {"o_adj": d.p_adj_more, "obj": 1 - d.p_adj_more},
            "obj": {"prep": d.p_prep, "punct": 1 - d.p_prep},
            "prep": {"p_det": 1.0},
            "p_det": {"place": 1.0},
            "place": {"punct": 1.0},
            "punct": {"eos": d.p_eos, "s_det": 1 - d.p_eos},
            "eos": {"s_det": 1.0},
        }

    def scene_prior(self) -> torch.Tensor:
        d = self.domain
        z = _zipf(len(SCENES), d.scene_skew)
        prior = torch.zeros(len(SCENES), dtype=torch.float64)
        prior[list(d.scene_order)] = z
        return prior

    def _emission_row(self, scene: int, role: str) -> torch.Tensor:
        d = self.domain
        index = {w: i for i, w in enumerate(self.words)}
        row = torch.zeros(self.V, dtype=torch.float64)
        cat = ROLE_CATEGORY[role]
        if cat == "eos":
            row[self.eos_id] = 1.0
        else:
            parts = []
            shared = SHARED_WORDS.get(cat, ())
            specific = SCENE_WORDS[SCENES[scene]].get(cat, ())
            if shared and specific:
                parts = [(shared, d.p_shared), (specific, 1 - d.p_shared)]
            else:
                parts = [(shared or specific, 1.0)]
            for words, mass in parts:
                w = _zipf(len(words), d.zipf) ** d.sharpness
                w = w / w.sum()
                for word, p in zip(words, w):
                    row[index[word]] += mass * p
        return (1 - d.noise) * row + d.noise / self.V

    def _build(self):
        d = self.domain
        S, nR = self.S, len(ROLES)
        rid = {r: i for i, r in enumerate(ROLES)}
        prior = self.scene_prior()
        T = torch.zeros(S, S, dtype=torch.float64)
        for c in range(len(SCENES)):
            for r, nxt in self._role_transitions().items():
                for r2, p in nxt.items():
                    if p == 0:
                        continue
                    # the scene is redrawn at sentence (w.p. p_change) and document (always) boundaries
                    redraw = 1.0 if r == "eos" else (d.p_change if r == "punct" and r2 == "s_det" else 0.0)
                    for c2 in range(len(SCENES)):
                        pc = redraw * prior[c2] + (1 - redraw) * (1.0 if c2 == c else 0.0)
                        T[c * nR + rid[r], c2 * nR + rid[r2]] += p * pc
        E = torch.stack([self._emission_row(c, r) for (c, r) in self.states])
        assert torch.allclose(T.sum(1), torch.ones(S, dtype=torch.float64))
        assert torch.allclose(E.sum(1), torch.ones(S, dtype=torch.float64))
        return T, E

    def _stationary(self) -> torch.Tensor:
        pi = torch.full((self.S,), 1.0 / self.S, dtype=torch.float64)
        for _ in range(20000):
            new = pi @ self.T
            if torch.abs(new - pi).max() < 1e-15:
                break
            pi = new
        return new / new.sum()

    # ------------------------------------------------------------------ exact quantities
    def _emit(self, x: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
        """Emission likelihoods ``(B, L, S)``; 1 at unobserved (masked) positions."""
        xi = x.clamp(0, self.V - 1)
        e = self.E.T[xi]  # (B, L, S)
        return torch.where(observed[..., None], e, torch.ones_like(e))

    def _forward(self, x, observed):
        """Scaled forward pass: predictive ``p(z_i | obs_<i)`` (B,L,S), filtered ``p(z_i | obs_<=i)`` and log p(obs)."""
        e = self._emit(x, observed)
        B, L, S = e.shape
        pred = torch.empty(B, L, S, dtype=torch.float64)
        filt = torch.empty(B, L, S, dtype=torch.float64)
        logp = torch.zeros(B, dtype=torch.float64)
        p = self.pi0.expand(B, S)
        for i in range(L):
            pred[:, i] = p
            a = p * e[:, i]
            c = a.sum(-1)
            logp += torch.log(c)
            a = a / c[:, None]
            filt[:, i] = a
            p = a @ self.T
        return pred, filt, logp

    def log_marginal(self, x: torch.Tensor, observed: torch.Tensor | None = None) -> torch.Tensor:
        """``log pi(x_O)`` of the observed positions ``O`` (all if ``observed`` is None). Shape (B,)."""
        x = torch.as_tensor(x)
        observed = torch.ones_like(x, dtype=torch.bool) if observed is None else observed
        return self._forward(x, observed)[2]

    def predictive(self, x: torch.Tensor, observed: torch.Tensor | None = None) -> torch.Tensor:
        """``log pi(x_i = v | visible tokens at positions < i)`` ``(B, L, V_hmm)`` (the oracle AR)."""
        observed = torch.ones_like(x, dtype=torch.bool) if observed is None else observed
        pred, _, _ = self._forward(x, observed)
        return torch.log(pred @ self.E)

    def posterior(self, x: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
        """``log pi(x_i = v | visible tokens at positions != i)`` ``(B, L, V_hmm)`` (the oracle denoiser)."""
        e = self._emit(x, observed)
        pred, _, _ = self._forward(x, observed)
        B, L, S = e.shape
        beta = torch.ones(B, L, S, dtype=torch.float64)
        b = torch.ones(B, S, dtype=torch.float64)
        for i in range(L - 2, -1, -1):
            b = (e[:, i + 1] * b) @ self.T.T
            b = b / b.sum(-1, keepdim=True)
            beta[:, i] = b
        post = pred * beta
        post = post / post.sum(-1, keepdim=True)
        return torch.log(post @ self.E)

    def sample(self, n: int, L: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``n`` exact samples of length ``L`` from the stationary stream. Shape (n, L) int64."""
        cT, cE = self.T.cumsum(1), self.E.cumsum(1)
        cT[:, -1] = cE[:, -1] = 1.0 + 1e-12
        u = torch.rand(n, L, 2, generator=generator, dtype=torch.float64)
        z = torch.searchsorted(self.pi0.cumsum(0).expand(n, -1).contiguous(), u[:, 0, :1].contiguous()).squeeze(1)
        z = z.clamp(max=self.S - 1)
        x = torch.empty(n, L, dtype=torch.int64)
        for i in range(L):
            if i > 0:
                z = torch.searchsorted(cT[z], u[:, i, :1].contiguous()).squeeze(1).clamp(max=self.S - 1)
            x[:, i] = torch.searchsorted(cE[z], u[:, i, 1:].contiguous()).squeeze(1).clamp(max=self.V - 1)
        return x

    def entropy_rate(self, L: int, n: int = 4096, seed: int = 0) -> tuple[float, float]:
        """Per-token entropy ``H(X_1..X_L)/L`` in nats by Monte Carlo on exact log-probabilities: (mean, s.e.)."""
        g = torch.Generator().manual_seed(seed)
        x = self.sample(n, L, g)
        nll = -self.log_marginal(x) / L
        return nll.mean().item(), (nll.std() / math.sqrt(n)).item()


def split_seed(seed: int, domain: str, split: str) -> int:
    """Deterministic generator seed for ``(seed, domain, split)``: corpora are pure functions of these."""
    return zlib.crc32(f"{seed}/{domain}/{split}".encode())


def generate_corpus(domain: str, split: str, n_seqs: int, seq_len: int, seed: int = 0) -> list[str]:
    """``n_seqs`` stationary windows of ``seq_len`` words as text lines (``<eos>`` marks document ends)."""
    hmm = HMM(domain)
    g = torch.Generator().manual_seed(split_seed(seed, domain, split))
    tokens = hmm.words + [EOS_WORD]
    lines = []
    chunk = 4096
    for start in range(0, n_seqs, chunk):
        x = hmm.sample(min(chunk, n_seqs - start), seq_len, g)
        lines += [" ".join(tokens[i] for i in row) for row in x.tolist()]
    return lines


# ---------------------------------------------------------------------- oracles with model interfaces
class _OracleBase:
    """Maps between the tokenizer's ids (words, <eos>, <bos>, <mask>) and the HMM's symbols."""

    def __init__(self, hmm: HMM, tokenizer):
        if tokenizer.vocab_size != hmm.V + 2 or tokenizer.eos_id != hmm.eos_id:
            raise ValueError("tokenizer does not match the toy world (expected words + <eos>, <bos>, <mask>)")
        self.hmm = hmm
        self.vocab_size = tokenizer.vocab_size
        self.mask_id = tokenizer.mask_id
        self.bos_id = tokenizer.bos_id

    def _pad_vocab(self, logp: torch.Tensor) -> torch.Tensor:
        """Append -inf columns for <bos> and <mask>: ``(B, L, V_hmm)`` -> ``(B, L, V)`` float32."""
        pad = torch.full((*logp.shape[:-1], self.vocab_size - self.hmm.V), -math.inf, dtype=logp.dtype)
        return torch.cat([logp, pad], dim=-1).float()


class OracleDenoiser(_OracleBase):
    """The best possible masked-diffusion denoiser under the independence assumption:
    ``p(x0_i | xt) = pi(x0_i | unmasked tokens of xt)``, with SUBS carry-over at unmasked positions."""

    def logp_x0(self, xt: torch.Tensor, sigma=None) -> torch.Tensor:
        xt = xt.cpu()
        observed = xt != self.mask_id
        logp = self._pad_vocab(self.hmm.posterior(xt, observed))
        onehot = torch.full_like(logp, -math.inf).scatter_(-1, xt.clamp(max=self.vocab_size - 1)[..., None], 0.0)
        return torch.where(observed[..., None], onehot, logp)


class OracleAR(_OracleBase):
    """The exact autoregressive model: ``logp_next(ctx)[b, i] = log pi(x_i | visible ctx_<i)``.

    Mask tokens in the context are treated as missing observations, so this oracle is also the
    exact ``masked``-context proxy."""

    def logp_next(self, ctx: torch.Tensor) -> torch.Tensor:
        ctx = ctx.cpu()
        observed = ctx != self.mask_id
        return self._pad_vocab(self.hmm.predictive(ctx, observed))

    def token_logp(self, ctx: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """``log pi(tokens[n, m, i] | visible ctx[n, :i])`` ``(N, M, L)`` (same interface as ``ARModel``)."""
        logp = self.logp_next(ctx)
        tokens = tokens.cpu().clamp(max=self.vocab_size - 1)
        return logp[:, None].expand(-1, tokens.shape[1], -1, -1).gather(-1, tokens[..., None]).squeeze(-1)

    def log_joint(self, x: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
        """Exact ``log pi(x_O)`` of the visible positions ``O`` per sequence ``(N,)`` (for ``ar_context: exact``)."""
        return self.hmm.log_marginal(x.cpu().clamp(max=self.hmm.V - 1), observed.cpu()).float()

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Exact ``log pi(x)`` per sequence (B,)."""
        return self.hmm.log_marginal(x.cpu()).float()

    def sample(self, n: int, L: int, generator=None, **_) -> torch.Tensor:
        return self.hmm.sample(n, L, generator)
