"""Correct typing of any character with pyautogui on X11.

pyautogui decides "needs Shift" from a fixed US character list and uses the first keycode X
reports for a keysym. On the default Xvfb/Xorg map ``<`` sits unshifted on the 102nd key, so
pyautogui presses Shift+that key and types ``>`` (a known OSWorld complaint), and characters
missing from the map (``λ``, ``∃``) are dropped silently. Here each printable character is
looked up in the live keymap (keycode and shift level); one not on the map is bound to a spare
keycode for the key press, as xdotool does.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from Xlib import XK, X
from Xlib.ext.xtest import fake_input


def char_keysym(ch: str) -> int:
    """X keysym of a character: Latin-1 code points are their own keysym, others Unicode."""
    code = ord(ch)
    return code if 0x20 <= code <= 0xFF else 0x01000000 | code


class KeyTyper:
    def __init__(self, d: Any) -> None:
        self.d = d
        self.shift = d.keysym_to_keycode(XK.string_to_keysym("Shift_L"))
        self._spare: int | None = None

    def lookup(self, ch: str) -> tuple[int, bool]:
        """(keycode, needs shift) for ``ch``, binding a spare keycode when none has it."""
        sym = char_keysym(ch)
        levels = sorted((idx, kc) for kc, idx in self.d.keysym_to_keycodes(sym) if idx in (0, 1))
        if levels:
            idx, kc = levels[0]
            return kc, idx == 1
        kc = self._spare_keycode()
        self.d.change_keyboard_mapping(kc, [(sym, sym)])
        self.d.sync()
        return kc, False

    def _spare_keycode(self) -> int:
        if self._spare is None:
            first = self.d.display.info.min_keycode
            count = self.d.display.info.max_keycode - first + 1
            mapping = self.d.get_keyboard_mapping(first, count)
            empty = [first + i for i, syms in enumerate(mapping) if not any(syms)]
            if not empty:
                raise RuntimeError("no spare keycode to type a character outside the keymap")
            self._spare = empty[-1]
        return self._spare

    def down(self, ch: str) -> int:
        kc, shift = self.lookup(ch)
        if shift:
            fake_input(self.d, X.KeyPress, self.shift)
        fake_input(self.d, X.KeyPress, kc)
        if shift:
            fake_input(self.d, X.KeyRelease, self.shift)
        self.d.sync()
        return kc

    def up(self, kc: int) -> None:
        fake_input(self.d, X.KeyRelease, kc)
        self.d.sync()


def install(pyautogui: ModuleType) -> None:
    """Route single printable characters through :class:`KeyTyper`; named keys (``enter``,
    ``ctrl``, ...) and whitespace keep pyautogui's own handling."""
    x11: Any = pyautogui.platformModule
    typer = KeyTyper(x11._display)
    original_down, original_up = x11._keyDown, x11._keyUp
    held: dict[str, int] = {}

    def key_down(key: Any) -> None:
        if isinstance(key, str) and len(key) == 1 and key.isprintable() and key != " ":
            held[key] = typer.down(key)
            return
        original_down(key)

    def key_up(key: Any) -> None:
        kc = held.pop(key, None) if isinstance(key, str) else None
        if kc is None:
            original_up(key)
            return
        typer.up(kc)

    x11._keyDown, x11._keyUp = key_down, key_up
