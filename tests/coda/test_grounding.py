"""coda.grounding: the OCR executor's rules on synthetic OCR lines (pure, no OCR)."""

from __future__ import annotations

import pytest

from coda.grounding import (
    OcrLine,
    decide,
    keys_in,
    line_from_quad,
    match_phrase,
    norm,
    quoted,
    score_line,
    step_sentence,
    target_phrases,
    typed_text,
)

MENU = OcrLine("File Edit View Help", 0, 0, 190, 20, 0.99)
SCREEN = [
    MENU,
    OcrLine("Save As...", 10, 100, 80, 120, 0.97),
    OcrLine("Save", 10, 60, 50, 80, 0.98),
    OcrLine("Hide toolbars", 900, 350, 1000, 370, 0.95),
    OcrLine("Name:", 10, 200, 50, 220, 0.99),
    OcrLine("OK", 600, 700, 630, 720, 0.99),
    OcrLine("Cancel", 700, 700, 760, 720, 0.99),
    OcrLine("Fi1e name", 300, 500, 380, 520, 0.8),
]


def _inside(d, line: OcrLine) -> bool:
    return line.x0 <= d.x <= line.x1 and line.y0 <= d.y <= line.y1


def test_line_from_quad_is_the_axis_aligned_box() -> None:
    line = line_from_quad([[10, 5], [50, 6], [51, 20], [9, 19]], "OK", 0.9)
    assert (line.x0, line.y0, line.x1, line.y1, line.score) == (9, 5, 51, 20, 0.9)


def test_norm_drops_case_punctuation_and_mnemonics() -> None:
    assert norm("  &Save  As... ") == "save as"
    assert norm("Name:") == "name"


def test_exact_match_beats_containment_and_fuzzy() -> None:
    m = match_phrase("save", SCREEN)
    assert m is not None and m.line.text == "Save" and m.score == 1.0


def test_word_inside_a_line_points_at_the_word() -> None:
    m = score_line("Edit", MENU)
    assert m is not None and m.score == 0.9
    assert 40 < m.x < 90  # "Edit" is the second word of the menu bar, not its centre (95)
    assert score_line("dit", MENU) is None  # whole words only


def test_fuzzy_match_survives_an_ocr_slip() -> None:
    m = match_phrase("File name", SCREEN)
    assert m is not None and m.line.text == "Fi1e name" and 0.64 <= m.score < 0.8
    assert match_phrase("Preferences", SCREEN) is None


def test_fuzzy_match_of_words_inside_a_longer_line() -> None:
    bar = OcrLine("File Edit Too1s LaTeX Help", 0, 0, 260, 20)
    m = score_line("Tools", bar)
    assert m is not None and 0.6 <= m.score < 0.75 and 90 < m.x < 150
    assert score_line("Macros", bar) is None


def test_words_run_together_by_the_ocr() -> None:
    bar = OcrLine("BibliographyMacrosViewOptionsHelp", 0, 0, 330, 20)
    m = score_line("Options", bar)
    assert m is not None and m.score == 0.7 and 230 < m.x < 290


def test_ties_go_to_the_topmost_line() -> None:
    lines = [OcrLine("OK", 0, 300, 20, 320), OcrLine("OK", 0, 100, 20, 120)]
    m = match_phrase("ok", lines)
    assert m is not None and m.line.y0 == 100


def test_quoted_texts_ignore_apostrophes() -> None:
    text = "Celestia's view: click 'File' then \"Save\", \u2018OK\u2019 and \u201cNo\u201d"
    assert quoted(text) == ["File", "Save", "OK", "No"]


def test_step_is_the_last_sentence_with_a_verb() -> None:
    found = step_sentence("The search bar is open. I press Escape to close it.")
    assert found is not None and found[1] == "hotkey" and found[0].startswith("I press")
    assert step_sentence("The File menu is open now.") is None


@pytest.mark.parametrize(("sentence", "keys"), [
    ("I save the document with Ctrl+S.", "ctrl s"),
    ("I press ctrl + shift + t.", "ctrl shift t"),
    ("I press Enter.", "enter"),
    ("I press the Escape key.", "escape"),
    ("I press k to slow down time.", "k"),
    ("I press 'K'.", "K"),
    ("I press F5 to compile.", "f5"),
    ("I press the down arrow.", "down"),
])
def test_keys(sentence: str, keys: str) -> None:
    assert keys_in(sentence, sentence.lower().find("press") + 5
                   if "press" in sentence else 0) == keys


