"""A run's effective training time (launcher.rundir.ettr) and its checkpoint interval from measurements
(trainer.rank.interval), from its event log: what its steps kept over the wall
time from submission, and where the rest went. End to end, a local run requeued twice:
tests/test_exact_resume.py::test_local_run_interrupted_twice_requeues_and_ends_bitwise_identical."""

from __future__ import annotations

import json

import pytest

from launcher.rundir import ettr


def test_an_attempt_killed_after_its_checkpoint_keeps_what_it_checkpointed_and_the_rest_is_named() -> None:
    """Submitted at 0; attempt 1 starts at 10, checkpoints at steps 10 and 20 (8 s and 17 s of steps) and is
    killed at 30 without saying more; attempt 2 starts at 50, resumes from step 20, steps from 56 and ends at 80
    with 20 s of steps. Kept: 17 + 20; queue 10, start-up 6 (attempt 1's is unknown), checkpoints 2, restart
    wait 20, other 5."""
    log = [{"event": "started", "time": 10.0},
           {"event": "checkpointed", "time": 20.0, "step": 10, "stall_s": 0.5, "productive_s": 8.0},
           {"event": "checkpointed", "time": 30.0, "step": 20, "stall_s": 0.5, "productive_s": 17.0},
           {"event": "started", "time": 50.0},
           {"event": "resumed", "time": 55.0, "step": 20},
           {"event": "timed", "time": 80.0, "outcome": "finished", "productive_s": 20.0, "stalled_s": 1.0,
            "first_step_at": 56.0},
           {"event": "finished", "time": 80.0, "step": 40}]
    found = ettr.of_events(0.0, log, None)
    assert found is not None
    assert found.as_json() == {"ratio": pytest.approx(37 / 80, abs=1e-4), "wall_s": 80.0, "productive_s": 37.0,
                               "queue_s": 10.0, "startup_s": 6.0, "checkpoint_s": 2.0, "redone_s": 0.0,
                               "restart_wait_s": 20.0, "other_s": 5.0}
    # Still running (no "timed" yet): the wall time runs to now, and what it did so far is its checkpoints'.
    running = ettr.of_events(0.0, log[:3], 100.0)
    assert running is not None and (running.wall_s, running.productive_s) == (100.0, 17.0)
    # A step time after the checkpoint the next attempt resumed from is redone.
    stopped = [*log[:3], {"event": "timed", "time": 31.0, "productive_s": 18.5, "stalled_s": 1.0,
                          "first_step_at": 11.0}, *log[3:]]
    assert ettr.of_events(0.0, stopped, None).redone_s == pytest.approx(1.5)  # type: ignore[union-attr]
    # A log of a version that wrote none of this: not measured.
    assert ettr.of_events(0.0, [{"event": "started", "time": 10.0}, {"event": "finished", "time": 20.0}], None) is None


def test_the_checkpoint_interval_is_young_and_dalys_from_the_runs_own_history(tmp_path) -> None:  # noqa: ANN001
    """sqrt(2 x mean time between interruptions x stall), within the bounds; before any interruption or
    checkpoint, the prior (a day, a second); a measured stall then counts."""
    from trainer.rank import interval

    first = interval.from_history(tmp_path, 30, 3600, now=100.0)
    assert (first.mtbi_s, first.stall_s, first.interruptions) == (86400.0, 1.0, 0)
    assert first.seconds == pytest.approx(415.69, abs=0.01)  # sqrt(2 x 86400 x 1)
    log = [{"event": "started", "time": 0.0}, {"event": "checkpointed", "time": 50.0, "step": 50, "stall_s": 0.5},
           {"event": "checkpointed", "time": 60.0, "step": 60, "stall_s": 0.5}, {"event": "started", "time": 200.0}]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in log))
    later = interval.from_history(tmp_path, 30, 3600, now=400.0)  # 2 starts: 1 interruption in 400 s
    assert (later.mtbi_s, later.stall_s, later.interruptions) == (400.0, 0.5, 1)
    assert later.seconds == pytest.approx(30.0)  # sqrt(400) = 20, below the lower bound
    later.measured(8.0)
    assert later.stall_s == pytest.approx(4.25) and later.seconds == pytest.approx(58.31, abs=0.01)
    assert interval.from_history(tmp_path, 30, 40, now=400.0).seconds == 30  # and never above the upper one
    # A sweep point's predecessors (RunSettings.history: the points before it): their interruptions over their time
    # pooled, and their stalls until it has its own; a folder without a log is not one.
    earlier = [tmp_path / "task-0000", tmp_path / "task-0001", tmp_path / "task-0002"]
    for folder, log in zip(earlier[:2], [[{"event": "started", "time": 0.0}, {"event": "started", "time": 100.0},
                                          {"event": "checkpointed", "time": 150.0, "step": 9, "stall_s": 2.0}],
                                         [{"event": "started", "time": 0.0}, {"event": "finished", "time": 50.0}]]):
        folder.mkdir()
        (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in log))
    (tmp_path / "task-0003").mkdir()
    point = interval.from_history(tmp_path / "task-0003", 10, 3600, now=1000.0, predecessors=[str(f) for f in earlier])
    assert (point.mtbi_s, point.interruptions, point.stall_s, point.predecessors) == (200.0, 1, 2.0, 2)
    assert point.seconds == pytest.approx(28.28, abs=0.01)  # sqrt(2 x 200 x 2)
    assert "(1 interruption(s)) over this run and 2 earlier point(s)" in interval.why(point.as_event())
