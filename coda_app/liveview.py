"""The terminal view of ``coda up``: slots, episodes, success, queues, judge and groups, the
planner version, the dashboard's address (a Rich table, redrawn from ``/v1/status``)."""

from __future__ import annotations

from rich.console import Group as RichGroup
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from coda.contracts.master_api import StatusReport
from coda.contracts.services_api import BASE_VERSION

LIVE_S = 60.0
"""A worker counts while its last heartbeat is this recent."""


def summary(report: StatusReport) -> dict[str, int | float | None]:
    """The figures the view shows (pure): over the batches in the report."""
    done = sum(b.progress.completed + b.progress.failed for b in report.batches)
    total = sum(b.progress.total for b in report.batches)
    succeeded = sum(b.progress.succeeded for b in report.batches)
    live = [w for w in report.workers if w.last_heartbeat is not None
            and (report.generated_at - w.last_heartbeat).total_seconds() < LIVE_S]
    busy = sum(w.busy_slots for w in live)
    slots = sum(w.slots for w in live)
    return {"episodes_done": done, "episodes_total": total, "succeeded": succeeded,
            "success_pct": round(100 * succeeded / done, 1) if done else None,
            "busy_slots": busy, "slots": slots,
            "updates": sum(v.updates for v in report.training)}


def render(report: StatusReport, *, url: str, planner_version: str | None,
           problems: list[str]) -> RichGroup:
    s = summary(report)
    head = Table.grid(padding=(0, 2))
    head.add_row("dashboard", f"[link={url}/]{url}/[/link]")
    head.add_row("planner version", planner_version or BASE_VERSION)
    head.add_row("slots busy", f"{s['busy_slots']} / {s['slots']}")
    pct = f"{s['success_pct']}%" if s["success_pct"] is not None else "-"
    head.add_row("episodes", f"{s['episodes_done']} / {s['episodes_total']} done, "
                             f"{s['succeeded']} succeeded ({pct})")
    head.add_row("judged", f"{report.verdicts.get('judged', 0)} "
                           f"({report.verdicts.get('correct', 0)} correct)")
    head.add_row("groups", ", ".join(f"{k} {v}" for k, v in sorted(report.groups.items()))
                 or "-")
    head.add_row("trainer updates", str(s["updates"]))
    queues = Table("queue", "queued", "leased", box=None)
    for q in report.queues:
        queues.add_row(q.kind.value, str(q.queued), str(q.leased))
    parts: list[Panel | Table | Text] = [Panel(head, title="CODA", expand=False), queues]
    if problems:  # what coda up restarted (coda_app.supervise)
        parts.append(Text("restarts: " + "; ".join(problems) + " (see their logs)",
                          style="yellow"))
    parts.append(Text("Ctrl-C stops everything; the next `coda up` keeps the data", style="dim"))
    return RichGroup(*parts)


def one_line(report: StatusReport, planner_version: str | None) -> str:
    """The same figures in one log line (when stdout is not a terminal)."""
    s = summary(report)
    return (f"episodes {s['episodes_done']}/{s['episodes_total']} done, {s['succeeded']} "
            f"succeeded; slots {s['busy_slots']}/{s['slots']}; judged "
            f"{report.verdicts.get('judged', 0)}; groups {report.groups or {}}; "
            f"updates {s['updates']}; planner {planner_version or 'base'}")
