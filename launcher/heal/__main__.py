"""`python -m launcher.heal before POLICY` / `... after STATUS POLICY`, from the batch script.

Never in the way of the job: any error of the step itself is one `[heal]` line, and the script goes on
(before) or ends with srun's status (after), as it would without the step.
"""

from __future__ import annotations

import os
import sys
import traceback


def main(argv: list[str]) -> int:
    moment = argv[0] if argv else ""
    status = int(argv[1]) if moment == "after" and len(argv) > 2 and argv[1].lstrip("-").isdigit() else 1
    os.umask(0o077)  # what it writes into the run folder is private, as the tasks' files are
    try:
        from launcher.cluster.slurm.healing import RetryPolicy
        from launcher.heal import attempt  # (after the arguments: a usage error costs no imports)

        policy = RetryPolicy.loads(argv[-1])

        if moment == "before":
            return attempt.before(policy, os.environ)
        if moment == "after":
            return attempt.after(status, policy, os.environ)
        print(f"[heal] usage: python -m launcher.heal before POLICY | after STATUS POLICY (got {argv!r})", flush=True)
    except Exception as err:  # noqa: BLE001 - the retry step must never break the job it serves
        where = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
        print(f"[heal] the retry step failed ({type(err).__name__}: {err}"
              + (f" at {where.filename}:{where.lineno}" if where else "") + "); the job goes on without it",
              flush=True)
    return 0 if moment == "before" else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
