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
