"""Mutation testing of the core (not part of CI): `python tests/mutation.py [PATTERN ...]`.

mutmut (3.x, `pip install -e .[mutation]`) copies the project to mutants/, makes one-line changes
(mutants) to the functions of the modules listed under [tool.mutmut] in pyproject.toml (the training
loop, checkpoints, stop protocol, distributed environment, data and config of trainer/; the config and
request code of launcher/), first runs the fast in-process tests listed there once to learn which tests
reach which function, then runs only those tests against each mutant. A mutant is killed when a test
fails. This prints the kill rate and every survivor (`mutmut show NAME` shows its diff).

PATTERN (fnmatch over mutant names, e.g. 'launcher.config.*' or 'trainer.rank.checkpoint.*') limits the run
to some modules, and every mutant it matches is tested again. mutmut keeps results in mutants/. After
adding tests, --survivors tests again only the survivors (and timeouts) of the patterns' last run: mutmut
keeps a survivor's verdict even when a new test would kill it, and the new tests' reach is traced first.
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="*", help="mutant name patterns (default: every module configured)")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 1,
                        help="mutants tested at once (default: the CPU count)")
    parser.add_argument("--fresh", action="store_true", help="delete mutants/ first (no results kept)")
    parser.add_argument("--report", action="store_true", help="run nothing: print the recorded results")
    parser.add_argument("--survivors", action="store_true",
                        help="test again only the patterns' survivors, untested mutants and timeouts")
    args = parser.parse_args()
    mutmut = shutil.which("mutmut")
    if mutmut is None:
        print("error: mutmut is not installed: pip install -e '.[mutation]'", file=sys.stderr)
        return 2
    if args.fresh:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    # The tests' subprocesses must import the mutated copy, not the installed project; mutation_site's
    # sitecustomize lets them run while mutmut traces the tests (it says why).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "mutants"), str(ROOT / "tests" / "mutation_site")])}
    env.pop("SLURM_CONF", None)
    # Each mutant's pytest run is forked from a process that imported torch: the unraisable-exception
    # plugin's five gc.collect() calls at exit then cost ~1.3 s a mutant (2 s of 2.4 s for a 0.2 s test);
    # the benchmark and hypothesis plugins are not used by the fast tests. Plugins only: no verdict changes.
    env["PYTEST_ADDOPTS"] = " ".join([env.get("PYTEST_ADDOPTS", ""), "-p no:unraisableexception",
                                      "-p no:benchmark", "-p no:hypothesispytest"]).strip()
    # The shipped dev-cluster profiles find the dev cluster's slurm.conf under the checkout (.dev-cluster/): the
    # copy in mutants/ must find the running cluster's, or the tests that ask it (a gpu_type no node has) fail.
    (ROOT / "mutants").mkdir(exist_ok=True)
    cluster = ROOT / "mutants" / ".dev-cluster"
    if not cluster.exists() and (ROOT / ".dev-cluster").is_dir():
        cluster.symlink_to(ROOT / ".dev-cluster")
    targets = args.patterns
    if args.survivors:
        # Names, not patterns: mutmut tests a named mutant again whatever its recorded verdict.
        targets = sorted(name for name, state in statuses(mutmut, env, args.patterns).items()
                         if state in ("survived", "no tests", "timeout", "not checked"))
        if not targets:
            print("no survivors to test again")
    start = time.monotonic()
    if not args.report and (targets or not args.survivors):
        subprocess.run([mutmut, "run", "--max-children", str(args.max_children), *targets], cwd=ROOT, env=env,
                       check=False)
    elapsed = time.monotonic() - start
    status = statuses(mutmut, env, args.patterns)
    counts = collections.Counter(status.values())
    survivors = sorted(name for name, state in status.items() if state in ("survived", "no tests"))
    print("\nsurvivors (`mutmut show NAME` shows the change):")
    print("\n".join(f"  {name}: {status[name]}" for name in survivors) or "  none")
    # A mutant that no fast test reaches ("no tests") counts as a survivor: the suite does not prove
    # that code. A timeout is not counted as killed: on a loaded machine a slow test run is one too.
    tested = sum(n for state, n in counts.items() if state not in ("skipped", "not checked"))
    # "suspicious": the test run ended abnormally (e.g. a mutant left a stop signal unhandled, and its
    # default action ended pytest): the tests noticed the change, so it counts as killed.
    killed = counts["killed"] + counts["suspicious"]
    rate = killed / tested if tested else 0.0
    with_timeouts = (killed + counts["timeout"]) / tested if tested else 0.0
    print(f"\nmutants: {len(status)} ({', '.join(f'{state} {n}' for state, n in sorted(counts.items()))}); "
          f"kill rate {killed}/{tested} = {rate:.1%} ({with_timeouts:.1%} counting timeouts as killed); "
          f"this run took {elapsed:.0f} s")
    return 0


def statuses(mutmut: str, env: dict[str, str], patterns: list[str]) -> dict[str, str]:
    """Every mutant matching `patterns` (all without any) with its recorded status, killed ones included."""
    if not (ROOT / "mutants").is_dir():
        return {}
    listing = subprocess.run([mutmut, "results", "--all", "true"], cwd=ROOT, env=env, check=True,
                             capture_output=True, text=True).stdout
    status = {}
    for line in listing.splitlines():
        name, sep, state = line.strip().rpartition(": ")
        if sep and (not patterns or any(fnmatch.fnmatch(name, p) for p in patterns)):
            status[name] = state
    return status


if __name__ == "__main__":
    sys.exit(main())
