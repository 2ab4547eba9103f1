"""The energies of Uni-E: Ind-E (Eq. id_energy), Inv-E (Eq. inv_energy) and Uni-E (Eq. uni_ebm), plus
EDLM's learned energy network (``ebm``, EDLM-NCE).

One sign everywhere: ``p(x0 | xt) ∝ p_theta(x0 | xt) · exp(-E)``.  Lower energy = preferred; the
importance log-weight is ``-E / temperature``; a variable named ``energy`` never holds a log-probability.

Shapes: ``xt`` ``(B, L)``; candidates ``x0`` and intermediate states ``xs`` ``(B, K, L)``;
``logp_dlm`` ``(B, L, V)`` = ``log p_theta(x0_i = v | xt)`` (SUBS); energies ``(B, K)``.

Position sets (explicit boolean masks, never -1e6 penalties): ``M_t`` = masked in ``xt``;
``M_s ⊆ M_t`` = still masked in ``xs``; ``D = M_t \\ M_s`` = revealed between t and s.

* ``log p_theta(x0 | xt) = Σ_{M_t} logp_dlm_i(x0_i)``; ``log p_theta(xs | xt) = Σ_D logp_dlm_i(xs_i)``
  (the reverse-kernel factors (t-s)/t and s/t are the same for every candidate and are dropped).
* The proxy's conditionals follow the paper's identity ``p_AR(a | b) = p_AR(a) / p_AR(b)`` (``b`` a partial
  state, ``p_AR(b)`` the AR's marginal of its visible tokens).  How the proxy reads a partially masked
  state is the option ``ar_context`` (``docs/decisions.md``):

  ==============================  ==================================================================
  ``ar_context``                  ``log p_AR(x0|xt)`` / ``log p_AR(xs|xt)`` / ``log p_AR(x0|xs)``
  ==============================  ==================================================================
  ``teacher_forced`` (default)    ``TF(x0) - A(xt)`` / ``A(xs) - A(xt)`` / ``TF(x0) - A(xs)``, with
                                  ``TF(x0) = Σ_{i=1..L} log p_AR(x0_i | x0_<i)`` (the **whole** candidate:
                                  visible positions' conditionals depend on candidate tokens to their
                                  left, the paper's "car/cat" case) and ``A(y) = log p_AR(y)``
  ``teacher_forced_carry_over``   ``Σ_{M_t}`` / ``Σ_D`` / ``Σ_{M_s}`` of ``log p_AR(x0_i | x0_<i)``: EDLM's
                                  "coAR" (the released code): only masked positions count
  ``masked``                      ``Σ_{M_t}`` / ``Σ_D log p_AR(·_i | xt_<i)``, ``Σ_{M_s} log p_AR(x0_i | xs_<i)``:
                                  the state itself is the context (a mask-aware proxy)
  ``exact``                       ``log pi(x0) - log pi(xt_vis)`` etc.: the toy world's true conditionals
  ==============================  ==================================================================

  **The marginals ``A(xt)``, ``A(xs)`` under teacher forcing.**  A learned AR cannot compute the marginal of a
  partially visible sequence, and no energy needs it: ``A(xs)`` enters Inv-E and Uni-E once with each
  sign and cancels exactly, and ``A(xt)`` is the same for every candidate of a row (it shifts all ``K``
  energies of the row by one constant, which changes neither ``argmin`` nor ``softmax(-E)``).  The energies
  therefore take ``A(xt) = A(xs) = 0``: they are exact up to that per-row constant (a test holds them
  against the ``exact`` context).  An estimator that needs absolute values (Table 1, the partition check)
  cannot use ``teacher_forced`` and says so; Table 1's teacher-forced rows use the carry-over reading,
  which is the plug-in ``A(y) ≈ Σ_{i visible in y} log p_AR(x0_i | x0_<i)`` along the data sequence.

  With ``teacher_forced`` or ``exact`` (or any proxy obeying the chain rule) Inv-E collapses to
  ``log p_theta(xs|xt)`` + const and Uni-E to ``E_ind + Σ_D logp_dlm`` + const; the carry-over reading
  drops candidate-dependent terms (the visible positions' conditionals); only ``masked`` makes the
  invariance term non-trivial.  Tests state these identities.
* ``ebm``: EDLM's energy network ``E_phi(x0, xt)`` (``docs/baselines.md``, EDLM), trained by NCE with
  ``p_theta`` and the AR frozen (:mod:`unie.energy.nce`, ``train: energy_net``); it needs no AR context.
"""

from __future__ import annotations

import torch

from ..core.gumbel import gumbel_argmax_rows
from ..core.registry import ENERGIES

from .names import AR_CONTEXTS, SELECTIONS  # noqa: F401  (the AR contexts and selection rules: defined there)


