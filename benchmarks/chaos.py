"""A chaos soak on the dev cluster (issue 31): `python benchmarks/chaos.py --runs N --seed S`.

N small runs, cycling through four kinds (the built-in `digits` recipe, a user entrypoint, a `script:`, a 3-point
sweep), each with 1-2 faults drawn from the seed (benchmarks/chaos_faults.py: kill -9 of a rank, a node lost, a
node that fails every rank on it, scontrol requeue, a preemption signal, a time limit, a slurmctld restart, a
truncated newest checkpoint), each at a trigger observed in the run folder ("start": the attempt's ranks have
started; "checkpoint": they have written a checkpoint since). Every run is submitted as a user does
(`submit.py --profile dev-cluster --wait --json`) and must end

* COMPLETED with final weights bitwise equal to its unfaulted twin (same job, same seed): "ok", or
* FAILED with an injected fault's cause named in its result or `status --json`: "ok-failed";

anything else (another state, a hang past the deadline, COMPLETED with other weights, FAILED for no injected
cause) is BAD. Afterwards: no process of any run is left, every checkpoint loads (SHA-256 checked), and each run
folder holds what its twin's holds. Prints the schedule first (reproducible from --seed), then one table: fault,
count, outcomes, extra wall time against the twin. Exit 1 if anything is BAD. Every node and the controller are
restored in a `finally`. Run folders go under ~/.cache/ddp-bench/chaos/ (DDP_BENCH_CACHE).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SLURM_CONF", str(ROOT / ".dev-cluster" / "slurm.conf"))  # scontrol, scancel, sinfo

import chaos_checks as cc  # noqa: E402 - beside this file
import common  # noqa: E402
import chaos_faults as cf  # noqa: E402
from launcher.devcluster.faults import two_nodes  # noqa: E402

CACHE = Path(os.environ.get("DDP_BENCH_CACHE", Path.home() / ".cache" / "ddp-bench")) / "chaos"
KINDS = cf.ALL_KINDS
TINY = ('entrypoint: "tests.userpkg.tiny:train"\ntarget_metric: accuracy\ncheckpoint_every_steps: 4\n'
        f"code_dir: {ROOT}\nconfig: {{epochs: 3, step_sleep_s: 0.2}}\n")
# Each well under a minute unfaulted, yet long enough for a fault to land (tiny's 48 steps, 0.2 s each: ~10 s);
# a checkpoint within the first second or so of training.
JOBS = {
    "builtin": ("name: chaos-digits\nextends: digits\nepochs: 30\neval_every_epochs: 30\nlog_every_steps: 100000\n"
                "checkpoint_every_steps: 20\n"),
    "entrypoint": "name: chaos-tiny\n" + TINY,
    # (no checkpoint_every_steps: a script's cadence is its own init() call's, and this one checkpoints on stops)
    "script": f"name: chaos-script\nscript: {ROOT}/tests/userpkg/script_job.py\nargs: ['3', '0.2']\ncode_dir: {ROOT}\n",
    "sweep": "name: chaos-sweep\n" + TINY + "sweep: {grid: {config.lr: [0.05, 0.1, 0.2]}}\n",
}
SWEEP_TASKS = cc.SWEEP_TASKS
# A node lost takes whole nodes (4 CPUs a task on 4-CPU nodes: nothing else on the node it kills). More CPUs
# mean more threads, which changes the built-in recipe's arithmetic: such runs get a twin of their own.
WHOLE_NODE = ["profile.cpus_per_task=4"]
RUN_DEADLINE_S = 600
# submitit reads a stop signal as a time-out, not a preemption, unless the limit is far off (the requeue
# tests use 30 minutes too): with the dev-cluster profile's 10, a preemption would be counted as a time-out.
BASE_SETS = ["profile.time=30"]


@dataclass
class Run:
    name: str
    kind: str
    faults: list[dict] = field(default_factory=list)  # {"fault", "when", and the fault's own draws}
    twin: str = ""  # the name of the unfaulted run it is compared with
    sets: list[str] = field(default_factory=list)
    # filled in when it has run
    run_dir: str = ""
    wall_s: float = 0.0
    rc: int | None = None
    state: str = ""
    outcome: str = ""
    why: str = ""
    injected: list[str] = field(default_factory=list)
    ettr: float | None = None  # its effective training time ratio (a sweep's: the mean of its points')

    def label(self) -> str:
        return ", ".join(f"{f['fault']}@{f['when']}" for f in self.faults) or "none (twin)"


def draw(runs: int, seed: int, only: list[str] | None = None) -> list[Run]:
    """Each run's kind (cycling, so that every kind appears) and 1-2 faults that the kind allows. The first
    fault of each run is dealt from a shuffled deck of all faults (so that 8 runs or more meet every fault),
    the second drawn at random."""
    rng = random.Random(seed)
    plan: list[Run] = []
    deck: list[str] = []
    for i in range(runs):
        kind = KINDS[i % len(KINDS)]
        allowed = [f for f, (_, kinds) in cf.FAULTS.items() if kind in kinds and (not only or f in only)]
        if not any(f in allowed for f in deck):
            deck += rng.sample(only or list(cf.FAULTS), len(only or cf.FAULTS))
        chosen = [deck.pop(next(j for j, f in enumerate(deck) if f in allowed))]
        second = [f for f in allowed if f not in chosen and not (f in cf.SLOW and any(c in cf.SLOW for c in chosen))]
        if rng.random() < 0.5 and second:
            chosen.append(rng.choice(second))
        faults = []
        for fault in sorted(chosen, key=lambda f: f not in cf.AT_SUBMISSION):
            later = "epoch" if kind == "script" else "checkpoint"  # a script checkpoints only when stopped
            when = (later if fault in ("truncated-ckpt", "node-lost") else
                    f"step {cf.BAD_NODE_STEP}" if fault == "bad-node" else rng.choice(("start", later)))
            entry = {"fault": fault, "when": when}
            if kind == "sweep":
                entry["task"] = rng.randrange(SWEEP_TASKS)
            if fault == "kill-9":
                entry["rank"] = rng.randrange(2)
            if fault == "ctld-restart":
                entry["outage_s"] = round(rng.uniform(5, 20), 1)
            if fault == "time-limit":  # a third of them with no requeue left: the run must end FAILED, saying so
                entry["requeues_left"] = rng.choice((20, 20, 0))
            faults.append(entry)
        run = Run(f"run{i:02d}-{kind}", kind, faults)
        run.sets = submission_sets(run)
        run.twin = f"twin-{kind}" + ("-wholenode" if "node-lost" in chosen else "")
        plan.append(run)
    return plan


def submission_sets(run: Run) -> list[str]:
    sets = list(BASE_SETS)
    for f in run.faults:
        if f["fault"] == "time-limit":  # as tests/test_requeue_slurm.py: the signal 15-45 s into each attempt
            sets += ["profile.time=1", "profile.signal_delay_s=45", f"profile.max_timeout_requeues={f['requeues_left']}",
                     "profile.collective_timeout_s=600"]  # a collective in flight while frozen must not time out
        if f["fault"] == "bad-node":
            sets += [f"job.config.bad_node_file=@BASE@/{run.name}.bad-node",
                     f"job.config.node_fault_at_step={cf.BAD_NODE_STEP}"]
        if f["fault"] == "node-lost":
            sets += WHOLE_NODE
    return sets


def submit_and_inject(run: Run, base: Path) -> Run:
    """Submit `run` with --wait, inject its faults as their triggers come, wait for the submitter's end."""
    folder = base / run.name
    folder.mkdir(parents=True)
    (folder / "job.yaml").write_text(JOBS[run.kind])
    sets = [s.replace("@BASE@", str(base)) for s in run.sets]
    if any(f["fault"] == "node-lost" for f in run.faults):
        sets.append(f"profile.sbatch_extra.nodelist={','.join(two_nodes())}")  # idle ones; the job waits there
    argv = [sys.executable, str(ROOT / "submit.py"), "--profile", "dev-cluster", "--job", str(folder / "job.yaml"),
            "--set", f"profile.runs_dir={folder / 'runs'}", *[w for s in sets for w in ("--set", s)],
            "--wait", "--json"]
    out, err = open(folder / "stdout", "w"), open(folder / "stderr", "w")
    started = time.monotonic()
    ended: list[float] = []  # when the submitter exited: the run's wall time, whatever this thread did meanwhile
    # No controller outage (another run's fault) while sbatch runs: a submission the controller refuses is
    # not a run that failed to survive; the outage waits until the job is queued (its log folder exists).
    with cf.CONTROLLER:
        proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=out,
                                stderr=err, text=True)
        threading.Thread(target=_note_end, args=(proc, ended), daemon=True).start()
        try:
            run_dir = cf.wait_for(lambda: next((folder / "runs").glob("*/logs/*/*_submission.sh"), None)
                                  or proc.poll() is not None, 120, "queued job")
        except TimeoutError as e:
            run_dir, run.why = True, str(e)
    try:
        if run_dir is True:
            raise RuntimeError(run.why or "the submitter ended before queueing a job")
        run_dir = next((folder / "runs").glob("*/run.json"))
        run.run_dir = str(run_dir.parent)
        targets: dict[Path, cf.Target] = {}  # one per job hit (a sweep's task): its attempts are counted there
        for f in run.faults:
            if f["fault"] == "bad-node":
                run.injected.append(f"bad node from step {cf.BAD_NODE_STEP} (in the job's config)")
                continue
            task = Path(run.run_dir) / (f"task-{f.get('task', 0):04d}" if run.kind == "sweep" else "")
            target = targets.setdefault(task, cf.Target(task, Path(run.run_dir) / "logs", ranks=2))
            try:
                cf.trigger(target, f["when"], running=lambda: proc.poll() is None)
            except cf.Ended:
                run.injected.append(f"{f['fault']}: not injected, the run ended first")
                f["missed"] = True
                continue
            try:
                run.injected.append(cf.inject(f["fault"], target, f))
            except Exception as e:  # noqa: BLE001 - judged below
                # A short run may end between its trigger and the fault (a node-lost finds no process of the
                # job left, a signal an unknown job): then the fault did not land, and the run is judged as is.
                if not cf.job_over(target.job_id()):
                    raise
                run.injected.append(f"{f['fault']}: not injected, the job ended first ({type(e).__name__}: {e})")
                f["missed"] = True
        proc.wait(timeout=max(1.0, RUN_DEADLINE_S - (time.monotonic() - started)))
    except Exception as e:  # noqa: BLE001 - a hang or a failed injection is this run's BAD outcome, not the soak's end
        run.why = f"{type(e).__name__}: {e}"
    finally:
        if proc.poll() is None:
            proc.kill()
            if run.run_dir:
                subprocess.run([sys.executable, str(ROOT / "submit.py"), "cancel", run.run_dir], cwd=ROOT,
                               capture_output=True, timeout=120)
        run.rc = proc.wait()
        cf.wait_for(lambda: ended, 10, "the submitter's end time", poll=0.05)
        run.wall_s = ended[0] - started
        out.close()
        err.close()
    return run


