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
import statistics
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

import chaos_faults as cf  # noqa: E402 - beside this file
from tests.test_node_failure import two_nodes  # noqa: E402
from trainer.rank import checkpoint  # noqa: E402

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
WEIGHTS = {"builtin": "model_final.pt"}  # the others save weights.pt (tests/userpkg/tiny.py)
SWEEP_TASKS = 3
# A node lost takes whole nodes (4 CPUs a task on 4-CPU nodes: nothing else on the node it kills). More CPUs
# mean more threads, which changes the built-in recipe's arithmetic: such runs get a twin of their own.
WHOLE_NODE = ["profile.cpus_per_task=4"]
CAUSE_WORDS = {  # what FAILED must name for each injected fault
    "kill-9": ("SIGKILL", "killed", "signal 9"), "node-lost": ("NODE_FAIL", "node-failure", "lost"),
    "bad-node": ("ECC", "node-failure"), "requeue": ("slurm-requeue", "requeue"), "preempt": ("preemption",),
    "time-limit": ("timed-out", "timeout", "time limit"), "ctld-restart": ("slurmctld",),
    "truncated-ckpt": ("checksum", "truncated"),
}
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


def result_of(run: Run, base: Path) -> dict:
    lines = [l for l in (base / run.name / "stdout").read_text().splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def status_rows(run_dir: str) -> list[dict]:
    proc = subprocess.run([sys.executable, str(ROOT / "submit.py"), "status", run_dir, "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    return [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]


def task_dirs(run: Run) -> list[Path]:
    top = Path(run.run_dir)
    return [top / f"task-{i:04d}" for i in range(SWEEP_TASKS)] if run.kind == "sweep" else [top]


def same_weights(a: Path, b: Path) -> bool:
    import torch

    x, y = torch.load(a), torch.load(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def judge(run: Run, twin: Run, base: Path) -> None:
    """Outcome: ok (COMPLETED, bitwise equal), ok-failed (FAILED naming an injected cause) or BAD."""
    result = result_of(run, base)
    run.state = result.get("state", "")
    if run.why:
        run.outcome = "BAD"
        return
    if run.state == "COMPLETED":
        weights = WEIGHTS.get(run.kind, "weights.pt")
        differ = [str(t) for t, r in zip(task_dirs(run), task_dirs(twin))
                  if not (t / weights).exists() or not same_weights(t / weights, r / weights)]
        run.outcome, run.why = ("BAD", f"weights differ from the twin's: {differ}") if differ else ("ok", "")
        return
    if run.state == "FAILED":
        rows = status_rows(run.run_dir)
        said = json.dumps([result.get("error"), result.get("restart_causes")] +
                          [[r.get("error"), r.get("failure"), r.get("restart_causes")] for r in rows])
        named = [f["fault"] for f in run.faults if any(w.lower() in said.lower() for w in CAUSE_WORDS[f["fault"]])]
        run.outcome, run.why = ("ok-failed", f"cause named: {named[0]}") if named else \
            ("BAD", f"FAILED without an injected cause: {said[:300]}")
        return
    run.outcome, run.why = "BAD", f"ended {run.state or 'without a result'} (exit {run.rc})"


def leftovers(base: Path) -> list[str]:
    """Processes whose command line or environment mentions a run folder of this soak."""
    mark = str(base).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if mark in (entry / "cmdline").read_bytes() or mark in (entry / "environ").read_bytes():
                    found.append(f"{entry.name}: {(entry / 'cmdline').read_bytes()[:120]!r}")
            except OSError:
                pass
    return found


def bad_checkpoints(base: Path) -> list[str]:
    bad = [f"{p}: a temporary file left" for p in base.rglob(".ckpt-*.tmp-*")]
    for path in base.rglob("checkpoints/ckpt-*.pt"):
        try:
            checkpoint.read(path)
        except Exception as e:  # noqa: BLE001 - any unreadable checkpoint is a finding
            bad.append(f"{path}: {e}")
    return bad


def promised(run: Run) -> set[str]:
    """What a run folder holds (its top and its tasks' entries), less the names that carry a job id."""
    names = set()
    for folder in [Path(run.run_dir), *([p for p in task_dirs(run)] if run.kind == "sweep" else [])]:
        if folder.is_dir():
            names |= {str(p.relative_to(run.run_dir)) for p in folder.iterdir()}
    return {n for n in names if not n.endswith(".bad-node")}


def lost_files(run: Run, twin: Run) -> list[str]:
    if run.state != "COMPLETED":  # a failed run promises its record, not the results it never made
        must = {"run.json", "job.yaml", "profile.yaml", "logs", "code"} | (
            {"events.jsonl"} if run.kind != "sweep" else set())
        return sorted(must - promised(run))
    return sorted(promised(twin) - promised(run))


def table(runs: list[Run], twins: dict[str, Run]) -> str:
    rows = ["| fault | count | outcome(s) | extra wall time vs twin, median / max (s) |", "|---|---|---|---|"]
    for fault in cf.FAULTS:
        hit = [r for r in runs if any(f["fault"] == fault and not f.get("missed") for f in r.faults)]
        missed = sum(f["fault"] == fault and bool(f.get("missed")) for r in runs for f in r.faults)
        note = f" ({missed} more drawn, not injected: the run ended first)" if missed else ""
        if not hit:
            rows.append(f"| {fault} | 0{note} | - | - |")
            continue
        outcomes = {o: sum(r.outcome == o for r in hit) for o in ("ok", "ok-failed", "BAD")}
        extra = [r.wall_s - twins[r.twin].wall_s for r in hit]
        rows.append(f"| {fault} | {len(hit)}{note} | {', '.join(f'{n} {o}' for o, n in outcomes.items() if n)} | "
                    f"{statistics.median(extra):.0f} / {max(extra):.0f} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--parallel", type=int, default=2, help="runs at once (default 2)")
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
                judge_twin(twin, base)
                print(f"  {twin.name}: {twin.state or 'no result'} in {twin.wall_s:.0f} s {twin.why}", flush=True)
            for run in pool.map(lambda r: submit_and_inject(r, base), plan):
                if twins[run.twin].outcome == "ok":
                    judge(run, twins[run.twin], base)
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
        cf.wait_for(lambda: not leftovers(base), 120, "end of every run's processes", poll=1)
        left = []
    except TimeoutError:
        left = leftovers(base)
    corrupt = bad_checkpoints(base)
    lost = [f"{run.name} lost {name}" for run in plan if run.run_dir and twins[run.twin].run_dir
            for name in lost_files(run, twins[run.twin])]
    bad += [f"process left: {p}" for p in left] + [f"corrupt checkpoint: {c}" for c in corrupt] + lost
    up = subprocess.run([sys.executable, "-m", "launcher.devcluster", "status"], cwd=ROOT, capture_output=True,
                        text=True, timeout=120)
    if up.returncode:
        bad.append(f"dev cluster not whole afterwards: {up.stdout[-500:]}")

    print()
    print(table(plan, twins))
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


def judge_twin(twin: Run, base: Path) -> None:
    result = result_of(twin, base)
    twin.state = result.get("state", "")
    twin.outcome = "ok" if twin.state == "COMPLETED" and not twin.why else "BAD"
    twin.why = twin.why or ("" if twin.outcome == "ok" else f"the unfaulted twin ended {twin.state or 'without a result'}")


def cancel_all(base: Path, runs: list[Run]) -> None:
    """Nothing of this soak left in the queue, whatever happened."""
    for run in runs:
        if run.run_dir:
            subprocess.run([sys.executable, str(ROOT / "submit.py"), "cancel", run.run_dir], cwd=ROOT,
                           capture_output=True, timeout=300)


if __name__ == "__main__":
    sys.exit(main())
