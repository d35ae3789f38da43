"""Your function, from Python (a notebook, a script): hand over the function itself, sweep it, chain runs,
and keep a handle on each.

    from launcher.client import attach, runs, submit, sweep

    def train(ctx, config):                     # a notebook cell: pickled by value
        ...
        return {"loss": loss}

    run = submit(train, profile="dev-cluster", config={"lr": 0.1})
    run.result()                                # waits; the final metrics, RunFailed if it failed
    grid = sweep(train, grid={"lr": [0.05, 0.1, 0.2]})   # one job array; grid.results() in point order
    check = submit(evaluate, after=[run])       # starts once `run` succeeded (when="any"/"notok")
    attach(run.run_dir)                         # the same handle, after a kernel restart
    runs()                                      # recent runs

The calls (`verbs`) run the command line itself (`engine`), so the checks, the run folder and the
queueing are the engine's, and it tells them as data (its `--events`); the handles (`handles`) read what
it recorded; `shipping` decides how your function travels (by name, or pickled by value).
This process never imports torch or submitit for any of it, except on a `debug` profile, whose run is
this process's own so that `breakpoint()` stops here. docs/your-code.md has the whole story.
"""

from launcher.client.verbs import attach, runs, submit, sweep
from launcher.client.engine import command
from launcher.client.handles import RunFailed, Run, SubmitError, Sweep

__all__ = ["Run", "RunFailed", "SubmitError", "Sweep", "attach", "command", "runs", "submit", "sweep"]