def _note_end(proc: subprocess.Popen, ended: list[float]) -> None:
    proc.wait()
    ended.append(time.monotonic())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=common.positive, default=12)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--parallel", type=common.positive, default=2, help="runs at once (default 2)")
    parser.add_argument("--json", type=Path, help="also write every run's record here")
    parser.add_argument("--faults", help="only these faults, comma-separated (to reproduce one): "
                                         + ", ".join(cf.FAULTS))
    args = parser.parse_args()
    unknown = set(args.faults.split(",")) - set(cf.FAULTS) if args.faults else set()
    if unknown:
        parser.error(f"unknown fault(s) {', '.join(sorted(unknown))}; known: {', '.join(cf.FAULTS)}")

    t0 = time.monotonic()
    base = CACHE / time.strftime("%Y%m%d-%H%M%S")
    plan = draw(args.runs, args.seed, args.faults.split(",") if args.faults else None)
    twins = {}
    for run in plan:
        if run.twin not in twins:
            twins[run.twin] = Run(run.twin, run.kind,
                                  sets=BASE_SETS + (WHOLE_NODE if run.twin.endswith("wholenode") else []))
    print(f"chaos soak: {args.runs} runs, seed {args.seed}, {args.parallel} at a time; "
          f"load average {os.getloadavg()[0]:.1f}; run folders under {base}")
    for run in plan:
        print(f"  {run.name:<18} {run.label()}  " + "; ".join(
            f"{f['fault']}: " + ", ".join(f"{k}={v}" for k, v in f.items() if k not in ("fault", "when")
                                 and not (k == "task" and f["fault"] == "bad-node"))  # it hits every task
            for f in run.faults))
    print(f"  twins: {', '.join(twins)}", flush=True)

    bad: list[str] = []
    try:
        with ThreadPoolExecutor(args.parallel) as pool:
            for twin in pool.map(lambda r: submit_and_inject(r, base), list(twins.values())):
                cc.judge_twin(twin, base)
                print(f"  {twin.name}: {twin.state or 'no result'} in {twin.wall_s:.0f} s {twin.why}", flush=True)
            for run in pool.map(lambda r: submit_and_inject(r, base), plan):
                if twins[run.twin].outcome == "ok":
                    cc.judge(run, twins[run.twin], base)
                else:
                    run.outcome, run.why = "BAD", f"its twin {run.twin} did not complete"
                print(f"  {run.name}: {run.outcome} ({run.state or 'no result'}, {run.wall_s:.0f} s, twin "
                      f"{twins[run.twin].wall_s:.0f} s) {'; '.join(run.injected)} {run.why}", flush=True)
    finally:
        for line in cf.CLEANUP.undo():
            print(f"  cleanup: {line}")
        cancel_all(base, [*twins.values(), *plan])

    bad += [f"{r.name}: {r.why}" for r in [*twins.values(), *plan] if r.outcome not in ("ok", "ok-failed")]
    try:
        cf.wait_for(lambda: not cc.leftovers(base), 120, "end of every run's processes", poll=1)
        left = []
    except TimeoutError:
        left = cc.leftovers(base)
    corrupt = cc.bad_checkpoints(base)
    lost = [f"{run.name} lost {name}" for run in plan if run.run_dir and twins[run.twin].run_dir
            for name in cc.lost_files(run, twins[run.twin])]
    bad += [f"process left: {p}" for p in left] + [f"corrupt checkpoint: {c}" for c in corrupt] + lost
    up = subprocess.run([sys.executable, "-m", "launcher.devcluster", "status"], cwd=ROOT, capture_output=True,
                        text=True, timeout=120)
    if up.returncode:
        bad.append(f"dev cluster not whole afterwards: {up.stdout[-500:]}")

    print()
    print(cc.table(plan, twins))
    print(f"\n{args.runs} runs (seed {args.seed}) + {len(twins)} twins in {time.monotonic() - t0:.0f} s; "
          f"{sum(r.outcome == 'ok' for r in plan)} ok, {sum(r.outcome == 'ok-failed' for r in plan)} ok-failed, "
          f"{sum(r.outcome == 'BAD' for r in plan)} BAD; processes left {len(left)}, corrupt checkpoints "
          f"{len(corrupt)}, files lost {len(lost)}")
    for line in bad:
        print(f"BAD: {line}")
    if args.json:
        args.json.write_text(json.dumps({"seed": args.seed, "runs": [asdict(r) for r in plan],
                                         "twins": [asdict(t) for t in twins.values()], "bad": bad}, indent=1))
    return 1 if bad else 0


def cancel_all(base: Path, runs: list[Run]) -> None:
    """Nothing of this soak left in the queue, whatever happened."""
    for run in runs:
        if run.run_dir:
            subprocess.run([sys.executable, str(ROOT / "submit.py"), "cancel", run.run_dir], cwd=ROOT,
                           capture_output=True, timeout=300)


if __name__ == "__main__":
    sys.exit(main())
