"""The GRPO reward, table-driven: each row is (predicted action, label, expected reward)."""

from __future__ import annotations

import pytest

from coda.actions import (
    Answer,
    Click,
    Done,
    DoubleClick,
    Drag,
    Fail,
    Hotkey,
    Move,
    Press,
    RightClick,
    Scroll,
    TypeText,
    Wait,
)
from coda.rewards import Box, action_reward, iou, levenshtein, text_similarity

SCREEN = (1000, 500)

TABLE = [
    # pointer actions: 1 - L1 distance normalised by the screen, halved with the type point
    (Click(x=100, y=100), Click(x=100, y=100), 1.0),
    (Click(x=200, y=100), Click(x=100, y=100), (1 + 0.9) / 2),
    (Click(x=100, y=150), Click(x=100, y=100), (1 + 0.9) / 2),
    (Click(x=600, y=350), Click(x=100, y=100), (1 + 0.0) / 2),  # 0.5 + 0.5 -> clipped at 0
    (Click(x=999, y=499), Click(x=0, y=0), 0.5),
    (DoubleClick(x=10, y=10), DoubleClick(x=10, y=10), 1.0),
    (RightClick(x=10, y=10), RightClick(x=110, y=10), (1 + 0.9) / 2),
    (Move(x=0, y=0), Move(x=0, y=50), (1 + 0.9) / 2),
    # a different action type earns nothing, however close
    (DoubleClick(x=100, y=100), Click(x=100, y=100), 0.0),
    (TypeText(text="abc"), Hotkey(keys=["ctrl", "a"]), 0.0),
    (Done(), Fail(), 0.0),
    # drag: IoU of the spanned boxes
    (Drag(x1=0, y1=0, x2=10, y2=10), Drag(x1=0, y1=0, x2=10, y2=10), 1.0),
    (Drag(x1=10, y1=10, x2=0, y2=0), Drag(x1=0, y1=0, x2=10, y2=10), 1.0),
    (Drag(x1=0, y1=0, x2=10, y2=10), Drag(x1=5, y1=0, x2=15, y2=10), (1 + 50 / 150) / 2),
    (Drag(x1=0, y1=0, x2=10, y2=10), Drag(x1=20, y1=20, x2=30, y2=30), 0.5),
    # text: 1 - normalised edit distance
    (TypeText(text="hello"), TypeText(text="hello"), 1.0),
    (TypeText(text="hallo"), TypeText(text="hello"), (1 + 0.8) / 2),
    (TypeText(text=""), TypeText(text="abcd"), 0.5),
    (Answer(text=" 42 "), Answer(text="42"), 1.0),
    (Answer(text="41"), Answer(text="42"), (1 + 0.5) / 2),
    # keys and direction: exact
    (Hotkey(keys=["Ctrl", "S"]), Hotkey(keys=["s", "ctrl"]), 1.0),
    (Hotkey(keys=["ctrl", "c"]), Hotkey(keys=["ctrl", "v"]), 0.5),
    (Press(key="Enter"), Press(key="enter"), 1.0),
    (Press(key="tab"), Press(key="enter"), 0.5),
    (Scroll(direction="down"), Scroll(direction="down"), 1.0),
    (Scroll(direction="up"), Scroll(direction="down"), 0.5),
    (Scroll(x=100, y=100, direction="down"), Scroll(x=200, y=100, direction="down"),
     (1 + 0.9) / 2),
    # nothing to compare
    (Wait(), Wait(seconds=1), 1.0),
    (Done(), Done(message="ok"), 1.0),
    (Fail(reason="x"), Fail(), 1.0),
    # executor output that did not parse
    (None, Click(x=1, y=1), 0.0),
]


@pytest.mark.parametrize(("pred", "label", "expected"), TABLE)
def test_reward_table(pred, label, expected) -> None:
    assert action_reward(pred, label, SCREEN) == pytest.approx(expected)


def test_rewards_stay_in_unit_interval() -> None:
    for pred, label, _ in TABLE:
        assert 0.0 <= action_reward(pred, label, SCREEN) <= 1.0


def test_point_against_a_target_box() -> None:
    box = Box(100, 100, 200, 150)
    assert action_reward(Click(x=190, y=140), Click(x=150, y=125), SCREEN, box) == 1.0
    outside = action_reward(Click(x=250, y=125), Click(x=150, y=125), SCREEN, box)
    assert outside == pytest.approx((1 + 0.9) / 2)  # distance to the box centre


def test_helpers() -> None:
    assert levenshtein("kitten", "sitting") == 3
    assert text_similarity("", "") == 1.0
    assert iou(Box(0, 0, 0, 0), Box(0, 0, 0, 0)) == 1.0
    assert iou(Box(0, 0, 0, 0), Box(1, 1, 1, 1)) == 0.0
