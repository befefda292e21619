"""Characters that would make a text show differently from what it holds, for every name the
host shows people: a classroom's display names (classroom/names.py) and a dataset's class
names and labels (datasets/, dataset_routes.py). ``hidden_character(text)`` says, in words,
the first control character or invisible formatting character of ``text`` (a bidirectional
override such as U+202E), or None; ``visible(ch)`` whether a character draws something.

>>> hidden_character("cat\\u202e")
'an invisible formatting character (U+202E RIGHT-TO-LEFT OVERRIDE) that can make it show \
differently from what was typed'
>>> hidden_character("caf\\u00e9") is None
True
"""

from __future__ import annotations

import unicodedata

# letters that draw nothing (Hangul fillers, the braille blank, ...): count as not visible
BLANK = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u2800", "\u034f", "\u180e"}
JOINERS = {"\u200c", "\u200d"}  # zero-width (non-)joiner: part of emoji and some scripts
CONTROL = "a control character"


def _char(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" {name}" if name else "")


def problem_at(text: str, i: int) -> str | None:
    """What is wrong with ``text[i]`` in a name shown to people: "a control character (U+0000
    NULL)" (categories Cc, Zl, Zp), "an invisible formatting character (U+202E RIGHT-TO-LEFT
    OVERRIDE) that can make it show differently from what was typed" (Cf other than a
    zero-width joiner between two visible characters; Co, Cs, Cn), or None."""
    ch = text[i]
    cat = unicodedata.category(ch)
    if cat in ("Cc", "Zl", "Zp"):
        return f"{CONTROL} ({_char(ch)})"
    if ch in JOINERS and 0 < i < len(text) - 1 and visible(text[i - 1]) \
            and visible(text[i + 1]):
        return None
    if cat in ("Cf", "Co", "Cs", "Cn") or ch in JOINERS:
        return (f"an invisible formatting character ({_char(ch)}) that can make it show "
                "differently from what was typed")
    return None


def hidden_character(text: str) -> str | None:
    """The first character of ``text`` that would hide or spoof what a name shows, in words
    (``problem_at``: a control character such as NUL, a bidirectional override such as
    U+202E), or None: ``classroom.names.display_name``'s check, for names that are not typed
    (an uploaded dataset's class folders, a CSV's labels)."""
    for i in range(len(text)):
        problem = problem_at(text, i)
        if problem:
            return problem
    return None


def visible(ch: str) -> bool:
    """Whether ``ch`` draws something: a letter, number, punctuation or symbol, not one of the
    letters that draw nothing (``BLANK``: Hangul fillers, the braille blank, ...)."""
    return unicodedata.category(ch)[0] in "LNPS" and ch not in BLANK
