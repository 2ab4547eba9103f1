"""Detokenisers of the zero-shot perplexity protocol (pure ``str -> str`` functions).

Source: MDLM's zero-shot perplexity protocol (``docs/baselines.md``, its table of corpora), i.e. MDLM's
``dataloader.py`` (``wt_detokenizer``, ``ptb_detokenizer``, ``lm1b_detokenizer``, ``lambada_detokenizer``,
``scientific_papers_detokenizer``; the same functions are used by Duo and BD3-LM).  Each corpus ships
pre-tokenised text (spaces around punctuation, ``@-@`` number separators, ``N`` for numbers, ...); the
detokeniser is applied to every document *before* GPT-2 tokenisation so that the byte-level BPE sees
natural text.  The rewrite rules and their order follow MDLM exactly, quirks included (noted inline),
because the zero-shot numbers the paper compares against were computed with them.

``DETOKENIZERS`` maps the names used in ``config[data][hf][domain][split][detokenizer]`` to functions.
"""

from __future__ import annotations

import re
from typing import Callable

# A rule is (pattern, replacement, is_regex).  Plain rules use str.replace (all non-overlapping
# occurrences, left to right); regex rules use re.sub.
Rule = tuple[str, str, bool]


def _apply(rules: tuple[Rule, ...], text: str) -> str:
    for pattern, repl, is_regex in rules:
        text = re.sub(pattern, repl, text) if is_regex else text.replace(pattern, repl)
    return text


_WIKITEXT_RULES: tuple[Rule, ...] = (
    # possessive of plural nouns: "players ' union" -> "players' union"
    ("s '", "s'", False),
    # MDLM quirk: the slashes are literal characters of the pattern, so this only rewrites the literal
    # text "/' <digit>/" into the literal text "/'[0-9]/"; a no-op on real WikiText. Kept for fidelity.
    (r"/' [0-9]/", r"/'[0-9]/", True),
    # number separators: "1 @,@ 000 @.@ 5" -> "1,000.5", "guest @-@ starring" -> "guest-starring"
    (" @-@ ", "-", False),
    (" @,@ ", ",", False),
    (" @.@ ", ".", False),
    # punctuation: drop the space before it
    (" : ", ": ", False),
    (" ; ", "; ", False),
    (" . ", ". ", False),
    (" ! ", "! ", False),
    (" ? ", "? ", False),
    (" , ", ", ", False),
    # brackets and quotes: strip the spaces just inside each (non-nested) pair
    (r"\(\s*([^\)]*?)\s*\)", r"(\1)", True),
    (r"\[\s*([^\]]*?)\s*\]", r"[\1]", True),
    (r"{\s*([^}]*?)\s*}", r"{\1}", True),
    (r"\"\s*([^\"]*?)\s*\"", r'"\1"', True),
    (r"'\s*([^']*?)\s*'", r"'\1'", True),
    # section headings "= = Career = =" -> "== Career =="
    ("= = = =", "====", False),
    ("= = =", "===", False),
    ("= =", "==", False),
    # degree sign
    (" \N{DEGREE SIGN} ", "\N{DEGREE SIGN}", False),
    # spaces around line breaks
    (" \n", "\n", False),
    ("\n ", "\n", False),
    # the number placeholder, then contractions
    (" N ", " 1 ", False),
    (" 's", "'s", False),
)


def wikitext_detokenizer(text: str) -> str:
    """WikiText-2/103 raw text -> natural text (MDLM ``wt_detokenizer``).

    Undoes `` @-@ ``, `` @,@ ``, `` @.@ ``, the spaces before ``: ; . ! ? ,``, the spaces inside
    brackets/quotes, ``= = =`` headings, `` N `` -> `` 1 `` and `` 's`` -> ``'s``."""
    return _apply(_WIKITEXT_RULES, text)


