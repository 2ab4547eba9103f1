"""The errors that are the input's fault, as one family.

A bad config, a missing or damaged file, a checkpoint in use, a NaN loss, an unreachable hub, a rank that stopped
on one of these: each such error class derives from :class:`InputError` where it is defined (beside what it
checks), so a rule's job (:func:`unie.pipeline.rule.job`) and a rank of a data-parallel job
(:func:`unie.core.ranks.reporting_rank_errors`) tell them from bugs by one ``isinstance`` and report them as one
line, the traceback kept in the log.
"""

from __future__ import annotations


class InputError(Exception):
    """Base of every error that names a fault of the input (a key, a file, a checkpoint) and its fix."""


# the input errors of the standard library a job also reports in one line
OPERATOR_ERRORS: tuple[type[BaseException], ...] = (InputError, FileNotFoundError, PermissionError)
