"""`coda judge calibrate` against the running judge service."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from typer.testing import CliRunner

from judge_service.cli import app
from tests.fixtures.images import image_b64
from tests.fixtures.services import RunningService

SHOT = (112, 70)


def test_calibrate_cli(judge_service: RunningService, tmp_path: Path) -> None:
    (tmp_path / "shots").mkdir()
    (tmp_path / "shots" / "0.png").write_bytes(base64.b64decode(image_b64(SHOT)))
    lines = [
        {"instruction": "Plot sin(x)", "label": True,
         "steps": [{"screenshot": "shots/0.png", "thought": "t", "action": "click()"}]},
        {"instruction": "Plot cos(x)", "label": False,
         "steps": [{"screenshot": image_b64(SHOT, (1, 2, 3))},
                   {"screenshot": "shots/0.png"}]},
    ]
    data = tmp_path / "labelled.jsonl"
    data.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = tmp_path / "metrics.json"
    result = CliRunner().invoke(app, ["calibrate", str(data), "--judge-url", judge_service.url,
                                      "--token", judge_service.tokens.inference,
                                      "--votes", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["metrics"] == {"n": 2, "tp": 0, "fp": 0, "fn": 1, "tn": 1,
                                 "precision": None, "recall": 0.0, "f1": None}
    assert report["labels"] == [True, False] and report["predictions"] == [False, False]


def test_calibrate_cli_reports_bad_files(tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"instruction": "x", "steps": [{"screenshot": "a.png"}]}\n')
    result = CliRunner().invoke(app, ["calibrate", str(data),
                                      "--judge-url", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert "bad.jsonl:1: field 'label'" in " ".join(result.output.split())
