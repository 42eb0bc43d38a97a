"""UI-TARS-1.5 output -> typed actions: a table of real-looking outputs guarding every defect of
the ui-tars 0.5.1 package listed in reference/ui-tars.md."""

from __future__ import annotations

import pytest
from ui_tars.action_parser import (
    parse_action_to_structure_output,
    parsing_response_to_pyautogui_code,
)

from coda.actions import (
    Action,
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
    to_pyautogui,
)
from coda.uitars import ActionParseError, model_to_screen, parse_uitars, smart_resize

W, H = 1280, 800  # CODA's evaluation screen; smart-resized to 1288x812
# (644,406) in the resized image is the screen centre (640,400); (322,203) -> (320,200);
# (966,609) -> (960,600).

CASES: list[tuple[str, str, Action]] = [
    # --- pointer actions, with and without box tokens / Thought ---
    ("box tokens (vLLM skip_special_tokens=False)",
     "Thought: The File menu is at the top left; I will open it.\n"
     "Action: click(start_box='<|box_start|>(322,203)<|box_end|>')",
     Click(x=320, y=200)),
    ("plain click", "Thought: Click the OK button.\nAction: click(start_box='(644,406)')",
     Click(x=640, y=400)),
    ("no Thought, Action only", "Action: click(start_box='(644,406)')", Click(x=640, y=400)),
    ("bare call (continuation of the pre-fill)", "click(start_box='(966,609)')",
     Click(x=960, y=600)),
    ("x1,y1,x2,y2 box -> centre",
     "Thought: Click the Save icon.\nAction: click(start_box='(300,180,344,226)')",
     Click(x=320, y=200)),
    ("box tokens around a 4-number box",
     "Action: click(start_box='<|box_start|>(300,180,344,226)<|box_end|>')",
     Click(x=320, y=200)),
    ("spaces inside the box", "Action: click(start_box='( 644 , 406 )')", Click(x=640, y=400)),
    ("point tag", "Thought: Click it.\nAction: click(point='<point>644 406</point>')",
     Click(x=640, y=400)),
    ("left_double",
     "Thought: Open the file by double-clicking it.\n"
     "Action: left_double(start_box='<|box_start|>(322,203)<|box_end|>')",
     DoubleClick(x=320, y=200)),
    ("right_single", "Thought: Open the context menu.\nAction: right_single(start_box='(966,609)')",
     RightClick(x=960, y=600)),
    ("hover", "Action: hover(start_box='(644,406)')", Move(x=640, y=400)),
    ("clamped to the screen", "Action: click(start_box='(1288,812)')", Click(x=1279, y=799)),
    # --- drag / scroll: coordinates scaled like any point ---
    ("drag",
     "Thought: Drag the slider to the right.\n"
     "Action: drag(start_box='<|box_start|>(322,203)<|box_end|>', "
     "end_box='<|box_start|>(966,609)<|box_end|>')",
     Drag(x1=320, y1=200, x2=960, y2=600)),
    ("scroll is scaled (package leaves it at 0..1)",
     "Thought: Scroll down the list to see more items.\n"
     "Action: scroll(start_box='<|box_start|>(644,406)<|box_end|>', direction='down')",
     Scroll(x=640, y=400, direction="down")),
    ("scroll up, no Thought", "Action: scroll(start_box='(322,203)', direction='up')",
     Scroll(x=320, y=200, direction="up")),
    ("scroll without a point", "Action: scroll(direction='left')", Scroll(direction="left")),
    # --- keyboard ---
    ("hotkey", "Thought: Save the file.\nAction: hotkey(key='ctrl s')", Hotkey(keys=["ctrl", "s"])),
    ("hotkey with three keys", "Action: hotkey(key='ctrl shift t')",
     Hotkey(keys=["ctrl", "shift", "t"])),
    ("press (package emits keyDown only)", "Thought: Confirm.\nAction: press(key='enter')",
     Press(key="enter")),
    ("keydown single key", "Action: keydown(key='esc')", Press(key="esc")),
    # --- type: escapes decoded exactly once, real newlines accepted ---
    ("escaped apostrophe (package pastes a literal backslash)",
     "Thought: Type the title.\nAction: type(content='it\\'s ok')", TypeText(text="it's ok")),
    ("escaped double quotes", "Action: type(content='say \\\"hi\\\"')", TypeText(text='say "hi"')),
    ("trailing \\n = Enter", "Thought: Search for water.\nAction: type(content='water\\n')",
     TypeText(text="water\n")),
    ("real newline inside content (package: Pattern not found)",
     "Thought: Write two lines.\nAction: type(content='line one\nline two')",
     TypeText(text="line one\nline two")),
    ("real trailing newline", "Action: type(content='x = 1\n')", TypeText(text="x = 1\n")),
    ("unescaped apostrophe", "Action: type(content='don't panic')", TypeText(text="don't panic")),
    ("parentheses and escaped quotes inside content",
     "Action: type(content='print(\\'a\\')')", TypeText(text="print('a')")),
    ("quote before ) inside content", "Action: type(content='a\\')b')", TypeText(text="a')b")),
    ("backslashes", "Action: type(content='C:\\\\temp\\\\')", TypeText(text="C:\\temp\\")),
    ("LaTeX keeps unknown escapes", "Action: type(content='\\\\frac{1}{2} \\alpha')",
     TypeText(text="\\frac{1}{2} \\alpha")),
    # --- control ---
    ("wait (package: unrecognized)", "Thought: The page is loading.\nAction: wait()", Wait()),
    ("finished -> Done (package: the string 'DONE')",
     "Thought: The task is complete.\nAction: finished()", Done()),
    ("finished with content", "Action: finished(content='The value is 42.')",
     Done(message="The value is 42.")),
    ("call_user -> Fail", "Thought: I need the password.\nAction: call_user()",
     Fail(reason="call_user")),
    # --- several actions: the first one wins ---
    ("first of two actions",
     "Thought: Select all and delete.\nAction: hotkey(key='ctrl a')\n\npress(key='backspace')",
     Hotkey(keys=["ctrl", "a"])),
    ("trailing text after the call", "Action: click(start_box='(644,406)')\nI hope this works.",
     Click(x=640, y=400)),
    ("missing final parenthesis (truncated)", "Action: type(content='abc'", TypeText(text="abc")),
]


