"""Benchmark: requeues and dead ranks on the SLURM dev cluster, end to end.

    python benchmarks/requeue.py [--checkpoint-every 50] [--skip time-limit]
    python -m launcher.devcluster up --cred-expire 120 && python benchmarks/requeue.py   # a stock site's wait

Each scenario submits the same job (LeNet on synthetic CIFAR-shaped data, 2 nodes x 1 rank,
profile dev-cluster) with `submit.py --wait`, interrupts it while it trains, and reads the run's
event log (events.jsonl: "stopped", "started", "resumed" with their times and steps):

  preemption      `scancel --signal=USR2 JOB` (SLURM's preemption / pre-timeout warning); the job
                  checkpoints at the next step boundary and requeues itself through submitit
  scontrol        `scontrol requeue JOB`: SLURM sends SIGTERM, the job checkpoints if it can, SLURM
                  requeues it
  time-limit      a 1-minute limit with `--signal=USR2@45`: the signal comes from SLURM itself
                  (its time is not known outside, so times are counted from the checkpoint)
  rank killed     `kill -9` of rank 1's process: the job must end (srun --kill-on-bad-exit); then
                  `submit.py --resume RUN` continues from the newest checkpoint
  rank raises     `job.fail_at`: rank 1 raises; every rank must end, the batch script's retry step
                  (launcher.heal) retries the job once, which fails the same way and ends

Columns: signal -> checkpoint written; -> the job's next attempt started on the nodes (for a raising rank:
from its error to the retry step's attempt); -> training resumed (checkpoint loaded); steps lost (step
reached when interrupted - step resumed at); for dead ranks, how long until the job ended (sacct End) and
until `submit.py --wait` returned.
A requeued job waits the credential lifetime (AuthInfo cred_expire) + 1 s before it may start again on every
SLURM before 25.11: the dev cluster's is 10 s, SLURM's default 120 s (`devcluster up --cred-expire 120`).
The table's heading says which cluster, release and lifetime it measured.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from submitter import cluster_env  # noqa: E402

from trainer.rank import events  # noqa: E402 - common put the project on sys.path

JOB = {"name": "requeue-bench", "model": "lenet", "dataset": "synthetic-cifar10", "synthetic_train_size": 20000,
       "synthetic_test_size": 1000, "epochs": 6, "batch_size_per_rank": 64, "eval_every_epochs": 6,
       "log_every_steps": 1, "lr": 0.01}
SCENARIOS = ("preemption", "scontrol", "time-limit", "rank-killed", "rank-raises")


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


class Run:
    """`submit.py --wait` in the background, in a folder of its own under the benchmark cache."""

    def __init__(self, name: str, sets: list[str], env: dict[str, str]) -> None:
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        self.folder = common.CACHE / "requeue" / f"{slug}-{int(time.time())}"
        self.folder.mkdir(parents=True)
        args = ["--profile", "dev-cluster", "--job", "digits", "--wait", "--json",
                "--set", f"profile.runs_dir={self.folder}"]
        for key, value in {**JOB, **dict(s.split("=", 1) for s in sets)}.items():
            args += ["--set", f"{key if '.' in str(key) else 'job.' + key}={value}"]
        self.started = time.time()
        self.proc = subprocess.Popen([sys.executable, common.SUBMIT, *args], cwd=common.ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, **env, "PYTHONPATH": str(common.ROOT)})
        self.returned: float | None = None

    @property
    def run_dir(self) -> Path:
        return wait_for(lambda: next(self.folder.glob("*/run.json"), None), 120, "the run folder").parent

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in events.read(self.run_dir) if e["event"] == name]

    def job_id(self) -> str:
        return str(wait_for(lambda: self.events("started"), 180, "the first attempt")[0]["job_id"])

    def training(self, min_step: int = 20) -> None:
        wait_for(lambda: self.step_reached() >= min_step, 300, "training")

    def step_reached(self) -> int:
        """The last step rank 0 logged (it logs every step here)."""
        logs = list(self.run_dir.glob("logs/*/*_0_log.out"))
        text = logs[0].read_text(errors="replace") if logs else ""
        per_epoch = re.findall(r"(\d+) steps/epoch", text)
        steps = re.findall(r"\[trainer\] epoch (\d+) step (\d+)/", text)
        if not per_epoch or not steps:
            return 0
        epoch, step = steps[-1]
        return (int(epoch) - 1) * int(per_epoch[-1]) + int(step)

    def finish(self, timeout: float = 900) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        self.returned = time.time()
        return self.proc.returncode, out, err


def sacct_end(job_id: str) -> float:
    def ask() -> float | None:
        out = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "End"], capture_output=True, text=True,
                             check=False, timeout=30).stdout.strip()
        if not out or out.startswith("Unknown"):
            return None
        return datetime.datetime.fromisoformat(out.splitlines()[0]).timestamp()
    return wait_for(ask, 120, f"the end of job {job_id} in sacct")


def seconds(value: float) -> str:
    """sacct's End has a resolution of 1 s: show '<1' rather than a negative or noisy fraction."""
    return "<1" if value < 1 else f"{value:.1f}"


def requeue_row(name: str, run: Run, t0: float | None) -> list[Any]:
    stopped = run.events("stopped")[0] if run.events("stopped") else None
    started = run.events("started")
    resumed = run.events("resumed")[0]
    t0 = t0 if t0 is not None else (stopped["time"] if stopped else resumed["time"])
    reached = stopped["step"] if stopped else None
    return [name, f"{stopped['time'] - t0:.1f}" if stopped else "-", f"{started[1]['time'] - t0:.1f}",
            f"{resumed['time'] - t0:.1f}", (reached - resumed["step"]) if reached is not None else "?", "-", "-"]


