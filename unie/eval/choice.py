"""Generative scoring of a lettered multiple-choice answer (the paper profile's ``mmlu_gen`` and ``hellaswag_gen``).

The model reads the question and its options ``A. ...`` to ``D. ...`` and writes the letter; a log-likelihood
score (lm-eval's ``multiple_choice``) would never see the decoder, so Table 3's decoder rows could not differ there.

:func:`first_letter` normalises a completion as lm-eval's ``mmlu_generative`` filter does (its first line,
surrounding whitespace removed), also drops leading punctuation and markup (``(B)``, ``**B**``, ``"B"``), and reads
the first letter when it stands alone (followed by the end or a non-letter: ``B``, ``B.``, ``b)``, ``B. Paris``;
not ``Because``), case-insensitively as lm-eval's ``ignore_case``.  :func:`letter_match` is 1.0 when that letter is
the document's ``answer``.  Where lm-eval's ``exact_match`` (``ignore_punctuation``) needs the whole first line to
be the letter, this reads the first letter only, as LLaDA's own generative protocol (OpenCompass's
``first_option_postprocess``) finds the option; unlike that function it never searches further into the text.
"""

from __future__ import annotations

import re

LETTERS = "ABCD"
_LEADING_LETTER = re.compile(r"^[^A-Za-z0-9]*([A-Za-z])(?![A-Za-z])")


def first_letter(completion: str, letters: str = LETTERS) -> str | None:
    """The option letter a completion answers (upper case), or None when its first line does not start with one
    of ``letters`` standing alone (after leading punctuation)."""
    line = completion.strip().split("\n", 1)[0].strip()
    m = _LEADING_LETTER.match(line)
    if m is None:
        return None
    letter = m.group(1).upper()
    return letter if letter in letters else None


def letter_match(doc: dict, completion: str) -> float:
    """1.0 when :func:`first_letter` of ``completion`` is ``doc["answer"]`` (a letter), else 0.0."""
    return float(first_letter(completion) == str(doc["answer"]).strip().upper())