@pytest.mark.parametrize(("sentence", "text"), [
    ("I type 'hello world' in the editor.", "hello world"),
    ("I type \"x: A. B\" and press Enter.", "x: A. B\n"),
    ("I type the assignment p:=log(3)/log(2) and press Enter to store it.", "p:=log(3)/log(2)\n"),
    ("I type the answer.", None),
])
def test_typed_text(sentence: str, text: str | None) -> None:
    assert typed_text(sentence, sentence.find("type") + 4) == text


def test_target_phrases_follow_menu_paths_deepest_first() -> None:
    s = "I click File > Save As to save a copy."
    assert target_phrases(s, s.find("click") + 5)[:2] == ["Save As", "File"]


def test_target_phrase_drops_articles_and_the_kind_of_element() -> None:
    s = "I click on the Hide toolbars button to hide them."
    assert target_phrases(s, s.find("click") + 5) == ["Hide toolbars"]


def test_decide_click_the_named_element() -> None:
    d = decide("The context menu is open: Copy, Hide toolbars. I click Hide toolbars.", SCREEN)
    assert d.kind == "click" and _inside(d, SCREEN[3]) and d.target == "Hide toolbars"


def test_decide_quoted_button() -> None:
    d = decide("A dialog asks to confirm. I click the 'OK' button.", SCREEN)
    assert d.kind == "click" and _inside(d, SCREEN[5])


def test_decide_menu_path_opens_the_closed_menu() -> None:
    d = decide("I open File > Properties.", SCREEN)  # Properties is not on screen yet
    assert d.kind == "click" and d.target == "File" and _inside(d, MENU) and d.x < 50


def test_decide_pointer_kinds() -> None:
    assert decide("I double-click 'Cancel'.", SCREEN).kind == "double_click"
    assert decide("I right-click on Cancel to see its menu.", SCREEN).kind == "right_click"


def test_decide_field_by_its_label_clicks_right_of_it() -> None:
    d = decide("I click the Name field.", SCREEN, image_w=1280)
    assert d.kind == "click" and d.x is not None and d.x > SCREEN[4].x1
    assert d.y == pytest.approx(210)


def test_decide_unquoted_target_falls_back_to_lines_in_the_sentence() -> None:
    d = decide("Hide toolbars is the entry I need, so I click it.", SCREEN)
    assert d.kind == "click" and _inside(d, SCREEN[3])


def test_decide_type_hotkey_scroll_finished() -> None:
    assert decide("I type 'abc'.", SCREEN).text == "abc"
    assert decide("I save with Ctrl+S.", SCREEN).text == "ctrl s"
    d = decide("I scroll down the list.", SCREEN)
    assert (d.kind, d.text, d.x) == ("scroll", "down", None)
    assert decide("The file is saved. The task is complete.", SCREEN).kind == "finished"


def test_decide_says_what_it_could_not_ground() -> None:
    d = decide("I click the 'Preferences' button.", SCREEN)
    assert d.kind == "ungrounded" and d.target == "Preferences" and "Preferences" in d.reason
    assert decide("The screen shows a plot.", SCREEN).kind == "ungrounded"
    assert decide("I type the answer.", SCREEN).kind == "ungrounded"


@pytest.mark.parametrize(("plan", "kind", "text"), [
    ("log_2(3) is log(3)/log(2); I type p:=log(3)/log(2) and press Enter.", "type",
     "p:=log(3)/log(2)\n"),
    ("First the normal's length: I type n:=sqrt(3^2+4^2+5^2) and press Enter.", "type",
     "n:=sqrt(3^2+4^2+5^2)\n"),
    ("a is bigger than b; I type p:=a and press Enter.", "type", "p:=a\n"),
    ("p now holds the bigger one, e^π. The task is complete.", "finished", None),
    ("I think p already holds the distance. The task is complete.", "finished", None),
    ("I open the 2D Graph tab to compare the curves.", "click", None),
    ("Time now runs 10x slower; Shift+K halves it again, to 20x slower.", "hotkey", "shift k"),
])
def test_plans_as_the_kalgebra_curricula_and_demo_write_them(plan: str, kind: str,
                                                            text: str | None) -> None:
    screen = [OcrLine("Console", 300, 180, 360, 200), OcrLine("2D Graph", 380, 180, 450, 200)]
    d = decide(plan, screen)
    assert d.kind == kind and d.text == text
    if kind == "click":
        assert _inside(d, screen[1])
