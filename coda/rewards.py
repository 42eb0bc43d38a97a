"""The decoupled-GRPO reward: how close an executor action is to the labelled action.

CODA (after SEAgent's ``accuracy_reward``) scores a sampled plan by the action the executor
grounds it into, against the action of the judge-approved step at that state::

    r = (1[type(pred) == type(label)] + s) / 2          in [0, 1]

where ``s``, counted only when the types match, is the parameter similarity:

- click, double click, right click, move: ``1 - L1`` distance of the two points, each
  coordinate normalised by the screen size (clipped at 0); a point against a target box
  (``label_box``): 1 if inside, else the distance rule to the box centre;
- drag: IoU of the boxes the two drags span (start to end);
- type, answer: string similarity (1 - normalised Levenshtein distance);
- hotkey, press: exact keys (order and case ignored): 1 or 0;
- scroll: exact direction (1 or 0), times the point rule when both carry a point;
- wait, done, fail: ``s = 1`` (nothing to compare).

A plan whose executor output did not parse (``pred is None``) gets 0. Pure functions only.
"""

from __future__ import annotations

from dataclasses import dataclass

from coda.actions import (
    Action,
    Answer,
    Click,
    DoubleClick,
    Drag,
    Hotkey,
    Move,
    Press,
    RightClick,
    Scroll,
    TypeText,
)

MAX_TEXT = 2_000
"""Characters compared by the string similarity (longer texts are cut first)."""


@dataclass(frozen=True)
class Box:
    """A screen rectangle in pixels (``x1 <= x2``, ``y1 <= y2`` after :meth:`normal`)."""

    x1: float
    y1: float
    x2: float
    y2: float

    def normal(self) -> Box:
        return Box(min(self.x1, self.x2), min(self.y1, self.y2),
                   max(self.x1, self.x2), max(self.y1, self.y2))

    def contains(self, x: float, y: float) -> bool:
        b = self.normal()
        return b.x1 <= x <= b.x2 and b.y1 <= y <= b.y2

    @property
    def area(self) -> float:
        b = self.normal()
        return (b.x2 - b.x1) * (b.y2 - b.y1)


def point_similarity(p: tuple[float, float], q: tuple[float, float],
                     screen: tuple[int, int]) -> float:
    """``1 - (|dx|/W + |dy|/H)``, clipped to [0, 1]."""
    w, h = max(1, screen[0]), max(1, screen[1])
    return max(0.0, 1.0 - abs(p[0] - q[0]) / w - abs(p[1] - q[1]) / h)


def iou(a: Box, b: Box) -> float:
    """Intersection over union; two degenerate (zero-area) boxes count as equal when they
    coincide."""
    a, b = a.normal(), b.normal()
    ix = max(0.0, min(a.x2, b.x2) - max(a.x1, b.x1))
    iy = max(0.0, min(a.y2, b.y2) - max(a.y1, b.y1))
    inter = ix * iy
    union = a.area + b.area - inter
    if union <= 0:
        return 1.0 if a == b else 0.0
    return inter / union


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions), O(len(a) * len(b))."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def text_similarity(a: str, b: str) -> float:
    """``1 - levenshtein / max(len)`` on the first :data:`MAX_TEXT` characters; two empty
    strings are identical."""
    a, b = a[:MAX_TEXT], b[:MAX_TEXT]
    if not a and not b:
        return 1.0
    return 1.0 - levenshtein(a, b) / max(len(a), len(b))


def _keys(keys: list[str]) -> frozenset[str]:
    return frozenset(k.strip().lower() for k in keys)


def parameter_similarity(pred: Action, label: Action, screen: tuple[int, int],
                         label_box: Box | None = None) -> float:
    """``s`` of the module doc for two actions of the same type."""
    match pred, label:
        case (Click() | DoubleClick() | RightClick() | Move()), (
                Click() | DoubleClick() | RightClick() | Move()):
            if label_box is not None and label_box.contains(pred.x, pred.y):
                return 1.0
            target: tuple[float, float] = (label.x, label.y)
            if label_box is not None:
                b = label_box.normal()
                target = ((b.x1 + b.x2) / 2, (b.y1 + b.y2) / 2)
            return point_similarity((pred.x, pred.y), target, screen)
        case Drag(), Drag():
            return iou(Box(pred.x1, pred.y1, pred.x2, pred.y2),
                       Box(label.x1, label.y1, label.x2, label.y2))
        case TypeText(), TypeText():
            return text_similarity(pred.text, label.text)
        case Answer(), Answer():
            return text_similarity(pred.text.strip(), label.text.strip())
        case Hotkey(), Hotkey():
            return float(_keys(pred.keys) == _keys(label.keys))
        case Press(), Press():
            return float(_keys([pred.key]) == _keys([label.key]))
        case Scroll(), Scroll():
            if pred.direction != label.direction:
                return 0.0
            if None in (pred.x, pred.y, label.x, label.y):
                return 1.0
            assert pred.x is not None and pred.y is not None
            assert label.x is not None and label.y is not None
            return point_similarity((pred.x, pred.y), (label.x, label.y), screen)
    return 1.0  # wait, done, fail: nothing to compare


def action_reward(pred: Action | None, label: Action, screen: tuple[int, int],
                  label_box: Box | None = None) -> float:
    """The reward of ``pred`` against ``label`` on a ``screen`` = (width, height)."""
    if pred is None or pred.type != label.type:
        return 0.0
    return (1.0 + parameter_similarity(pred, label, screen, label_box)) / 2.0
