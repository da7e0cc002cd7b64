"""A Spark job's progress lines, as the CLI and the verification activity read them."""

from __future__ import annotations

import json

from switchyard.verify.submit import Progress

STAGES = [{"stage": 3, "done": 5, "total": 12, "failed": 1}, {"stage": 4, "done": 0, "total": 2, "failed": 0}]


def test_a_progress_line_gives_stages_tasks_and_records() -> None:
    progress = Progress.parse(f"progress: {json.dumps({'stages': STAGES, 'records': 120_000})}")
    assert progress == Progress(((3, 5, 12, 1), (4, 0, 2, 0)), 120_000)
    assert (progress.done, progress.total, progress.failed) == (5, 14, 1)
    assert str(progress) == "5/14 tasks (stage 3, stage 4), 1 failed and retried, 120,000 records"
    assert progress.details() == {
        "stages": STAGES, "tasks_done": 5, "tasks_total": 14, "tasks_failed": 1, "records": 120_000,
    }  # fmt: skip


def test_other_lines_and_damaged_ones_are_not_progress() -> None:
    damaged = [
        "progress: 3/4",
        'progress: {"stages": 1}',
        'progress: {"stages": [{"stage": 1}], "records": 2}',
    ]
    for line in ["25/11/23 WARN TaskSetManager: Lost task", *damaged, ""]:
        assert Progress.parse(line) is None
    assert str(Progress((), 7)) == "0/0 tasks (between stages), 7 records"
