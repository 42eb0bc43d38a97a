"""Celestia (ScienceBoard ``sci/Celestia``) on the project's build of ScienceBoard's fork
(``scripts/celestia.sh``): step ``launch``, checker ``info`` over the fork's state dump, read
through the guest agent's ``/coda/celestia`` (the dump server listens on the desktop's
loopback only). Answer tasks (C-xx, D-02, D-03) end with ``stop`` / ``ANS``, the generic rule.

* ``launch`` starts the task's command (``celestia-qt6 «PORTLIKE»``: the port is the dump
  server's; the image maps ScienceBoard's ``/app/bin/celestia-qt6`` to the build) and is done
  when the dump server answers, the main window is up, maximised as on ScienceBoard's VM
  (``wmctrl``) and focused, and Celestia's start script has brought the observer to Earth
  (its last ``goto``: keys sent before are undone by the script; ScienceBoard waits 10 s).
  A missing build makes the step *unavailable*, naming the fix.
* ``info``: ``key`` (a lambda over the dump) and ``pred`` (default ``==``) against ``value``,
  the dump asked for the task's ``query`` entities (``[{"name", "type"}]``, Celestia's
  selection types: 1 star, 2 solar-system body, 3 deep-sky object). As in ScienceBoard, an
  error inside a checker's expressions fails the check; a Celestia that cannot be read makes it
  *unavailable*.
"""

from __future__ import annotations

from typing import Any

from coda.contracts.desktop import CheckResult, CheckStatus, StepStatus
from coda.logging import get_logger
from coda.tasks import SetupStep, TaskSpec
from worker.providers.client import GuestError
from worker.providers.image import celestia as build
from worker.tasks.adapters.base import AppAdapter
from worker.tasks.adapters.celestia import app
from worker.tasks.adapters.grass.checkers import judge
from worker.tasks.context import CheckError, StepError, TaskContext, params

log = get_logger(__name__)

READY_TIMEOUT_S = 120.0
START_RADII = 6.0  # start.cel's last goto: Earth at 6 radii from its centre
DUMP_KEY = "celestia_dump"


def query(task: TaskSpec) -> list[dict[str, Any]]:
    """The task's ``query`` entities (pure; none when it has none)."""
    raw = task.source.raw if task.source is not None else None
    found = raw.get("query") if isinstance(raw, dict) else None
    return [dict(e) for e in found] if isinstance(found, list) else []


def _focus_view(ctx: TaskContext, window_id: int) -> None:
    """Maximise the main window (as ScienceBoard's VM shows it) and give it the focus."""
    for command in (["wmctrl", "-i", "-r", hex(window_id), "-b",
                     "add,maximized_vert,maximized_horz"],
                    ["wmctrl", "-i", "-a", hex(window_id)]):
        done = ctx.guest.execute(command)
        if done.returncode not in (0, None):
            raise StepError(StepStatus.FAILED, f"{' '.join(command)}: {done.error}")


def launch(ctx: TaskContext, step: SetupStep) -> str:
    p = params(step)
    if not p.get("command"):
        raise StepError(StepStatus.FAILED, "field 'command' is empty")
    command = ctx.rw(p["command"])
    program = next((w for w in command.split() if "=" not in w.split("/")[0]), "")
    if program.startswith("/"):
        found = ctx.guest.execute(["test", "-x", program])
        if found.returncode not in (0, None):
            raise StepError(StepStatus.UNAVAILABLE, f"Celestia is not built here ({program} "
                            f"is missing): {build.BUILD_HINT}")
    ctx.guest.launch(command, shell=bool(p.get("shell", False)))
    try:
        served = app.wait_for(lambda: app.version(ctx), "its dump server", READY_TIMEOUT_S)
        window = app.wait_for(lambda: app.main_window(ctx), "its main window", READY_TIMEOUT_S)
        _focus_view(ctx, window.id)
        width, height = ctx.guest.screen_size()

        def maximised() -> bool:
            w = app.main_window(ctx)
            return bool(w and w.width >= width * 0.9 and w.height >= height * 0.8)

        app.wait_for(maximised, "its main window maximised", READY_TIMEOUT_S)
        app.wait_for(start_script_ended(ctx), "its start script's travel to Earth to end",
                     READY_TIMEOUT_S)
    except TimeoutError as exc:
        raise StepError(StepStatus.FAILED, str(exc)) from exc
    log.info("celestia.ready", version=served, port=ctx.layout.portlike)
    return f"Celestia ready (dump server {served} on port {ctx.layout.portlike})"


