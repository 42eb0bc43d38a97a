"""Grounding a plan on a screen's text: pure functions over OCR lines, no model, no I/O.

The OCR executor (:mod:`coda.inference.ocr_executor`) reads the screenshot's text lines once
and asks :func:`decide` what the plan's step is. The rules, in order:

1. **The step's sentence.** The plan is split into sentences; the step is the *last* sentence
   with an action verb (click, double-click, right-click, select, choose, open, type, enter,
   write, press, hit, scroll, hotkey, or a key combination like ``Ctrl+S``), since UI-TARS's
   own thoughts end with the next action; in that sentence the earliest verb decides the kind.
   A plan with no action verb that says the task is complete/done/finished -> ``finished()``.
2. **Typing** (type / enter / write / input + text): the first quoted text of the sentence
   (``'...'``, ``"..."``, curly quotes, backticks); without quotes, a code-like token right after
   the verb (one that holds a digit or one of ``:=()/*+-^_.,``), e.g. ``type p:=log(3)/log(2)``.
   ``... and press Enter`` (or Return) appends a newline, as UI-TARS submits input.
3. **Keys** (press / hit / hotkey, or a combination anywhere in the sentence): ``Ctrl+S``,
   ``ctrl s``, ``Shift+K``, ``Enter``, ``Escape``, ``Tab``, arrows, ``F1``-``F12``, a quoted key
   (``press 'k'``) or a single character (``press k``) -> ``hotkey(key='ctrl s')``.
4. **Pointer steps** (click and the rest; ``scroll`` with a target is one too): the target
   phrase is, in order, a menu path (``File > Save``, ``File → Save As``: its deepest element
   that is on the screen, so an open menu is followed and a closed one opened), the quoted
   texts of the sentence, the words after the verb (``click the Hide toolbars button`` ->
   ``Hide toolbars``: articles, ``on``, and a trailing ``button/menu/tab/field/...`` dropped, cut
   at `` to ``, `` so ``, `` and ``, ``,``), and last any OCR line whose whole text occurs in the
   sentence (the longest wins).
5. **Matching a phrase to OCR lines** (:func:`match_phrase`): text is compared casefolded with
   punctuation and ``&`` mnemonics dropped and spaces collapsed. Score 1.0: the line *is* the
   phrase; 0.9: the phrase is a run of whole words inside the line (a menu bar read as one line:
   the point is then placed on the phrase's characters, in proportion to their place in the
   line); 0.8 x similarity: a fuzzy match (difflib ratio >= 0.8, OCR slips like ``Fi1e``).
   Ties go to the higher OCR confidence, then to the topmost, leftmost line.
6. **Fields by their label** (``click the Name field``, ``... text box``, ``... input``,
   ``... entry``): the label is found and the point moved right of it (by three times the
   label's height), where a form's field is.

Anything that cannot be grounded gives a :class:`Decision` of kind ``"ungrounded"`` with the
reason; the backend answers it as ``wait()`` with a Thought that says what was not found.

What it cannot do: icons without text, targets the plan names only by position or colour
("the red button", "the middle of the map"), text the OCR misreads beyond the fuzzy threshold,
and typing text the plan does not quote (unless code-like).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Literal

# --- OCR lines --------------------------------------------------------------------------------


@dataclass(frozen=True)
class OcrLine:
    """One text line read from the screenshot: its axis-aligned box in image pixels."""

    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    score: float = 1.0

    @property
    def centre(self) -> tuple[float, float]:
        return (self.x0 + self.x1) / 2, (self.y0 + self.y1) / 2


def line_from_quad(quad: Sequence[Sequence[float]], text: str, score: float) -> OcrLine:
    """An :class:`OcrLine` from an OCR engine's 4-point box (any order)."""
    xs = [float(p[0]) for p in quad]
    ys = [float(p[1]) for p in quad]
    return OcrLine(text=text, x0=min(xs), y0=min(ys), x1=max(xs), y1=max(ys), score=float(score))


# --- text normalisation -----------------------------------------------------------------------

