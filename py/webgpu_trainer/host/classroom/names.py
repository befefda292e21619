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

# letters that draw nothing (Hangul fillers, the braille blank, ...): count as not visible
BLANK = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u2800", "\u034f", "\u180e"}
JOINERS = {"\u200c", "\u200d"}  # zero-width (non-)joiner: part of emoji and some scripts


def _char(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" {name}" if name else "")


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
        problem = _problem_at(text, i)
        if problem and problem.startswith(CONTROL):
            raise ValueError(f"the name has {problem}: type it again with letters, digits and "
                             "punctuation")
        if problem:
            raise ValueError(f"the name has {problem}: type it again with visible characters "
                             "only")
    if not any(_visible(ch) for ch in text):
        raise ValueError("the name has no visible character: use at least one letter, digit "
                         "or symbol")
    return text


CONTROL = "a control character"


def _problem_at(text: str, i: int) -> str | None:
    """What is wrong with ``text[i]`` in a name shown to people: "a control character (U+0000
    NULL)" (categories Cc, Zl, Zp), "an invisible formatting character (U+202E RIGHT-TO-LEFT
    OVERRIDE) that can make it show differently from what was typed" (Cf other than a
    zero-width joiner between two visible characters; Co, Cs, Cn), or None."""
    ch = text[i]
    cat = unicodedata.category(ch)
    if cat in ("Cc", "Zl", "Zp"):
        return f"{CONTROL} ({_char(ch)})"
    if ch in JOINERS and 0 < i < len(text) - 1 and _visible(text[i - 1]) \
            and _visible(text[i + 1]):
        return None
    if cat in ("Cf", "Co", "Cs", "Cn") or ch in JOINERS:
        return (f"an invisible formatting character ({_char(ch)}) that can make it show "
                "differently from what was typed")
    return None


def hidden_character(text: str) -> str | None:
    """The first character of ``text`` that would hide or spoof what a name shows, in words
    (``_problem_at``: a control character such as NUL, a bidirectional override such as
    U+202E), or None: ``display_name``'s check, for names that are not typed (an uploaded
    dataset's class folders)."""
    for i in range(len(text)):
        problem = _problem_at(text, i)
        if problem:
            return problem
    return None


def _visible(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LNPS" and ch not in BLANK
