"""Display names (a student's, a session's): what the teacher's dashboard shows must be what
was typed, visibly. ``display_name(text, most)`` normalises (NFC, spaces) and refuses, in
plain words, names that would spoof or hide: bidirectional and other invisible format
characters (Unicode category Cf, e.g. U+202E RIGHT-TO-LEFT OVERRIDE), control characters,
markup, and names with no visible character at all.

>>> display_name("  Ada \\u00a0 L. ", 40)
'Ada L.'
>>> display_name("\\u2800", 40)
Traceback (most recent call last):
ValueError: the name has no visible character: use at least one letter, digit or symbol
"""

from __future__ import annotations

import unicodedata

from ..text import CONTROL, problem_at, visible


def display_name(text: str, most: int) -> str:
    """``text`` as a display name: NFC, runs of spaces (any Unicode space) as one, trimmed,
    at most ``most`` characters. Raises ValueError with a sentence for the person who typed
    it: an empty name, too long, ``<`` / ``>``, a control character, an invisible formatting
    character (category Cf other than a zero-width joiner between two visible characters; a
    private-use, surrogate or unassigned code point), or nothing visible."""
    text = "".join(" " if unicodedata.category(c) == "Zs" else c
                   for c in unicodedata.normalize("NFC", text))
    text = " ".join(w for w in text.split(" ") if w)
    if not text:
        raise ValueError("type a name")
    if len(text) > most:
        raise ValueError(f"the name is {len(text):,} characters long; at most {most} please")
    for i, ch in enumerate(text):
        if ch in "<>":
            raise ValueError("the name may not contain < or >")
        problem = problem_at(text, i)
        if problem and problem.startswith(CONTROL):
            raise ValueError(f"the name has {problem}: type it again with letters, digits and "
                             "punctuation")
        if problem:
            raise ValueError(f"the name has {problem}: type it again with visible characters "
                             "only")
    if not any(visible(ch) for ch in text):
        raise ValueError("the name has no visible character: use at least one letter, digit "
                         "or symbol")
    return text
