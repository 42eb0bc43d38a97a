"""A 2D plot's colour from KAlgebra's pixels (pure functions over a screenshot).

Facts of Debian's KAlgebra (Qt 5, Fusion) this reads:

* The Functions panel's list draws, in each plot's Name cell, the plot's colour as a solid
  square (the row's decoration) beside its visibility check box.
* In a *selected* row Qt draws that square tinted: the highlight colour at alpha 0.3 over it
  (``QCommonStyle::generatedIconPixmap``, ``QIcon::Selected``), so the square gives the colour
  only to within rounding; the selected row's background is that highlight colour.
* The 2D view draws each visible plot with the plot's exact colour inside the line (only its
  edges are antialiased), so the colour whose tint matches the square and that has the most
  pixels in the view is the plot's colour.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from PIL import Image

Box = Sequence[int]  # x, y, width, height (screen)
RGB = tuple[int, int, int]

TINT_ALPHA = 77  # 0.3 of 255: Qt's selected-icon tint
TINT_SLACK = 2  # Qt's integer blending rounds differently from this formula
SQUARE_SHARE = 0.15  # the colour square fills about 29% of the Name cell
MIN_VIEW_PIXELS = 20  # a plot's colour must fill at least this many pixels in the view


class Unreadable(ValueError):
    """The colour cannot be told from the pixels."""


def hex_colour(rgb: RGB) -> str:
    """``QColor::name()``: ``#rrggbb``, lower case."""
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def _colours(image: Image.Image, box: Box) -> Counter[RGB]:
    x, y, w, h = box
    crop = image.convert("RGB").crop((x, y, x + w, y + h))
    counts: Counter[RGB] = Counter()
    for n, rgb in crop.getcolors(maxcolors=max(1, w * h)) or []:
        if isinstance(rgb, tuple):
            counts[(rgb[0], rgb[1], rgb[2])] = n
    return counts


def tint(colour: RGB, highlight: RGB) -> RGB:
    """The square's colour in a selected row: ``highlight`` at alpha 0.3 over ``colour``."""
    return tuple(  # type: ignore[return-value]
        (c * (255 - TINT_ALPHA) + h * TINT_ALPHA) // 255 for c, h in zip(colour, highlight,
                                                                           strict=True))


def row_colours(image: Image.Image, name_cell: Box, plot_cell: Box) -> tuple[RGB, RGB]:
    """(the colour square's colour, the row's background) of one row of the list: the
    background is the plot cell's commonest colour; the square is the Name cell's commonest
    other colour where it fills a square's share of the cell, else it has the background's
    colour."""
    background = _colours(image, plot_cell).most_common(1)[0][0]
    cell = _colours(image, name_cell)
    area = max(1, name_cell[2] * name_cell[3])
    others = [(rgb, n) for rgb, n in cell.most_common() if rgb != background]
    if others and others[0][1] >= SQUARE_SHARE * area:
        return others[0][0], background
    return background, background


def plot_colour(image: Image.Image, name_cell: Box, plot_cell: Box, selected: bool,
                view: Box) -> RGB:
    """The colour of the plot in this row of the Functions list: its square where the row is
    not selected; where it is, the view's colour with the most pixels whose tint is the
    square's (:class:`Unreadable` when none is in the view: the plot is hidden or off it)."""
    square, background = row_colours(image, name_cell, plot_cell)
    if not selected:
        return square
    candidates = [(n, rgb) for rgb, n in _colours(image, view).items()
                  if n >= MIN_VIEW_PIXELS and all(
                      abs(t - s) <= TINT_SLACK for t, s in zip(tint(rgb, background), square,
                                                              strict=True))]
    if not candidates:
        raise Unreadable(f"the selected plot's square is {hex_colour(square)} (tinted by the "
                         f"selection {hex_colour(background)}) and no colour of the 2D view "
                         f"tints to it: the plot is hidden or out of the view")
    return max(candidates)[1]