_PUNCT = re.compile(r"[^\w\s]+", re.UNICODE)
_SPACES = re.compile(r"\s+")


def norm(text: str) -> str:
    """Casefolded words: punctuation, ``&`` mnemonics and ``_`` dropped, spaces collapsed."""
    text = text.replace("&", "").replace("_", " ")
    return _SPACES.sub(" ", _PUNCT.sub(" ", text.casefold())).strip()


# --- matching ---------------------------------------------------------------------------------

FUZZY_MIN = 0.8


@dataclass(frozen=True)
class Match:
    line: OcrLine
    score: float
    x: float
    y: float
    """The point to act on, in image pixels."""


def _sub_point(line: OcrLine, phrase_n: str) -> tuple[float, float] | None:
    """The centre of ``phrase_n``'s characters inside ``line`` (whole words), or None."""
    words = phrase_n.split()
    if not words:
        return None
    pattern = r"(?<!\w)" + r"\W+".join(re.escape(w) for w in words) + r"(?!\w)"
    folded = line.text.casefold().replace("&", "")
    m = re.search(pattern, folded)
    if m is None:
        return None
    n = max(len(folded), 1)
    frac = (m.start() + m.end()) / 2 / n
    return line.x0 + (line.x1 - line.x0) * frac, (line.y0 + line.y1) / 2


def score_line(phrase: str, line: OcrLine) -> Match | None:
    """How well ``line`` shows ``phrase`` (see the module's rule 5), or None."""
    p, t = norm(phrase), norm(line.text)
    if not p or not t:
        return None
    cx, cy = line.centre
    if p == t:
        return Match(line, 1.0, cx, cy)
    if f" {p} " in f" {t} ":
        point = _sub_point(line, p) or (cx, cy)
        return Match(line, 0.9, point[0], point[1])
    ratio = SequenceMatcher(None, p, t).ratio()
    if ratio >= FUZZY_MIN:
        return Match(line, 0.8 * ratio, cx, cy)
    pc, tc = p.replace(" ", ""), t.replace(" ", "")
    if len(pc) >= 4 and pc in tc:  # words the OCR ran together ("BibliographyMacrosView")
        i = tc.index(pc)
        x = line.x0 + (line.x1 - line.x0) * (i + len(pc) / 2) / len(tc)
        return Match(line, 0.7, x, cy)
    pw, tw = p.split(), t.split()
    if len(tw) > len(pw) and len(p) >= 4:  # a slip inside a longer line: each run of words
        best, at = max((SequenceMatcher(None, p, " ".join(tw[i:i + len(pw)])).ratio(), i)
                       for i in range(len(tw) - len(pw) + 1))
        if best >= FUZZY_MIN:
            point = _sub_point(line, " ".join(tw[at:at + len(pw)])) or (cx, cy)
            return Match(line, 0.75 * best, point[0], point[1])
    return None


def match_phrase(phrase: str, lines: Sequence[OcrLine]) -> Match | None:
    """The best line for ``phrase``: highest score, then OCR confidence, then top-left."""
    found = [m for m in (score_line(phrase, line) for line in lines) if m is not None]
    if not found:
        return None
    return min(found, key=lambda m: (-m.score, -m.line.score, m.line.y0, m.line.x0))


# --- the plan's step --------------------------------------------------------------------------

Kind = Literal["click", "double_click", "right_click", "type", "hotkey", "scroll", "finished",
               "ungrounded"]


@dataclass(frozen=True)
class Decision:
    """What the plan's step is, grounded: the action kind and its arguments (image pixels)."""

    kind: Kind
    x: float | None = None
    y: float | None = None
    text: str | None = None
    """``type``: the content; ``hotkey``: the keys, space-separated; ``scroll``: direction."""
    target: str | None = None
    """The phrase that was grounded (pointer steps) or looked for (``ungrounded``)."""
    reason: str = ""


