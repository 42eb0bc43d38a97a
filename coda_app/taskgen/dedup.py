"""Near-duplicate detection of instructions: normalised text plus a word-level difflib ratio.

Words, not characters, are compared: "plot sin(x) in 2D" and "plot cos(2x) in 3D" share most
characters but are different tasks, while a changed plural or punctuation is a duplicate.
"""

from __future__ import annotations

import re
import unicodedata
from difflib import SequenceMatcher

DEFAULT_THRESHOLD = 0.85


def normalise(text: str) -> str:
    """Lower case, NFKC, punctuation dropped, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[^\w\s]", " ", text)
    return " ".join(text.split())


def _ratio(a: list[str], b: list[str]) -> float:
    if a == b:
        return 1.0
    return SequenceMatcher(None, a, b, autojunk=False).ratio()


def similarity(a: str, b: str) -> float:
    """difflib ratio of the normalised texts' words (1.0 = same)."""
    return _ratio(normalise(a).split(), normalise(b).split())


class Deduplicator:
    """Remembers accepted instructions; :meth:`add` refuses near-duplicates of any of them."""

    def __init__(self, threshold: float = DEFAULT_THRESHOLD, seen: list[str] | None = None) -> None:
        if not 0 < threshold <= 1:
            raise ValueError("threshold must be in (0, 1]")
        self.threshold = threshold
        self._seen: list[list[str]] = [normalise(t).split() for t in seen or []]

    def is_duplicate(self, text: str) -> bool:
        words = normalise(text).split()
        if not words:
            return True
        return any(_ratio(words, other) >= self.threshold for other in self._seen)

    def add(self, text: str) -> bool:
        """Accept ``text`` unless it duplicates one already seen; True when accepted."""
        if self.is_duplicate(text):
            return False
        self._seen.append(normalise(text).split())
        return True