def ptb_detokenizer(text: str) -> str:
    """Penn Treebank (``ptb_text_only``, field ``sentence``) -> natural text (MDLM ``ptb_detokenizer``).

    `` 's`` -> ``'s``, ``s ' `` -> ``s' ``, `` n't`` -> ``n't``, `` \\n `` -> ``\\n``, ``\\/`` -> ``/``,
    `` N `` -> `` 1 `` (repeated 10 times, so runs of adjacent ``N`` are all replaced; ``str.replace`` does not
    see overlapping matches), ``$ 1`` -> ``$1``, ``# 1`` -> ``#1``, ``<unk>`` -> ``?``."""
    text = text.replace(" 's", "'s")
    text = text.replace("s ' ", "s' ")
    text = text.replace(" n't", "n't")
    text = text.replace(" \n ", "\n")
    text = text.replace("\\/", "/")
    for _ in range(10):
        text = text.replace(" N ", " 1 ")
    text = text.replace("$ 1", "$1")
    text = text.replace("# 1", "#1")
    return text.replace("<unk>", "?")


_LM1B_RULES: tuple[Rule, ...] = (
    # URLs split by the tokenizer
    ("http : / / ", "http://", False),
    ("https : / / ", "https://", False),
    # clitics: " 's" / " 're" -> "'s" / "'re"
    (r" \'(\w+)", r"'\1", True),
    # sentence-final and inner full stops after a word
    (r" (\w+) \. ", r" \1. ", True),
    (r" (\w+) \.$", r" \1.", True),
    (" ? ", "? ", False),
    (r" \?$", "?", True),
    (" ! ", "! ", False),
    (r" \!$", "!", True),
    (" , ", ", ", False),
    (" : ", ": ", False),
    (" ; ", "; ", False),
    (" / ", "/", False),
    # quotes and brackets (inner spaces, exactly one on each side)
    (r"\" ([^\"]+) \"", r'"\1"', True),
    (r"\' ([^\']+) \'", r"'\1'", True),
    (r"\( ([^\(\)]+) \)", r"(\1)", True),
    (r"\[ ([^\[\]]+) \]", r"[\1]", True),
    # currency signs
    ("$ ", "$", False),
    ("\N{POUND SIGN} ", "\N{POUND SIGN}", False),
)


def lm1b_detokenizer(text: str) -> str:
    """One Billion Word benchmark sentence -> natural text (MDLM ``lm1b_detokenizer``).

    Rejoins ``http : / /`` URLs, `` 'x`` clitics, and removes the spaces before ``. ? ! , : ;``, around
    ``/``, inside quotes and brackets, and after ``$`` and ``£``."""
    return _apply(_LM1B_RULES, text)


def lambada_detokenizer(text: str) -> str:
    """LAMBADA (OpenAI ``lambada_test.jsonl``) passage (MDLM ``lambada_detokenizer``).

    Curly double quotes become straight quotes, then the stripped text is prefixed with ``"\\n"``."""
    text = text.replace("\N{LEFT DOUBLE QUOTATION MARK}", '"').replace("\N{RIGHT DOUBLE QUOTATION MARK}", '"')
    return "\n" + text.strip()


def scientific_papers_detokenizer(text: str) -> str:
    """``scientific_papers`` (arXiv / PubMed, field ``article``): the WikiText detokeniser followed by the
    LM1B detokeniser (MDLM ``scientific_papers_detokenizer``)."""
    return lm1b_detokenizer(wikitext_detokenizer(text))


DETOKENIZERS: dict[str, Callable[[str], str]] = {
    "ptb": ptb_detokenizer,
    "wikitext": wikitext_detokenizer,
    "lm1b": lm1b_detokenizer,
    "lambada": lambada_detokenizer,
    "scientific_papers": scientific_papers_detokenizer,
}


def get_detokenizer(name: str | None) -> Callable[[str], str] | None:
    """The detokeniser registered under ``name`` (``None`` -> ``None``); unknown names raise ``ValueError``."""
    if name is None:
        return None
    try:
        return DETOKENIZERS[name]
    except KeyError:
        raise ValueError(f"unknown detokenizer {name!r}; known: {', '.join(DETOKENIZERS)}") from None
