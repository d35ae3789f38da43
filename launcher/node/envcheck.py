"""What the nodes' interpreter must import, checked on the node itself (`submit.py probe`).

    python -m launcher.node.envcheck [--report FOLDER] [MODULE ...] [--exec ARG ...]

Looks up every package the tool needs on a node (submitit, torch, yaml, numpy) and the extra MODULEs
(a job's own imports), and names every one that is not installed. Standard library only, and nothing else of
ours: it must run in an interpreter that lacks everything else, which is the case it is for.

The probe puts it in front of submitit's own start-up (`PYTHON -m launcher.node.envcheck ... --exec -u -m
submitit.core._submit FOLDER`): a task whose interpreter lacks a package writes its report and exits
1 before submitit (perhaps the missing package itself) is imported; one that has them all becomes
submitit's task, in the same interpreter or container, by exec.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from importlib import metadata
from pathlib import Path

# Imported by every task: submitit unpickles the task, the trainer reads YAML, torch imports numpy.
NEEDED = ("submitit", "torch", "yaml", "numpy")
# The pip name where it differs from the module's.
PIP_NAMES = {"yaml": "pyyaml", "sklearn": "scikit-learn", "PIL": "pillow", "cv2": "opencv-python"}
EXIT_MISSING = 1


def check(modules: list[str]) -> dict[str, object]:
    """Each module looked up (found, not imported: a probe must be quick, and must not run the user's
    code); those that are not there, and the versions of those that are."""
    missing: dict[str, str] = {}
    versions: dict[str, str] = {}
    for name in dict.fromkeys([*NEEDED, *modules]):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError) as err:
            found, missing[name] = False, f"{type(err).__name__}: {err}"
        if not found:
            missing.setdefault(name, "not installed")
            continue
        try:
            versions[name] = metadata.version(PIP_NAMES.get(name, name))
        except metadata.PackageNotFoundError:  # found, but not as a distribution of that name
            versions[name] = ""
    return {"python": sys.executable, "version": sys.version.split()[0], "rank": _rank(),
            "node": os.environ.get("SLURMD_NODENAME", os.uname().nodename), "missing": missing, "versions": versions}


def _rank() -> str:
    return os.environ.get("SLURM_PROCID") or os.environ.get("SUBMITIT_LOCAL_GLOBALID") or "0"


def missing_line(missing: dict[str, str]) -> str:
    """`torch, submitit (pip install torch submitit)`: what to install, by its pip name."""
    return f"{', '.join(missing)} (pip install {' '.join(PIP_NAMES.get(n, n) for n in missing)})"


def main(argv: list[str]) -> int:
    run, rest = (argv[:argv.index("--exec")], argv[argv.index("--exec") + 1:]) if "--exec" in argv else (argv, [])
    report_dir = None
    if run[:1] == ["--report"]:
        report_dir, run = Path(run[1]), run[2:]
    found = check(run)
    if report_dir is not None:
        report_dir.mkdir(parents=True, exist_ok=True)
        (report_dir / f"{found['rank']}.json").write_text(json.dumps(found))
    if found["missing"]:
        missing = found["missing"]
        print(f"error: {sys.executable} cannot import {missing_line(missing)}", file=sys.stderr)  # type: ignore[arg-type]
        return EXIT_MISSING
    if rest:  # the same interpreter (or container) goes on as the task
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, *rest])
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
