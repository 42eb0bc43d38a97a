"""A 2D plot's colour from KAlgebra's pixels: synthetic screens drawn as Debian's KAlgebra draws
the Functions list's row (check box, colour square, selection) and the 2D view (grid, axes, an
antialiased curve); the real application's reading is in test_kalgebra_tasks.py (B-04)."""

from __future__ import annotations

import pytest
from PIL import Image, ImageDraw

from worker.tasks.adapters.kalgebra import colours

HIGHLIGHT = (48, 140, 198)
NAME_CELL, PLOT_CELL, VIEW = (807, 222, 46, 19), (853, 222, 234, 19), (192, 208, 604, 425)


def screen(colour: colours.RGB, selected: bool, curve: colours.RGB | None = None,
           cursor: bool = True) -> Image.Image:
    image = Image.new("RGB", (1280, 800), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    background = HIGHLIGHT if selected else (255, 255, 255)
    draw.rectangle((807, 222, 1086, 240), fill=background)
    draw.rectangle((809, 224, 821, 236), fill=(255, 255, 255), outline=(188, 188, 188))
    draw.line((811, 230, 819, 226), fill=(0, 0, 0))  # the check mark
    draw.rectangle((830, 223, 845, 238), fill=colours.tint(colour, HIGHLIGHT) if selected
                   else colour)
    draw.text((860, 226), "x->e^x-1", fill=(255, 255, 255) if selected else (0, 0, 0))
    for x in range(200, 796, 20):
        draw.line((x, 208, x, 632), fill=(202, 202, 202))
    draw.line((192, 420, 796, 420), fill=(100, 100, 255))
    if curve is not None:  # an antialiased thick line: its edges blend into the background
        draw.line((192, 440, 500, 420, 540, 208), fill=curve, width=3)
        edge = tuple((c + 255) // 2 for c in curve)
        draw.line((192, 442, 500, 422, 542, 208), fill=edge, width=1)
    if cursor:  # the pointer's black cross over the view
        draw.line((630, 400, 650, 400), fill=(0, 0, 0), width=2)
        draw.line((640, 390, 640, 410), fill=(0, 0, 0), width=2)
    return image


@pytest.mark.parametrize("colour", [(0, 0, 0), (0, 0, 128), (4, 0, 255), (1, 1, 1)])
def test_a_selected_rows_colour_is_the_views_colour_that_tints_to_its_square(
        colour: colours.RGB) -> None:
    image = screen(colour, selected=True, curve=colour)
    assert colours.plot_colour(image, NAME_CELL, PLOT_CELL, True, VIEW) == colour


def test_an_unselected_rows_colour_is_its_square() -> None:
    image = screen((0, 128, 128), selected=False)
    assert colours.plot_colour(image, NAME_CELL, PLOT_CELL, False, VIEW) == (0, 128, 128)
    white = screen((255, 255, 255), selected=False)  # the square has the row's colour
    assert colours.plot_colour(white, NAME_CELL, PLOT_CELL, False, VIEW) == (255, 255, 255)


def test_a_selected_plot_not_in_the_view_is_unreadable() -> None:
    image = screen((0, 0, 128), selected=True, curve=None, cursor=False)
    with pytest.raises(colours.Unreadable, match="hidden or out of the view"):
        colours.plot_colour(image, NAME_CELL, PLOT_CELL, True, VIEW)


def test_tint_is_qts_selected_icon_and_the_name_is_qcolors() -> None:
    # measured on Debian's KAlgebra: black and #0400ff under the Fusion highlight
    assert colours.tint((0, 0, 0), HIGHLIGHT) == (14, 42, 59)
    assert colours.tint((4, 0, 255), HIGHLIGHT) == (17, 42, 237)
    assert colours.hex_colour((0, 0, 128)) == "#000080"
