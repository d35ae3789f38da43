"""Checkpoints: atomic, checksummed, the newest K kept; a bad one is reported and the previous used;
and a checkpoint holds everything a resumed run needs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch

from tests.helpers import last_json, run_submit
from trainer.config.job import JobConfig, RunSettings
from trainer.rank import checkpoint, durable, events, rundir
from trainer.rank.stopping import StopRequested

if TYPE_CHECKING:
    from trainer.rank.stopping import StopProtocol, StopSignals
from trainer.runners.dispatch import run_job

NO_LAUNCHER: dict[str, str] = {}  # run_job() reads the distributed environment from this: one process


def _save(folder: Path, step: int, keep: int = 3) -> Path:
    return checkpoint.save(folder, step, {"w": torch.full((4,), float(step)), "step": step}, keep)


def test_keeps_the_newest_k_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40, 50):
        _save(tmp_path, step, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000000040.pt", "ckpt-000000050.pt"]
    found = checkpoint.load_newest_good(tmp_path)
    assert found is not None and found.path.name == "ckpt-000000050.pt" and found.state["step"] == 50


def test_an_asynchronous_checkpoint_holds_its_steps_state_as_a_synchronous_one_would(tmp_path: Path) -> None:
    """The loop changes the state while the write is in flight: the file holds the state of its step, byte for
    byte what a synchronous save writes (a view keeps sharing its tensor's storage); a failed write is raised by
    the next wait, in the training thread."""
    def state() -> dict[str, Any]:
        weights = torch.arange(300_000, dtype=torch.float32)
        return {"w": weights, "head": weights[:10], "step": 1}

    live, writer = state(), checkpoint.Writer()
    writer.start(tmp_path / "async", 1, checkpoint.frozen(live), keep=3)
    live["w"].add_(1.0)  # the next steps, while it writes
    writer.wait()
    written = checkpoint.save(tmp_path / "sync", 1, state(), keep=3)
    assert (tmp_path / "async" / written.name).read_bytes() == written.read_bytes()
    loaded = checkpoint.read(tmp_path / "async" / written.name)
    assert loaded["head"].untyped_storage().data_ptr() == loaded["w"].untyped_storage().data_ptr()
    (tmp_path / "not-a-folder").write_text("")
    writer.start(tmp_path / "not-a-folder", 2, checkpoint.frozen(live), keep=3)
    with pytest.raises(RuntimeError, match="the checkpoint of step 2 could not be written: FileExistsError"):
        writer.wait()
    writer.wait()  # raised once
    # What a state on a GPU is staged through (checkpoint.to_host, pinned there; here the same copy without pinning):
    # the same bytes as deepcopy's, the view still sharing, untouched by the steps after it.
    later = state()
    staged = checkpoint.to_host(later, pin=False)
    later["w"].add_(1.0)  # the next steps
    assert staged["head"].untyped_storage().data_ptr() == staged["w"].untyped_storage().data_ptr()
    assert durable.encode(staged) == durable.encode(checkpoint.frozen(state()))


def test_a_leftover_temporary_file_of_a_killed_writer_is_ignored_then_removed(tmp_path: Path) -> None:
    _save(tmp_path, 10)
    (tmp_path / ".ckpt-000000020.pt.tmp-99999").write_bytes(b"half a checkpoint")
    found = checkpoint.load_newest_good(tmp_path)
    assert found is not None and found.path.name == "ckpt-000000010.pt" and not found.skipped
    _save(tmp_path, 30)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000000010.pt", "ckpt-000000030.pt"]


@pytest.mark.parametrize("damage", ["truncated", "checksum", "empty"])
def test_a_bad_newest_checkpoint_is_reported_and_the_previous_one_used(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str) -> None:
    _save(tmp_path, 10)
    newest = _save(tmp_path, 20)
    raw = newest.read_bytes()
    if damage == "truncated":
        newest.write_bytes(raw[: len(raw) // 2])
    elif damage == "checksum":
        flipped = bytearray(raw)
        flipped[-10] ^= 0xFF  # one byte of the payload: the stored SHA-256 no longer matches
        newest.write_bytes(bytes(flipped))
    else:
        newest.write_bytes(b"")
    found = checkpoint.load_newest_good(tmp_path)
    assert found is not None and found.path.name == "ckpt-000000010.pt" and found.state["step"] == 10
    assert [p.name for p, _ in found.skipped] == ["ckpt-000000020.pt"]
    err = capsys.readouterr().err
    assert "cannot load" in err and "ckpt-000000020.pt" in err and "trying the previous one" in err
    if damage == "checksum":
        assert "checksum mismatch" in err


def test_when_no_checkpoint_loads_training_starts_from_scratch_and_says_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _save(tmp_path, 10).write_bytes(b"garbage")
    assert checkpoint.load_newest_good(tmp_path) is None
    assert "starting from scratch" in capsys.readouterr().err


def _job(**fields: object) -> JobConfig:
    base = {"name": "ckpt", "epochs": 2, "batch_size_per_rank": 64, "lr_schedule": "onecycle",
            "eval_every_epochs": 2, "log_every_steps": 1000, "checkpoint_every_steps": 0}
    return JobConfig(**{**base, **fields})  # type: ignore[arg-type]


def _train(run_dir: Path, **fields: object) -> StopRequested | None:
    try:
        run_job(_job(**fields), RunSettings(run_dir=str(run_dir)), environ=NO_LAUNCHER)
    except StopRequested as stop:
        return stop
    return None


def test_a_checkpoint_holds_model_optimizer_schedule_rng_sampler_position_counters_and_metrics(tmp_path: Path) -> None:
    stop = _train(tmp_path, interrupt_at="30")  # digits: 22 steps per epoch, so mid-epoch 2
    assert stop is not None and stop.step == 30
    found = checkpoint.load_newest_good(tmp_path / "checkpoints")
    assert found is not None and found.path.name == "ckpt-000000030.pt"
    state, objects = found.state, found.state["objects"]  # the built-in's objects (trainer.recipes.training)
    assert state["step"] == 30 and state["world_size"] == 1
    assert set(objects["model"]) == {"net.1.weight", "net.1.bias", "net.3.weight", "net.3.bias", "net.5.weight",
                                     "net.5.bias"}
    momentum = [s["momentum_buffer"] for s in objects["optimizer"]["state"].values()]
    assert len(momentum) == 6 and all(m is not None for m in momentum)
    assert objects["scheduler"]["last_epoch"] == 30  # one LR-schedule step per optimizer step
    loop = objects["loop"]
    assert (loop["epoch"], loop["step_in_epoch"], loop["global_step"]) == (1, 8, 30)
    assert loop["sampler"] == {"seed": 0, "epoch": 1, "position": 8}
    assert loop["images_seen"] == 1347 + 8 * 64  # all of epoch 1 (1347 images), then 8 batches of 64
    assert [h["epoch"] for h in loop["history"]] == [1] and "train_loss" in loop["history"][0]
    (rank0,) = state["ranks"]  # one entry per rank
    assert rank0["rng"]["torch"].dtype == torch.uint8 and rank0["rng"]["python"] is not None
    epoch_loss = rank0["objects"]["epoch_loss"]  # the rank's running loss of the epoch under way
    assert epoch_loss["sum"].item() > 0 and epoch_loss["steps"] == 8


def test_resuming_past_a_corrupted_newest_checkpoint_still_ends_bitwise_identical(tmp_path: Path) -> None:
    assert _train(tmp_path / "reference") is None
    interrupted = tmp_path / "interrupted"
    assert _train(interrupted, interrupt_at="10,30").step == 10
    assert _train(interrupted, interrupt_at="10,30").step == 30
    newest = interrupted / "checkpoints" / "ckpt-000000030.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # a crash of the storage, say
    # Resumes from the epoch-end checkpoint of step 22 (30 is unreadable) and runs to the end.
    assert _train(interrupted) is None
    resumed = [e for e in events.read(interrupted) if e["event"] == "resumed"]
    assert [e["step"] for e in resumed] == [10, 22]
    assert "ckpt-000000030.pt" in resumed[-1]["skipped"][0]
    ref = torch.load(tmp_path / "reference" / "model_final.pt")
    got = torch.load(interrupted / "model_final.pt")
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)


def _checkpoint_steps(run_dir: Path) -> list[int]:
    return [int(p.name[5:14]) for p in rundir.checkpoint_files(run_dir / "checkpoints")]


def test_checkpoint_cadence_is_the_profiles_unless_the_job_sets_one(tmp_path: Path) -> None:
    # digits: 22 steps per epoch, 2 epochs; an epoch end is always checkpointed (but the last one).
    job = _job(keep_checkpoints=100, checkpoint_every_steps=None)
    run_job(job, RunSettings(run_dir=str(tmp_path / "profile"), checkpoint_every_steps=5), environ=NO_LAUNCHER)
    assert _checkpoint_steps(tmp_path / "profile") == [5, 10, 15, 20, 22, 25, 30, 35, 40]
    job = _job(keep_checkpoints=100, checkpoint_every_steps=7)
    run_job(job, RunSettings(run_dir=str(tmp_path / "job"), checkpoint_every_steps=5), environ=NO_LAUNCHER)
    assert _checkpoint_steps(tmp_path / "job") == [7, 14, 21, 22, 28, 35, 42]


@pytest.mark.parametrize("profile", ["slurm-cpu", "slurm-gpu", "dev-cluster"])
def test_slurm_profiles_checkpoint_by_default_and_the_job_can_change_it(tmp_path: Path, profile: str) -> None:
    # A machine with no SLURM_CONF of its own, whatever ran before (the slurm_cluster fixture sets one
    # for the session, and the dev cluster would refuse slurm-gpu's 4 h); dev-cluster names its own.
    shown = last_json(run_submit(["--profile", profile, "--dry-run", "--json"], cwd=tmp_path,
                                 unset=("SLURM_CONF",)).stdout)
    assert shown["settings"]["checkpoint_every_steps"] > 0 and shown["job"]["checkpoint_every_steps"] is None
    shown = last_json(run_submit(["--profile", profile, "--dry-run", "--json", "--set",
                                  "job.checkpoint_every_steps=25"], cwd=tmp_path, unset=("SLURM_CONF",)).stdout)
    assert shown["job"]["checkpoint_every_steps"] == 25


# ----- the stop protocol (trainer/rank/stopping.py) with one real rank: checkpoint, decide, report, raise -----

def _protocol(tmp_path: Path, signals: "StopSignals", hook: Any = None, interrupts: frozenset[int] = frozenset()
              ) -> "StopProtocol":
    from trainer.distributed.environment import resolve
    from trainer.distributed.ranks import Ranks
    from trainer.rank.reporting import Reporter
    from trainer.rank.stopping import StopProtocol
    env = resolve({})
    return StopProtocol(signals, "USR2", hook, Ranks(env), Reporter(tmp_path, env, False, False, 10), interrupts)


def test_a_signal_is_only_recorded_and_term_outranks_the_requeue_signal() -> None:
    import signal

    from trainer.rank.stopping import NONE, REQUEUE, TERMINATE, StopSignals, installed
    # Recorders in place of the defaults: a signal the stop handlers fail to catch is seen here
    # instead of ending pytest (or, under mutmut's fork server, exiting it with status 0).
    leaked: list[int] = []
    originals = {s: signal.signal(s, lambda signum, frame: leaked.append(signum))
                 for s in (signal.SIGUSR2, signal.SIGTERM)}
    try:
        before = signal.getsignal(signal.SIGUSR2), signal.getsignal(signal.SIGTERM)
        with installed(None, "USR2") as stops:
            assert (stops.kind, stops.name) == (NONE, "")
            signal.raise_signal(signal.SIGUSR2)
            assert (stops.kind, stops.name) == (REQUEUE, "USR2")
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGUSR2)  # SLURM is already ending the job: TERM stays
            assert (stops.kind, stops.name, leaked) == (TERMINATE, "TERM", [])
            with installed(stops, "USR2") as same:  # someone else's handlers: used, not restored here
                assert same is stops
            assert signal.getsignal(signal.SIGUSR2) not in before
        assert (signal.getsignal(signal.SIGUSR2), signal.getsignal(signal.SIGTERM)) == before
        # TERM as the requeue signal: a TERM asks for a requeue, not for the end.
        term = StopSignals("TERM")
        assert term.names == {"TERM": REQUEUE} and term.install()
        try:
            term.raise_requeue_signal()
            assert (term.kind, term.name, leaked) == (REQUEUE, "TERM", [])
        finally:
            term.restore()
        assert signal.getsignal(signal.SIGTERM) == before[1]
    finally:
        for signum, handler in originals.items():
            signal.signal(signum, handler)


def test_handlers_cannot_be_installed_off_the_main_thread() -> None:
    import signal
    import threading

    from trainer.rank.stopping import StopSignals
    before = signal.getsignal(signal.SIGUSR2)
    results: list[bool] = []
    thread = threading.Thread(target=lambda: results.append(StopSignals("USR2").install()))
    thread.start()
    thread.join()
    assert results == [False] and signal.getsignal(signal.SIGUSR2) == before


@pytest.mark.parametrize("kind,hook,signal_name,info", [
    (1, lambda name: {"requeued": True, "reason": f"on {name}"}, "USR2", {"requeued": True, "reason": "on USR2"}),
    (1, None, "USR2", {"requeued": False, "reason": "no requeue hook (not run by the submitter)"}),
    (1, lambda name: 1 / 0, "USR2", {"requeued": False, "reason": "requeue failed",
                                     "message": "ZeroDivisionError: division by zero"}),
    # SLURM is ending the job: the hook is not asked (a user's scancel stays a cancel).
    (2, lambda name: {"requeued": True}, "TERM", {"requeued": False, "reason": "terminated"}),
])
def test_a_stop_checkpoints_then_decides_on_rank_0_and_every_rank_learns_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: int, hook: Any, signal_name: str,
        info: dict[str, Any]) -> None:
    from trainer.rank.stopping import StopSignals
    done: list[str] = []
    protocol = _protocol(tmp_path, StopSignals("USR2"), None if hook is None else
                         lambda name: done.append("hook") or hook(name))
    with pytest.raises(StopRequested) as raised:
        protocol.stop(kind, lambda: done.append("checkpoint"), step=7, epoch=1, step_in_epoch=3)
    stop = raised.value
    assert (stop.step, stop.signal_name, stop.kind, stop.info) == (7, signal_name, kind, info)
    assert stop.requeued is info["requeued"] and str(stop) == f"stopped at step 7 on SIG{signal_name}"
    assert done[0] == "checkpoint" and done[1:] == (["hook"] if hook and kind == 1 else [])
    (event,) = [e for e in events.read(tmp_path) if e["event"] == "stopped"]
    assert {k: event[k] for k in ("step", "epoch", "step_in_epoch", "signal", "kind")} == {
        "step": 7, "epoch": 1, "step_in_epoch": 3, "signal": signal_name, "kind": {1: "requeue", 2: "terminate"}[kind]}
    assert {k: event[k] for k in info} == info
    assert f"[trainer] stopped at step 7 on SIG{signal_name}: " + ", ".join(f"{k} {v}" for k, v in info.items()) \
        in capsys.readouterr().out


def test_the_stop_names_the_signal_that_arrived_and_the_test_interrupt_goes_through_it(tmp_path: Path) -> None:
    from trainer.rank.stopping import NONE, REQUEUE, StopSignals
    signals = StopSignals("USR2")
    assert signals.install()
    try:
        protocol = _protocol(tmp_path, signals, interrupts=frozenset({5}))
        assert protocol.agreed(4, 0) == NONE
        assert protocol.agreed(5, 5) == NONE  # resumed at step 5: that interrupt already happened
        assert protocol.agreed(5, 0) == REQUEUE and signals.name == "USR2"
        signals.name = "USR1"  # what a handler recorded is what the stop reports
        with pytest.raises(StopRequested) as raised:
            protocol.stop(REQUEUE, lambda: None, step=5)
        assert raised.value.signal_name == "USR1"
    finally:
        signals.restore()


def test_restoring_the_rng_state_replays_every_generator_and_reads_older_checkpoints() -> None:
    import random

    import numpy as np
    cpu = torch.device("cpu")
    state = checkpoint.capture_rng(cpu)
    drawn = (torch.rand(3).tolist(), random.random(), float(np.random.rand()))
    checkpoint.restore_rng(state, cpu)
    assert (torch.rand(3).tolist(), random.random(), float(np.random.rand())) == drawn
    # A checkpoint without the Python and NumPy generators (written before they were kept) still loads.
    checkpoint.restore_rng({"torch": state["torch"], "cuda": None}, cpu)
    assert torch.rand(3).tolist() == drawn[0]


def test_handlers_give_back_the_ones_they_replaced_and_a_term_from_elsewhere_is_named_term(tmp_path: Path) -> None:
    import signal

    from trainer.rank.stopping import REQUEUE, TERMINATE, StopSignals, signal_number
    seen: list[int] = []
    before = signal.signal(signal.SIGUSR2, lambda signum, frame: seen.append(signum))
    try:
        stops = StopSignals("USR2")
        assert stops.install()
        signal.raise_signal(signal.SIGUSR2)
        assert (stops.kind, seen) == (REQUEUE, [])
        # Another rank saw TERM: this rank, which saw USR2, reports the stop everyone agreed on.
        with pytest.raises(StopRequested) as raised:
            _protocol(tmp_path, stops).stop(TERMINATE, lambda: None, step=3)
        assert (raised.value.signal_name, raised.value.kind) == ("TERM", TERMINATE)
        stops.restore()
        signal.raise_signal(signal.SIGUSR2)  # the handler that was there before runs again
        assert seen == [signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, before)
    assert signal_number("USR2") == signal.SIGUSR2 and signal_number("NOSUCH") is None


def test_each_bad_checkpoint_is_reported_with_why_and_the_previous_one_is_used(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import hashlib
    folder = tmp_path / "not" / "yet"  # created with its parents
    good = _save(folder, 10, keep=9)
    torn = _save(folder, 20, keep=9)
    torn.write_bytes(torn.read_bytes()[:-5])
    short = _save(folder, 30, keep=9)
    short.write_bytes(b"abc\n" + short.read_bytes().partition(b"\n")[2])
    headless = _save(folder, 40, keep=9)
    headless.write_bytes(b"no newline at all")
    garbage = folder / "ckpt-000000050.pt"  # a valid checksum over something torch cannot load
    garbage.write_bytes(hashlib.sha256(b"not a pickle").hexdigest().encode() + b"\nnot a pickle")
    found = checkpoint.load_newest_good(folder)
    assert found is not None and found.path == good and found.state["step"] == 10
    reasons = [(garbage, "UnpicklingError: invalid load key, 'n'."), (headless, "no checksum header (truncated?)"),
               (short, "no checksum header (truncated?)"), (torn, "checksum mismatch (truncated or corrupted)")]
    assert found.skipped == reasons
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("[checkpoint]")] == [
        f"[checkpoint] cannot load {path}: {why}; trying the previous one" for path, why in reasons]
    good.write_bytes(b"")
    assert checkpoint.load_newest_good(folder) is None
    assert f"[checkpoint] no checkpoint in {folder} loads; starting from scratch" in capsys.readouterr().err
    assert checkpoint.load_newest_good(tmp_path / "missing") is None and rundir.checkpoint_files(tmp_path) == []
