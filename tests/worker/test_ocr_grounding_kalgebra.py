"""The ``ocr`` executor on the real KAlgebra: a plan naming a menu is grounded from the
screenshot alone (OCR, the production UI-TARS parser), the click lands inside the menu's AT-SPI
box, and sent to the desktop it opens that menu."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from benchmarks.grounding import A11Y_ENV, ground, menubar, targets
from coda.actions import Click
from coda.inference.ocr_executor import OcrExecutorBackend, RapidOcrEngine
from tests.fixtures.waiting import wait_for
from worker.providers.local import LocalDesktop


def _tree(desktop: LocalDesktop) -> str:
    assert desktop.guest is not None
    return str(desktop.guest.request("GET", "/accessibility", timeout=120).json()["AT"])


def test_a_menu_named_by_the_plan_is_grounded_and_opens(desktop: LocalDesktop) -> None:
    desktop.reset()
    guest = desktop.guest
    assert guest is not None
    guest.launch(f"env {A11Y_ENV} kalgebra", shell=True)
    screen = guest.screen_size()

    def bar() -> list[dict[str, Any]]:
        xml = _tree(desktop)
        names = menubar(xml)
        return [t for t in targets(xml, screen) if t["name"] in names]

    entries = wait_for(bar, "KAlgebra's menu bar in its AT-SPI tree", 90)
    target = entries[0]
    backend = OcrExecutorBackend(RapidOcrEngine())
    x0, y0, x1, y1 = target["box"]
    seen: list[Any] = []

    def grounded() -> Click | None:
        """The plan grounded on a screenshot taken now: on a busy machine the menu bar is in
        the tree before KAlgebra has painted it, and a screenshot of an unpainted window has
        no menu text to find (the executor then says what it could not ground)."""
        png = guest.screenshot(fmt="png")
        url = "data:image/png;base64," + base64.b64encode(png).decode()
        action, raw, _ = asyncio.run(ground(backend, url, f"I open the {target['name']} menu.",
                                            screen))
        seen[:] = [action, raw]
        return action if isinstance(action, Click) else None

    action = wait_for(grounded, f"KAlgebra's {target['name']} menu on the screen", 120,
                      logs=lambda: f"grounded: {seen}")
    assert x0 <= action.x <= x1 and y0 <= action.y <= y1, (target, action)
    desktop.act(action)

    def opened() -> bool:
        xml = _tree(desktop)
        return bool([t for t in targets(xml, screen, target["name"])
                     if t["role"].endswith("menu-item") and t["name"] not in menubar(xml)])

    wait_for(opened, f"KAlgebra's {target['name']} menu open", 30)