def near_and_still(previous: float | None, entity: dict[str, Any], radii: float) -> bool:
    """Whether the observer is within ``radii`` radii of ``entity``'s surface and no longer
    moving towards it (pure: ``previous`` is the distance one poll before)."""
    distance = float(entity["distance"])
    return (distance < radii * float(entity["radius"]) and previous is not None
            and abs(distance - previous) < 1.0)


def start_script_ended(ctx: TaskContext) -> Any:
    """A probe: Celestia's start script (``start.cel``: to Sol, then to Earth, which it
    follows at 6 radii) has brought the observer to Earth. Keys sent before it ends are undone
    by its next ``goto``; ScienceBoard's launch waits 10 s for it."""
    last: list[float | None] = [None]

    def probe() -> bool:
        earth = app.dump(ctx, [{"name": "Earth", "type": 2}])["entity"]["Earth"]
        done = near_and_still(last[0], earth, START_RADII)
        last[0] = float(earth["distance"])
        return done
    return probe


def state_dump(ctx: TaskContext) -> dict[str, Any]:
    """The dump with the task's entities, read once per evaluation."""
    if DUMP_KEY not in ctx.scratch:
        try:
            ctx.scratch[DUMP_KEY] = app.dump(ctx, query(ctx.task))
        except app.Unreadable as exc:
            raise CheckError(CheckStatus.UNAVAILABLE, str(exc)) from exc
        except (app.DumpError, GuestError) as exc:
            raise CheckError(CheckStatus.ERROR, str(exc)) from exc
    state: dict[str, Any] = ctx.scratch[DUMP_KEY]
    return state


def check_info(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    return judge("info", item, state_dump(ctx))


# expected answers this build's data does not give (CelestiaContent at d156a8b5 with the older
# Hipparcos stars.dat; ScienceBoard's VM has its own package's data): answer -> why
VM_DATA_ANSWERS: dict[str, str] = {
    "3060": "the star closest to Sol is Proxima Centauri, whose temperature this build's "
            "stars-near.stc gives as 2901 K, not 3060 K",
    "TYC 2082-2143-1": "the only G0 star is a fact of the VM's Gaia-based star catalogue; this "
                       "build's Hipparcos stars.dat has many G0 stars",
    "16176": "this build's openclusters.dsc lists 6476 open clusters, not 16176",
    "4.47": "the closest galaxy in this build's galaxies.dsc (Sagittarius dSph, 65230 ly, "
            "absolute magnitude -12.67) is of apparent magnitude 3.84, not 4.47",
}


def data_blocker(task: TaskSpec) -> str | None:
    """Why this build's data cannot give ``task`` a real verdict (None: it can): an expected
    answer only ScienceBoard's VM data gives (:data:`VM_DATA_ANSWERS`; pure)."""
    for ev in task.evaluators:
        item = ev.model_dump()
        if item.get("type") == "stop" and item.get("value") == "ANS":
            answer = " ".join(str(a) for a in item.get("args", []))
            if answer in VM_DATA_ANSWERS:
                return f"its answer needs ScienceBoard's VM data: {VM_DATA_ANSWERS[answer]}"
    return None


CELESTIA = AppAdapter(name="Celestia", steps={"launch": launch},
                      checkers={"info": check_info})
