"""Print the requirements of the project (its dependencies and those of the given extras, the
project's own extras it names resolved) one a line, from pyproject.toml: the images install them
in a layer before the sources are copied, so a change of the code rebuilds only the layers after.

    python requirements.py [--pyproject FILE] EXTRA...
"""

from __future__ import annotations

import re
import sys
import tomllib
from typing import Any


def requirements(project: dict[str, Any], extras: list[str]) -> list[str]:
    name = str(project["name"])
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    out: list[str] = list(project.get("dependencies", []))
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        for req in optional[extra]:
            own = re.fullmatch(rf"{re.escape(name)}\[([^\]]+)\]", req.replace(" ", ""))
            if own:
                todo += own.group(1).split(",")
            elif req not in out:
                out.append(req)
    return out


def main(argv: list[str]) -> None:
    path = "pyproject.toml"
    if argv[:1] == ["--pyproject"]:
        path, argv = argv[1], argv[2:]
    with open(path, "rb") as f:
        project = tomllib.load(f)["project"]
    sys.stdout.write("\n".join(requirements(project, argv)) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
