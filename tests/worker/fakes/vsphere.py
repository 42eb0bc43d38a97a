"""Stands in for a vCenter (no vSphere here): objects with the attributes and methods pyvmomi's
managed objects have for what the provider uses, behaving as a recorded transcript says (task
states, power state after a revert, what VMware Tools report), recording every method call."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class Recorder:
    def __init__(self) -> None:
        self.calls: list[list[Any]] = []

    def add(self, *call: Any) -> None:
        self.calls.append(list(call))


class FakeTask:
    """``info.state`` walks through the recorded states, one per read."""

    def __init__(self, states: list[str], error: str | None = None) -> None:
        self._states = list(states)
        self._error = error

    @property
    def info(self) -> Any:
        state = self._states.pop(0) if len(self._states) > 1 else self._states[0]
        return SimpleNamespace(state=state, result=None,
                               error=SimpleNamespace(msg=self._error) if self._error else None)


class FakeVM:
    def __init__(self, spec: dict[str, Any], scenario: dict[str, Any], rec: Recorder) -> None:
        self.name = spec["name"]
        self._scenario = scenario
        self._rec = rec
        self.runtime = SimpleNamespace(powerState=spec["power"])
        self._guest_left: list[dict[str, Any]] = []
        self.snapshot = SimpleNamespace(rootSnapshotList=[self._tree(t) for t in spec["snapshots"]])

    def _tree(self, node: dict[str, Any]) -> Any:
        vm = self

        class Snapshot:
            def RevertToSnapshot_Task(self) -> FakeTask:
                vm._rec.add("RevertToSnapshot_Task", node["name"])
                error = vm._scenario.get("revert_error")
                if not error:
                    vm.runtime.powerState = vm._scenario["power_after_revert"]
                return FakeTask(vm._scenario["task_states"] if not error else ["running", "error"],
                                error)

        return SimpleNamespace(name=node["name"], snapshot=Snapshot(),
                               childSnapshotList=[self._tree(c) for c in node["children"]])

    @property
    def guest(self) -> Any:
        state = self._guest_left.pop(0) if len(self._guest_left) > 1 else (
            self._guest_left[0] if self._guest_left else
            {"toolsRunningStatus": "guestToolsNotRunning", "ipAddress": None})
        return SimpleNamespace(**state)

    def PowerOnVM_Task(self) -> FakeTask:
        self._rec.add("PowerOnVM_Task")
        self.runtime.powerState = "poweredOn"
        self._guest_left = list(self._scenario["guest_after_power_on"])
        return FakeTask(self._scenario["task_states"])

    def PowerOffVM_Task(self) -> FakeTask:
        self._rec.add("PowerOffVM_Task")
        self.runtime.powerState = "poweredOff"
        return FakeTask(self._scenario["task_states"])


class FakeServiceInstance:
    def __init__(self, scenario: dict[str, Any]) -> None:
        self.rec = Recorder()
        self.vm = FakeVM(scenario["vm"], scenario, self.rec)
        rec, vm = self.rec, self.vm

        def find_by_path(path: str) -> Any:
            rec.add("FindByInventoryPath", path)
            return vm if path == scenario["vm"].get("inventory_path") else None

        def container_view(root: Any, types: list[Any], recursive: bool) -> Any:
            rec.add("CreateContainerView", [getattr(t, "_wsdlName", str(t)) for t in types],
                    recursive)
            return SimpleNamespace(view=[vm], Destroy=lambda: rec.add("Destroy"))

        self.content = SimpleNamespace(
            rootFolder=SimpleNamespace(name="root"),
            searchIndex=SimpleNamespace(FindByInventoryPath=find_by_path),
            viewManager=SimpleNamespace(CreateContainerView=container_view),
            sessionManager=SimpleNamespace(Logout=lambda: rec.add("Logout")))
        self._stub = SimpleNamespace(DropConnections=lambda: rec.add("DropConnections"))

    def RetrieveContent(self) -> Any:
        self.rec.add("RetrieveContent")
        return self.content