_VERBS: list[tuple[str, str]] = [
    (r"double[- ]?click(?:s|ed)?|double[- ]?tap", "double_click"),
    (r"right[- ]?click(?:s|ed)?", "right_click"),
    (r"(?:left[- ])?click(?:s)?|tap|select|choose|pick|open|activate|go to", "click"),
    (r"type|enter the text|write|input|fill in|enter", "type"),
    (r"press|hit|hotkey|use the shortcut|shortcut", "hotkey"),
    (r"scroll", "scroll"),
]
_VERB_RE = re.compile(
    r"(?<![\w-])(" + "|".join(f"(?:{v})" for v, _ in _VERBS) + r")(?![\w-])", re.IGNORECASE)
_MODS = r"(?:ctrl|control|shift|alt|super|meta|cmd|win)"
_COMBO_RE = re.compile(rf"(?<!\w){_MODS}(?:\s*[+-]\s*{_MODS})*\s*[+-]\s*(?:f\d{{1,2}}|\w+)",
                       re.IGNORECASE)
_NAMED_KEYS = {
    "enter": "enter", "return": "enter", "escape": "escape", "esc": "escape", "tab": "tab",
    "backspace": "backspace", "delete": "delete", "del": "delete", "space": "space",
    "spacebar": "space", "home": "home", "end": "end", "pageup": "pageup",
    "page up": "pageup", "pagedown": "pagedown", "page down": "pagedown", "up": "up",
    "down": "down", "left": "left", "right": "right", "insert": "insert",
}
_KEY_ALIASES = {"control": "ctrl", "cmd": "ctrl", "meta": "super", "win": "super",
                "return": "enter", "esc": "escape", "del": "delete"}
_DONE_RE = re.compile(r"\b(?:task|it|everything|this)\s+is\s+(?:now\s+)?(?:complete|completed|"
                      r"done|finished|solved)\b|\bDONE\b", re.IGNORECASE)
_QUOTED_RE = re.compile(
    r"(?<![\w])'([^'\n]+?)'(?![\w])|\"([^\"\n]+?)\""
    r"|\u2018([^\u2019\n]+?)\u2019|\u201c([^\u201d\n]+?)\u201d|`([^`\n]+?)`")
_PATH_SEP = re.compile(r"\s*(?:>|→|->|»|⇒)\s*")
_PATH_RE = re.compile(r"[\w&][\w &.'-]*?(?:\s*(?:>|→|->|»|⇒)\s*[\w&][\w &.'-]*?)+(?=[.,;:!?]|$|\s"
                      r"(?:menu|to|so|and|in|then)\b)", re.UNICODE)
_FIELD_NOUNS = ("field", "text box", "textbox", "input", "entry", "text field", "box")
_NOUNS = ("button", "menu item", "menu entry", "menu", "tab", "item", "option", "entry",
          "checkbox", "check box", "link", "icon", "label", "text", "word", "radio button",
          "field", "text box", "textbox", "input", "box", "heading", "title", "panel")
_LEADING = re.compile(r"^(?:(?:on|the|a|an|its|their|this|that|into|in|at|to)\s+)+",
                      re.IGNORECASE)
_CUT = re.compile(r"\s+(?:to|so|and|in order|which|that|then|because|for|in the|on the|at the|"
                  r"from the|of the|with|under|inside|next to|at)\b|[,;:!?()]|\.(?:\s|$)",
                  re.IGNORECASE)
_CODE_CHARS = set("0123456789:=()/*+-^_.,[]{}<>\\")


def sentences(text: str) -> list[str]:
    """The plan split into sentences (a dot inside a token such as ``x.y`` does not split)."""
    parts = re.split(r"(?<=[.!?])\s+|\n+", text.strip())
    return [p.strip() for p in parts if p.strip()]


def quoted(text: str) -> list[str]:
    """The quoted texts of ``text``, in order (single, double, curly quotes, backticks)."""
    return [next(g for g in m.groups() if g is not None) for m in _QUOTED_RE.finditer(text)]


_STATE_BEFORE = re.compile(r"\b(?:is|are|be|been|now|stays|remains|still|already)\s+$",
                           re.IGNORECASE)