def signal_scenario(name: str, env: dict[str, str], action: list[str] | None, sets: list[str]) -> list[Any]:
    run = Run(name, sets, env)
    job_id = run.job_id()
    t0 = None
    if action is not None:
        run.training()
        t0 = time.time()
        subprocess.run([*action, job_id], check=True, timeout=30)
    wait_for(lambda: run.events("resumed"), 600, "the resume")
    row = requeue_row(name, run, t0)
    subprocess.run(["scancel", job_id], check=False, timeout=30)  # measured: no need to train to the end
    run.finish()
    return row


def dead_rank_scenario(name: str, env: dict[str, str], checkpoint_every: int) -> list[Any]:
    """kill -9 of rank 1: srun ends the job's step, the batch script's retry step calls it a node's fault (a rank
    killed while its peer was fine), leaves the node out and requeues the job, which resumes from its newest
    checkpoint; where it does not come back by itself, `submit.py --resume RUN` continues it."""
    run = Run(name, [f"checkpoint_every_steps={checkpoint_every}"], env)
    job_id = run.job_id()
    run.training(min_step=checkpoint_every + 10)
    pid = int(re.findall(r" pid (\d+)", next(run.run_dir.glob("logs/*/*_1_log.out")).read_text())[-1])
    reached = run.step_reached()
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    resumed = wait_for(lambda: run.events("resumed"), 900, "the next attempt's resume")[0]
    started = run.events("started")
    how = "retry step"
    if len(started) < 2:  # not retried: continue the run where its checkpoints allow
        how = "--resume"
        run.finish()
        subprocess.run([sys.executable, common.SUBMIT, "--resume", str(run.run_dir), "--json", "--set", "job.epochs=1"],
                       cwd=common.ROOT, capture_output=True, text=True, timeout=900,
                       env={**os.environ, **env, "PYTHONPATH": str(common.ROOT)}, check=False)
        resumed = wait_for(lambda: run.events("resumed"), 300, "the resumed run")[0]
        started = run.events("started")
    subprocess.run(["scancel", str(started[-1]["job_id"])], check=False, timeout=30)  # measured: no need to go on
    run.finish()
    end = sacct_end(job_id) if how == "--resume" else None
    return [f"{name} ({how})", "-", f"{started[-1]['time'] - killed:.1f}", f"{resumed['time'] - killed:.1f}",
            reached - resumed["step"], seconds(end - killed) if end else "-", "-"]


def failing_rank_scenario(name: str, env: dict[str, str]) -> list[Any]:
    """Rank 1 raises at step 300 on every attempt: the retry step retries the job once (a requeue), which
    fails the same way. Times from the first error: the retry's attempt started, the job ended."""
    run = Run(name, ["fail_at=300:1"], env)
    job_id = run.job_id()
    code, _, _ = run.finish()
    log = next(run.run_dir.glob("logs/*/*_1_log.err")).read_text()
    stamps = re.findall(r"submitit ERROR \((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)\)", log)
    failed = datetime.datetime.strptime(stamps[0], "%Y-%m-%d %H:%M:%S,%f").timestamp() if stamps else run.started
    started = run.events("started")
    retried = f"{started[1]['time'] - failed:.1f} (retry step)" if len(started) > 1 else "- (not retried)"
    end = sacct_end(job_id)
    return [f"{name} (exit {code})", "-", retried, "-", "-", seconds(end - failed),
            f"{(run.returned or 0) - failed:.1f}"]


def cluster_line(env: dict[str, str]) -> str:
    """Which cluster was measured: its SLURM release and credential lifetime, as its controller says."""
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, env={**os.environ, **env},
                            timeout=30, check=False).stdout
    values = dict((k.strip(), v.strip()) for k, _, v in (line.partition("=") for line in config.splitlines()) if _)
    lifetime = re.search(r"cred_expire=(\d+)", values.get("AuthInfo", ""))
    return (f"SLURM {values.get('SLURM_VERSION', '?')}, cred_expire {lifetime.group(1) if lifetime else '120 (default)'} s"
            f" (AuthInfo {values.get('AuthInfo', '?')})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint-every", type=common.positive, default=50, help="checkpoint cadence for the dead-rank run")
    parser.add_argument("--skip", action="append", default=[], choices=SCENARIOS)
    args = parser.parse_args()
    env = cluster_env()
    if env is None:
        sys.exit("the dev cluster is not up: python -m launcher.devcluster up --nodes 4")
    os.environ.update(env)
    rows = []
    todo = [s for s in SCENARIOS if s not in args.skip]
    if "preemption" in todo:  # 30-minute limit: submitit calls an early signal a preemption
        rows.append(signal_scenario("preemption (scancel --signal=USR2)", env, ["scancel", "--signal=USR2"],
                                    ["profile.time=30"]))
    if "scontrol" in todo:
        rows.append(signal_scenario("scontrol requeue (SIGTERM)", env, ["scontrol", "requeue"], []))
    if "time-limit" in todo:
        rows.append(signal_scenario("time limit (1 min, USR2@45) [from checkpoint]", env, None,
                                    ["profile.time=1", "profile.signal_delay_s=45", "epochs=40"]))
    if "rank-killed" in todo:
        rows.append(dead_rank_scenario(f"rank 1 killed (kill -9), ckpt every {args.checkpoint_every}", env,
                                       args.checkpoint_every))
    if "rank-raises" in todo:
        rows.append(failing_rank_scenario("rank 1 raises (fail_at)", env))
    print(common.load_note())
    print(f"cluster: {cluster_line(env)}")
    print(common.table(["scenario", "signal->checkpoint s", "->next attempt started s", "->training resumed s",
                        "steps lost", "->job ended s", "->submit.py returned s"], rows))


if __name__ == "__main__":
    main()