def register_energy(name: str, scorer: str):
    """Register an energy ``fn(xt, x0, xs, logp_dlm, terms, mask_id) -> (B, K)``; ``scorer`` says what
    ``terms`` is: ``proxy`` (an :class:`ARTerms` over an AR proxy) or ``ebm`` (an energy network)."""

    def deco(fn):
        fn.scorer = scorer
        ENERGIES.add(name, fn)
        return fn

    return deco


def position_sets(xt: torch.Tensor, xs: torch.Tensor, mask_id: int):
    """``(M_t, M_s, D)``, each ``(B, K, L)`` bool, from ``xt`` ``(B, L)`` and ``xs`` ``(B, K, L)``."""
    M_t = (xt == mask_id)[:, None, :].expand_as(xs)
    M_s = (xs == mask_id) & M_t
    if ((xs == mask_id) & ~M_t).any():
        raise ValueError("xs masks a position that is unmasked in xt (M_s must be a subset of M_t)")
    return M_t, M_s, M_t & ~M_s


def masked_sum(values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``Σ_{i in positions} values_i`` over the last axis, exactly excluding other positions (no 0·inf)."""
    return torch.where(positions, values, torch.zeros_like(values)).sum(-1)


def gather_dlm(logp_dlm: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``logp_dlm[b, i, tokens[b, k, i]]`` ``(B, K, L)`` from ``logp_dlm`` ``(B, L, V)``."""
    K = tokens.shape[1]
    return logp_dlm[:, None].expand(-1, K, -1, -1).gather(-1, tokens[..., None].clamp(min=0)).squeeze(-1)


def logp_dlm_x0(logp_dlm, xt, x0, mask_id) -> torch.Tensor:
    """``log p_theta(x0 | xt) = Σ_{M_t} logp_dlm_i(x0_i)`` ``(B, K)``."""
    M_t = (xt == mask_id)[:, None, :].expand_as(x0)
    return masked_sum(gather_dlm(logp_dlm, x0), M_t)


def logp_dlm_xs(logp_dlm, xt, xs, mask_id) -> torch.Tensor:
    """``log p_theta(xs | xt) = Σ_D logp_dlm_i(xs_i)`` ``(B, K)``."""
    _, _, D = position_sets(xt, xs, mask_id)
    return masked_sum(gather_dlm(logp_dlm, torch.where(D, xs, torch.zeros_like(xs))), D)


def _flat(x: torch.Tensor) -> torch.Tensor:
    """``(B, K, L) -> (B*K, L)``; undone by ``.view(B, K, ...)`` with the same B, K (batch-major)."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


class ARTerms:
    """The proxy's three conditionals for one ``ar_context``, each computed once, lazily, with all
    ``B*K`` candidates in one batched call.

    ``proxy`` offers ``token_logp(ctx (N, L), tokens (N, M, L)) -> (N, M, L)`` (``ARModel``, ``OracleAR``)
    and, for ``exact``, ``log_joint(x (N, L), observed (N, L)) -> (N,)`` (``OracleAR`` only)."""

    def __init__(self, proxy, ar_context: str, xt: torch.Tensor, x0: torch.Tensor, xs: torch.Tensor, mask_id: int):
        if ar_context not in AR_CONTEXTS:
            raise ValueError(f"unknown ar_context {ar_context!r}; known: {', '.join(AR_CONTEXTS)}")
        if ar_context == "exact" and not hasattr(proxy, "log_joint"):
            raise ValueError("ar_context 'exact' needs the toy world's exact proxy (OracleAR)")
        self.proxy, self.ctx, self.mask_id = proxy, ar_context, mask_id
        self.xt, self.x0, self.xs = xt, x0, xs
        self.B, self.K, self.L = x0.shape
        self.M_t, self.M_s, self.D = position_sets(xt, xs, mask_id)
        self._memo: dict = {}

    def _memo_get(self, key, fn):
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]

    # -- per-position tables ------------------------------------------------------------------
    def _tf(self):  # log p_AR(x0_i | x0_<i) of each candidate, (B, K, L): one pass per candidate
        def f():
            x0 = _flat(self.x0)
            return self.proxy.token_logp(x0, x0[:, None]).view(self.B, self.K, self.L).to(self.x0.device)

        return self._memo_get("tf", f)

    def _from_xt(self):  # log p_AR(x0_i | xt_<i) for every candidate (B, K, L): one pass on xt
        return self._memo_get("xt", lambda: self.proxy.token_logp(self.xt, self.x0).to(self.x0.device))

    def _from_xs(self):  # log p_AR(x0_i | xs_<i) of each candidate against its own xs (B, K, L)
        def f():
            out = self.proxy.token_logp(_flat(self.xs), _flat(self.x0)[:, None])
            return out.view(self.B, self.K, self.L).to(self.x0.device)

        return self._memo_get("xs", f)

    def log_marginal(self, which: str) -> torch.Tensor:
        """``log p_AR`` of the visible tokens of ``x0``, ``xs`` or ``xt`` ``(B, K)`` (``teacher_forced``, ``exact``).

        ``teacher_forced``: ``x0`` is scored whole by teacher forcing; the marginals of ``xs`` and ``xt`` are
        not computable and are taken as 0 (they cancel, or are constant per row: module doc)."""

        def f():
            if self.ctx == "teacher_forced":
                if which == "x0":
                    return self._tf().sum(-1)
                return torch.zeros(self.B, self.K, device=self.x0.device)
            if which == "x0":
                x = _flat(self.x0)
                return self.proxy.log_joint(x, torch.ones_like(x, dtype=torch.bool)).view(self.B, self.K)
            if which == "xs":
                x = _flat(self.xs)
                return self.proxy.log_joint(x, x != self.mask_id).view(self.B, self.K)
            return self.proxy.log_joint(self.xt, self.xt != self.mask_id)[:, None].expand(self.B, self.K)

        return self._memo_get("joint_" + which, lambda: f().to(self.x0.device))

    # -- the three conditionals (B, K) ----------------------------------------------------------
    def x0_given_xt(self) -> torch.Tensor:
        """``log p_AR(x0 | xt)``."""
        if self.ctx == "teacher_forced_carry_over":
            return masked_sum(self._tf(), self.M_t)
        if self.ctx == "masked":
            return masked_sum(self._from_xt(), self.M_t)
        return self.log_marginal("x0") - self.log_marginal("xt")

    def xs_given_xt(self) -> torch.Tensor:
        """``log p_AR(xs | xt)`` (the tokens revealed in ``D``; ``xs = x0`` there)."""
        if self.ctx == "teacher_forced_carry_over":
            return masked_sum(self._tf(), self.D)
        if self.ctx == "masked":
            return masked_sum(self._from_xt(), self.D)
        return self.log_marginal("xs") - self.log_marginal("xt")

    def x0_given_xs(self) -> torch.Tensor:
        """``log p_AR(x0 | xs)``."""
        if self.ctx == "teacher_forced_carry_over":
            return masked_sum(self._tf(), self.M_s)
        if self.ctx == "masked":
            return masked_sum(self._from_xs(), self.M_s)
        return self.log_marginal("x0") - self.log_marginal("xs")


def _check_consistent(xt, x0, xs, mask_id):
    """Candidates carry ``xt``'s unmasked tokens and ``xs`` reveals ``x0``'s tokens (exact carry-over)."""
    keep = (xt != mask_id)[:, None, :].expand_as(x0)
    if (x0[keep] != xt[:, None, :].expand_as(x0)[keep]).any():
        raise ValueError("a candidate x0 changes a token that is unmasked in xt")
    rev = xs != mask_id
    if (xs[rev] != x0[rev]).any():
        raise ValueError("xs reveals a token that differs from its candidate x0")


@register_energy("ind", scorer="proxy")
def ind_energy(xt, x0, xs, logp_dlm, ar: ARTerms, mask_id: int) -> torch.Tensor:
    """Ind-E (EDLM, Eq. id_energy): ``log p_theta(x0|xt) - log p_AR(x0|xt)``. ``(B, K)``."""
    return logp_dlm_x0(logp_dlm, xt, x0, mask_id) - ar.x0_given_xt()


@register_energy("inv", scorer="proxy")
def inv_energy(xt, x0, xs, logp_dlm, ar: ARTerms, mask_id: int) -> torch.Tensor:
    """Inv-E (Eq. inv_energy): ``[log p_theta(xs|xt) - log p_AR(xs|xt)] + [log p_AR(x0|xt) - log p_AR(x0|xs)]``."""
    return (logp_dlm_xs(logp_dlm, xt, xs, mask_id) - ar.xs_given_xt()) + (ar.x0_given_xt() - ar.x0_given_xs())


@register_energy("uni", scorer="proxy")
def uni_energy(xt, x0, xs, logp_dlm, ar: ARTerms, mask_id: int) -> torch.Tensor:
    """Uni-E (Eq. uni_ebm): ``[log p_theta(xs|xt) - log p_AR(xs|xt)] + [log p_theta(x0|xt) - log p_AR(x0|xs)]``."""
    return (logp_dlm_xs(logp_dlm, xt, xs, mask_id) - ar.xs_given_xt()) + (
        logp_dlm_x0(logp_dlm, xt, x0, mask_id) - ar.x0_given_xs()
    )


@register_energy("ebm", scorer="ebm")
def ebm_energy(xt, x0, xs, logp_dlm, ebm, mask_id: int) -> torch.Tensor:
    """EDLM-NCE: the learned energy ``E_phi(x0, xt)`` ``(B, K)`` (``ebm``: an energy network's scorer)."""
    return ebm.energy(xt, x0)


def log_partition(name: str, xt, x0, xs, logp_dlm, ar: ARTerms, mask_id: int) -> torch.Tensor:
    """The paper's closed-form ``log F`` ``(B, K)``: Uni-E ``log p_AR(xs|xt) - log p_theta(xs|xt)``
    (Eq. partition_calculation); Ind-E is taken as self-normalised (``log F = 0``, EDLM's choice).

    Needs the proxy's marginals, so not for ``teacher_forced`` (module doc)."""
    if ar.ctx == "teacher_forced":
        raise ValueError(
            "log F needs log p_AR(xs) and log p_AR(xt), which teacher forcing cannot compute; use "
            "ar_context 'teacher_forced_carry_over' (EDLM's CoAR estimator), 'masked' or 'exact'"
        )
    if name == "uni":
        return ar.xs_given_xt() - logp_dlm_xs(logp_dlm, xt, xs, mask_id)
    if name == "ind":
        return torch.zeros(x0.shape[:2], device=x0.device)
    raise ValueError(f"no closed-form partition for energy {name!r}")


def energy(
    name: str, xt, x0, xs, logp_dlm, scorer, ar_context: str | None, mask_id: int, check: bool = True
) -> torch.Tensor:
    """Energies ``(B, K)`` of candidates ``x0`` / states ``xs`` ``(B, K, L)`` given ``xt`` ``(B, L)``.

    ``scorer``: the AR proxy (read with ``ar_context``) for ``ind``/``inv``/``uni``; the energy network's
    scorer for ``ebm``."""
    if x0.dim() != 3 or xs.shape != x0.shape or xt.shape != (x0.shape[0], x0.shape[2]):
        raise ValueError(
            f"shapes: xt {tuple(xt.shape)}, x0 {tuple(x0.shape)}, xs {tuple(xs.shape)}; "
            "expected (B, L), (B, K, L), (B, K, L)"
        )
    if check:
        _check_consistent(xt, x0, xs, mask_id)
    fn = ENERGIES[name]
    terms = ARTerms(scorer, ar_context, xt, x0, xs, mask_id) if fn.scorer == "proxy" else scorer
    return fn(xt, x0, xs, logp_dlm, terms, mask_id)


def log_importance_weights(energy: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Self-normalised importance log-weights ``-E / temperature`` (normalised over the candidate axis)."""
    return torch.log_softmax(-energy / temperature, dim=-1)


def rerank_energy(xt, x0, xs, scorer, mask_id: int) -> torch.Tensor:
    """``proxy_rerank``'s score as an energy ``(B, K)``: ``-Σ_D log p_AR(x0_i | x0_<i)``, the proxy's teacher-forced
    log-probability of the tokens each candidate reveals (``D = M_t \\ M_s``), the whole candidate as context:
    the released DLLM code's ``adaption`` rule (``docs/baselines.md``), its argmax as an argmin."""
    return -ARTerms(scorer, "teacher_forced_carry_over", xt, x0, xs, mask_id).xs_given_xt()


def selection_energy(
    selection: str, name: str, xt, x0, xs, logp_dlm, scorer, ar_context: str | None, mask_id: int, check: bool = True
) -> torch.Tensor:
    """The ``(B, K)`` values that ``selection`` chooses by: the energy ``name`` (:func:`energy`) for ``argmin`` and
    ``resample``, :func:`rerank_energy` for ``proxy_rerank`` (which reads only the proxy)."""
    if selection not in SELECTIONS:
        raise ValueError(f"unknown selection {selection!r}; known: {', '.join(SELECTIONS)}")
    if selection == "proxy_rerank":
        if ENERGIES[name].scorer != "proxy":
            raise ValueError(f"selection 'proxy_rerank' reads an AR proxy; energy {name!r} has none")
        if check:
            _check_consistent(xt, x0, xs, mask_id)
        return rerank_energy(xt, x0, xs, scorer, mask_id)
    return energy(name, xt, x0, xs, logp_dlm, scorer, ar_context, mask_id, check=check)


def select(energy: torch.Tensor, how: str = "argmin", temperature: float = 1.0, generator=None) -> torch.Tensor:
    """Index of the chosen candidate per row ``(B,)`` from energies ``(B, K)``: ``argmin`` (the paper; also
    ``proxy_rerank``, whose energies are :func:`rerank_energy`) or ``resample``: one draw from ``softmax(-E/τ)``.
    ``generator``: one ``torch.Generator``, or a list of one per row (row ``b`` draws from ``generator[b]``, so its
    choice is the same in any batch)."""
    if how in ("argmin", "proxy_rerank"):
        return energy.argmin(-1)
    if how == "resample":
        return gumbel_argmax_rows(log_importance_weights(energy, temperature), generator).to(energy.device)
    raise ValueError(f"unknown selection {how!r}; known: {', '.join(SELECTIONS)}")