@pytest.mark.parametrize(("text", "expected"), [(t, e) for _, t, e in CASES],
                         ids=[c[0] for c in CASES])
def test_parse_table(text: str, expected: Action) -> None:
    assert parse_uitars(text, W, H).action == expected


GARBAGE = [
    "",
    "   \n ",
    "I am not sure what to do here.",
    "Thought: The button is on the left.\nAction:",
    "Thought: hmm\nAction: click()",
    "Action: click(start_box='(abc)')",
    "Action: click(start_box='(1,2,3)')",
    "Action: scroll(start_box='(1,2)', direction='sideways')",
    "Action: type(content='never closed",
    "Action: explode(target='everything')",
    "Action: hotkey(key='')",
    "Action: click(start_box='(1,2)' oops)",
    "Ġ<|im_start|>ĠĠ0123(((",
]


@pytest.mark.parametrize("text", GARBAGE)
def test_garbage_raises_typed_error(text: str) -> None:
    with pytest.raises(ActionParseError) as info:
        parse_uitars(text, W, H)
    assert info.value.text == text
    assert info.value.message


def test_thought_is_returned() -> None:
    out = parse_uitars("Thought: Open the menu.\nAction: click(start_box='(1,2)')", W, H)
    assert out.thought == "Open the menu."
    assert out.action_text == "click(start_box='(1,2)')"
    assert parse_uitars("wait()", W, H).thought is None


def test_to_pyautogui_gives_screen_pixels_not_near_origin() -> None:
    act = parse_uitars("Thought: c\nAction: click(start_box='<|box_start|>(644,406)<|box_end|>')",
                       W, H).action
    assert to_pyautogui(act) == "pyautogui.click(640, 400)"
    scroll = parse_uitars("Action: scroll(start_box='(644,406)', direction='down')", W, H).action
    assert to_pyautogui(scroll) == "pyautogui.moveTo(640, 400)\npyautogui.scroll(-5)"
    typed = parse_uitars("Action: type(content='it\\'s ok\\n')", W, H).action
    code = to_pyautogui(typed)
    assert "pyperclip" not in code and "\\'" not in code
    assert code == "pyautogui.typewrite(\"it's ok\", interval=0.01)\npyautogui.press('enter')"


@pytest.mark.parametrize(
    ("screen", "resized"),
    [((1280, 800), (1288, 812)), ((1920, 1080), (1932, 1092)), ((1024, 768), (1036, 756))],
)
def test_smart_resize(screen: tuple[int, int], resized: tuple[int, int]) -> None:
    w, h = screen
    assert smart_resize(h, w) == (resized[1], resized[0])


def test_model_to_screen() -> None:
    assert model_to_screen(644, 406, 1280, 800) == (640, 400)
    assert model_to_screen(966, 546, 1920, 1080) == (960, 540)
    assert model_to_screen(0, 0, 1280, 800) == (0, 0)
    assert model_to_screen(5000, -3, 1280, 800) == (1279, 0)
    # a 1280x800 screenshot of a 2560x1600 (HiDPI) screen
    assert model_to_screen(644, 406, 2560, 1600, image_w=1280, image_h=800) == (1280, 800)


def test_other_screen_sizes() -> None:
    out = parse_uitars("Action: click(start_box='(966,546)')", 1920, 1080)
    assert out.action == Click(x=960, y=540)
    hidpi = parse_uitars("Action: click(start_box='(644,406)')", 2560, 1600,
                         image_w=1280, image_h=800)
    assert hidpi.action == Click(x=1280, y=800)


# The pinned package's defects, so a version bump that fixes or changes them is noticed.


def test_package_defect_box_tokens() -> None:
    with pytest.raises(ValueError, match="could not convert"):
        parse_action_to_structure_output(
            "Action: click(start_box='<|box_start|>(644,406)<|box_end|>')", 1000, H, W)


def test_package_defect_scale_factor_and_type() -> None:
    click = parse_action_to_structure_output("Action: click(start_box='(644,406)')", 1000, H, W)
    assert "pyautogui.click(0.64, 0.4," in parsing_response_to_pyautogui_code(click, H, W)
    typed = parse_action_to_structure_output("Action: type(content='it\\'s ok')", 1000, H, W)
    assert "pyperclip" in parsing_response_to_pyautogui_code(typed, H, W)
    done = parse_action_to_structure_output("Action: finished()", 1000, H, W)
    assert parsing_response_to_pyautogui_code(done, H, W) == "DONE"
