"""The names of the AR contexts and of the selection rules (:mod:`unie.energy.energies` reads them): here, without
torch, because the workflow's rule files order the selection table's rows by them as they are read
(:func:`unie.dllm.rows.selection_rows`)."""

from __future__ import annotations

AR_CONTEXTS = ("teacher_forced", "teacher_forced_carry_over", "masked", "exact")
# How a candidate is chosen from its energies (Algorithms 2 and 3 share it): ``argmin`` (the paper's text),
# ``resample`` (self-normalised importance sampling: one draw from softmax(-E/τ), EDLM's and the released DLM
# code's rule), ``proxy_rerank`` (the released DLLM code's ``adaption`` rule: the candidate whose revealed tokens
# the proxy, teacher-forced on the whole candidate, finds most likely; no diffusion term, whatever the energy)
SELECTIONS = ("argmin", "resample", "proxy_rerank")


def estimator_is_reference(energy: str, ar_context: str | None = None) -> bool:
    """Whether Table 1's estimator for an energy row is, in expectation, a reference row's own: Ind-E with
    ``teacher_forced_carry_over`` (EDLM-CoAR) estimates the AR proxy's NLL of ``x0`` (:func:`estimator_is_bound`), the
    AR reference row's likelihood, so it is compared like that row (left out of the best), not as a method."""
    return energy == "ind" and ar_context == "teacher_forced_carry_over"


def estimator_is_bound(energy: str, ar_context: str | None = None) -> tuple[bool, str]:
    """Whether Table 1's estimator for an energy row is, in expectation, an upper bound on the model's perplexity
    (so that it can never fall below the data's own), and why.

    * Ind-E with ``teacher_forced_carry_over`` (EDLM-CoAR): the corrected conditional is
      ``Σ_{i∈M_t} log p_AR(x0_i | x0_<i)`` (:mod:`unie.energy.corrected_nelbo`); the NELBO's weight ``w(t)`` integrates each masked position's
      term to 1, so the estimate's expectation is the AR's own NLL of ``x0``, the cross-entropy of a normalised
      model: a bound.
    * Uni-E (any proxy context): not a bound; the tokens revealed between ``t`` and ``s`` are never scored (the
      brute-force partition check: the mass over ``x0`` is ``V^|D|``, not 1).
    * EDLM's energy network (``ebm``): not a bound; the one-sample plug-in ``log F ≈ -E_phi(x̂0, xt)`` is biased low
      (``E[log Ẑ] <= log Z``), and so is the NLL.
    * Any other energy or context: not shown to be a bound, so not treated as one."""
    if energy == "ind" and ar_context == "teacher_forced_carry_over":
        return True, "in expectation the AR's own NLL (a normalised model)"
    if energy == "uni":
        return False, "Uni-E's closed-form log F leaves the tokens revealed between t and s unscored"
    if energy == "ebm":
        return False, "EDLM's one-sample plug-in for log F is biased low"
    return False, f"energy {energy!r} with context {ar_context!r} is not shown to be a bound"
