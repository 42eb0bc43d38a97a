#!/usr/bin/env python3
"""Stands in for VMware's ``vmrun`` (no hypervisor here): replays a recorded transcript.

Environment: CODA_FAKE_VMRUN_TRANSCRIPT (JSON: {"mode": "sequence" | "lookup", "calls": [{argv,
stdout, rc, creates?, delay_s?}]}), CODA_FAKE_VMRUN_VARS (JSON placeholders -> values),
CODA_FAKE_VMRUN_LOG (every call appended as a JSON line: argv, start, end, matched).
In "sequence" mode each call must be the next recorded one; in "lookup" mode any recorded call
matches (for concurrent callers). An unexpected call prints vmrun's error form and exits 255.
"""

import fcntl
import json
import os
import sys
import time
from pathlib import Path


def fill(text, values):
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def main():
    transcript = json.loads(Path(os.environ["CODA_FAKE_VMRUN_TRANSCRIPT"]).read_text())
    values = json.loads(os.environ.get("CODA_FAKE_VMRUN_VARS", "{}"))
    log = Path(os.environ["CODA_FAKE_VMRUN_LOG"])
    argv = sys.argv[1:]
    start = time.time()
    with log.open("a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        done = [json.loads(line) for line in f if line.strip()]
        calls = transcript["calls"]
        if transcript.get("mode", "sequence") == "sequence":
            index = sum(1 for d in done if d["matched"] is not None)
            candidates = [index] if index < len(calls) else []
        else:
            used = {d["matched"] for d in done}
            candidates = [i for i in range(len(calls)) if i not in used]
        match = next((i for i in candidates
                      if [fill(a, values) for a in calls[i]["argv"]] == argv), None)
        f.write(json.dumps({"argv": argv, "start": start, "end": None, "matched": match}) + "\n")
    if match is None:
        sys.stdout.write(f"Error: unexpected vmrun call {argv}\n")
        sys.exit(255)
    call = calls[match]
    time.sleep(call.get("delay_s", 0))
    if "creates" in call:
        created = Path(fill(call["creates"], values))
        created.parent.mkdir(parents=True, exist_ok=True)
        created.write_text('.encoding = "UTF-8"\nconfig.version = "8"\n')
    with log.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps({"argv": argv, "start": start, "end": time.time(),
                            "matched": None, "finished": match}) + "\n")
    sys.stdout.write(fill(call.get("stdout", ""), values))
    sys.exit(call.get("rc", 0))


main()
