"""Calibration metrics and the labelled-file reader."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from judge_service.calibrate import CalibrationError, compute_metrics, image_ref, load_labelled


def test_metrics() -> None:
    pairs = [(True, True)] * 3 + [(True, False)] + [(False, True)] * 2 + [(False, False)] * 4
    m = compute_metrics(pairs)
    assert (m.n, m.tp, m.fp, m.fn, m.tn) == (10, 3, 1, 2, 4)
    assert m.precision == pytest.approx(0.75)
    assert m.recall == pytest.approx(0.6)
    assert m.f1 == pytest.approx(2 * 0.75 * 0.6 / 1.35)


def test_metrics_without_predictions_or_positives() -> None:
    m = compute_metrics([(False, True), (False, False)])
    assert m.precision is None and m.recall == 0.0 and m.f1 is None
    m = compute_metrics([(True, False)])
    assert m.precision == 0.0 and m.recall is None
    assert compute_metrics([]).n == 0


def test_load_labelled_names_line_and_field(tmp_path: Path) -> None:
    good = '{"instruction": "x", "steps": [{"screenshot": "a.png"}], "label": true}'
    path = tmp_path / "set.jsonl"
    path.write_text(good + "\n\n" + '{"instruction": "y", "steps": [], "label": false}\n')
    with pytest.raises(CalibrationError, match=r"set.jsonl:3: field 'steps'"):
        load_labelled(path)
    path.write_text(good + "\n")
    assert load_labelled(path)[0].label is True
    with pytest.raises(CalibrationError, match="no such file"):
        load_labelled(tmp_path / "missing.jsonl")


def test_image_ref_reads_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(b"\x89PNG fake")
    ref = image_ref("a.png", tmp_path)
    assert ref.b64 == base64.b64encode(b"\x89PNG fake").decode()
    assert image_ref("aGVsbG8=", tmp_path).b64 == "aGVsbG8="