def _verb(sentence: str) -> re.Match[str] | None:
    """The first action verb (``open`` after ``is``/``are``/``now`` describes a state)."""
    for m in _VERB_RE.finditer(sentence):
        if m.group(1).lower() == "open" and _STATE_BEFORE.search(sentence[: m.start()]):
            continue
        return m
    return None


def _kind_of(sentence: str) -> tuple[str, re.Match[str]] | None:
    m = _verb(sentence)
    combo = _COMBO_RE.search(sentence)
    if m is None and combo is None:
        return None
    if m is None or (combo is not None and combo.start() < m.start()):
        assert combo is not None
        return "hotkey", combo
    verb = m.group(1).lower()
    for pattern, kind in _VERBS:
        if re.fullmatch(pattern, verb, re.IGNORECASE):
            return kind, m
    return None  # pragma: no cover - every alternative of _VERB_RE is in _VERBS


def step_sentence(plan: str) -> tuple[str, str, re.Match[str]] | None:
    """The last sentence with an action verb, its kind and the verb's match."""
    for sentence in reversed(sentences(plan)):
        found = _kind_of(sentence)
        if found is not None:
            return sentence, found[0], found[1]
    return None


def _key_name(raw: str) -> str:
    key = raw.strip().lower()
    return _KEY_ALIASES.get(key, key)


def keys_in(sentence: str, after: int = 0) -> str | None:
    """The key or key combination the sentence names, as ``hotkey``'s ``key`` (``'ctrl s'``)."""
    combo = _COMBO_RE.search(sentence)
    if combo is not None:
        return " ".join(_key_name(k) for k in re.split(r"\s*[+-]\s*", combo.group(0)) if k)
    rest = sentence[after:]
    q = quoted(rest)
    if q and len(q[0].strip()) == 1:  # one character: its case matters ('K' is Shift+k)
        return q[0].strip()
    if q and len(q[0]) <= 12:
        return " ".join(_key_name(k) for k in re.split(r"\s*\+\s*|\s+", q[0]) if k)
    names = sorted(_NAMED_KEYS, key=len, reverse=True)
    head = re.sub(r"^\s*(?:the\s+)?", "", rest)
    for name in names:  # right after the verb: "press Enter", "press the down arrow"
        if re.match(rf"{re.escape(name)}(?!\w)", head, re.IGNORECASE):
            return _NAMED_KEYS[name]
    fkey = re.match(r"(f\d{1,2})(?!\w)", head, re.IGNORECASE)
    if fkey:
        return fkey.group(1).lower()
    single = re.match(r"(\S)(?:\s+key)?(?:\s|[.,;]|$)", head)
    if single:
        return single.group(1)
    for name in names:  # anywhere after it; a direction only as "... arrow" / "... key"
        direction = name in ("up", "down", "left", "right")
        tail = r"\s+(?:arrow|key)" if direction else r"(?:\s+key)?"
        if re.search(rf"(?<!\w){re.escape(name)}{tail}(?!\w)", rest, re.IGNORECASE):
            return _NAMED_KEYS[name]
    return None


def typed_text(sentence: str, after: int) -> str | None:
    """What a typing step types: the first quoted text after the verb (or anywhere), else a
    code-like token right after the verb; ``and press Enter`` appends a newline."""
    rest = sentence[after:]
    q = quoted(rest) or quoted(sentence)
    if q:
        text: str | None = q[0]
    else:
        text = None
        words = rest.split()
        for word in words[:6]:
            token = word.rstrip(".,;")
            if any(c in _CODE_CHARS for c in token) and len(token) > 1:
                text = token
                break
    if text is None:
        return None
    if re.search(r"\b(?:press|hit|then)\s+(?:the\s+)?(?:enter|return)\b|\band\s+(?:enter|return)"
                 r"\b", rest, re.IGNORECASE):
        text += "\n"
    return text


def target_phrases(sentence: str, after: int) -> list[str]:
    """Candidate names of the element a pointer step acts on, best first (rule 4)."""
    out: list[str] = []
    rest = sentence[after:]
    path = _PATH_RE.search(rest)
    if path:
        out += list(reversed([p.strip() for p in _PATH_SEP.split(path.group(0)) if p.strip()]))
    out += quoted(rest) or quoted(sentence)
    phrase = _LEADING.sub("", rest.strip())
    cut = _CUT.search(phrase)
    if cut:
        phrase = phrase[: cut.start()]
    phrase = phrase.strip(" .'\"")
    words = phrase.split()
    for noun in sorted(_NOUNS, key=len, reverse=True):
        if phrase.lower().endswith(" " + noun) and len(words) > len(noun.split()):
            phrase = phrase[: -len(noun) - 1].strip()
            break
    phrase = _LEADING.sub("", phrase).strip()
    if phrase and phrase not in out:
        out.append(phrase)
    return out


def wants_field(sentence: str, phrase: str) -> bool:
    """Whether the sentence names a field by its label (``the Name field``)."""
    low = sentence.lower()
    i = low.find(phrase.lower())
    if i < 0:
        return False
    tail = low[i + len(phrase):].lstrip(" '\":")
    return any(tail.startswith(noun) for noun in _FIELD_NOUNS)


def lines_in_sentence(sentence: str, lines: Sequence[OcrLine]) -> list[OcrLine]:
    """OCR lines whose whole text occurs in the sentence (3 characters or more), longest first."""
    s = f" {norm(sentence)} "
    found = [line for line in lines if len(norm(line.text)) >= 3 and f" {norm(line.text)} " in s]
    return sorted(found, key=lambda line: -len(norm(line.text)))


def ground(sentence: str, after: int, lines: Sequence[OcrLine], *,
           image_w: int | None = None) -> tuple[str, Match] | None:
    """The element a pointer step names: ``(phrase, match)`` or None (rule 4-6)."""
    for phrase in target_phrases(sentence, after):
        m = match_phrase(phrase, lines)
        if m is not None:
            if wants_field(sentence, phrase):
                dx = 3 * max(m.line.y1 - m.line.y0, 8)
                x = m.line.x1 + dx
                if image_w is not None:
                    x = min(x, image_w - 1)
                m = Match(m.line, m.score, x, m.y)
            return phrase, m
    for line in lines_in_sentence(sentence, lines):
        return line.text, Match(line, 0.7, *line.centre)
    return None


def decide(plan: str, lines: Sequence[OcrLine], *, image_w: int | None = None) -> Decision:
    """The grounded step of ``plan`` on a screen with ``lines`` (the module's rules)."""
    found = step_sentence(plan)
    if found is None:
        if _DONE_RE.search(plan):
            return Decision("finished", reason="the plan says the task is complete")
        return Decision("ungrounded", reason="the plan names no action (click, type, press, "
                                             "scroll)")
    sentence, kind, verb = found
    if kind == "type":
        text = typed_text(sentence, verb.end())
        if text is None:
            return Decision("ungrounded", reason=f"the typing step quotes no text: {sentence!r}")
        return Decision("type", text=text)
    if kind == "hotkey":
        keys = keys_in(sentence, verb.end())
        if keys is None:
            return Decision("ungrounded", reason=f"no key named in {sentence!r}")
        return Decision("hotkey", text=keys)
    if kind == "scroll":
        direction = next((d for d in ("down", "up", "left", "right")
                          if re.search(rf"\b{d}\b", sentence, re.IGNORECASE)), "down")
        hit = ground(sentence, verb.end(), lines, image_w=image_w)
        if hit is not None:
            return Decision("scroll", x=hit[1].x, y=hit[1].y, text=direction, target=hit[0])
        return Decision("scroll", text=direction)
    hit = ground(sentence, verb.end(), lines, image_w=image_w)
    if hit is None:
        wanted = target_phrases(sentence, verb.end())
        name = wanted[0] if wanted else sentence
        return Decision("ungrounded", target=name,
                        reason=f"no text on the screen matches {name!r} ({len(lines)} text "
                               f"lines read)")
    phrase, m = hit
    pointer: Kind = "double_click" if kind == "double_click" else (
        "right_click" if kind == "right_click" else "click")
    return Decision(pointer, x=m.x, y=m.y, target=phrase)
