"""`submit()`, `sweep()`, `attach()` and `runs()`: the API's calls, their arguments checked where they
enter (a TypeError or ValueError naming the argument), turned into the command line's arguments and a
generated job, and handed to the engine (launcher.client.engine). What the engine checks (the profile, the
job, your function's signature, its config, its size) comes back as SubmitError with its `error:` line,
before anything is queued: `submit` returns once the run is queued (a local run's engine then stays, to
wait for it), or, on a debug profile, once it has run here.
"""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path
from typing import Any

from launcher.client.shipping import by_value, default_name, reference, short, shown
from launcher.client.engine import Engine, environment
from launcher.client.handles import Run, SubmitError, Sweep
from launcher.remote.ssh_record import RECORD
from launcher.rundir.layout import RUN_FILE
from trainer.config.overrides import dotted_keys

CONDITIONS = ("ok", "any", "notok")


def submit(function: Any = None, /, profile: str = "local", job: str | None = None, *, entrypoint: Any = None,
           config: dict[str, Any] | None = None, sets: list[str] | None = None, name: str | None = None,
           cwd: str | Path | None = None, after: Any = None, when: str = "ok", rerun: bool = False) -> Run:
    """Run `function` (or `entrypoint=`: a function or "module:function"; or `job=`: a job name or file) on
    `profile`, called once per rank as fn(ctx) or fn(ctx, config) with `config`. Returns once it is queued.

    `sets`: `--set` overrides (["job.epochs=3", "profile.nodes=2"]); `cwd`: where the submitter runs (runs_dir,
    names, relative paths and your project are found from there; default: the current directory);
    `after`: runs this one waits for (SLURM), each a Run, a run folder, or a (run, "ok"|"any"|"notok") pair;
    `when`: the condition for the bare ones (ok: each succeeded; any: each ended; notok: each failed).
    An identical run (the same signature, docs/signatures.md) in the runs folder is answered instead of queued
    again: completed, its handle has its result at once (`run.reused` is True); running, the handle follows it;
    failed, it is continued. `rerun=True`: a new run all the same."""
    _expect("job", job, (str, os.PathLike, type(None)), "a job name or file")
    target = _target(function, entrypoint, job)
    workdir = _workdir(cwd)
    data, blob = _code(target, workdir, name, config) if target is not None else ({}, None)
    return _start(Run, profile, str(job) if job is not None else None, data, blob, sets, after, when, workdir,
                  rerun)


def sweep(function: Any = None, /, profile: str = "local", *, configs: list[dict[str, Any]] | None = None,
          grid: dict[str, list[Any]] | None = None, entrypoint: Any = None, config: dict[str, Any] | None = None,
          sets: list[str] | None = None, name: str | None = None, cwd: str | Path | None = None,
          after: Any = None, when: str = "ok", rerun: bool = False) -> Sweep:
    """One task per point, exactly as the command line's sweep (one SLURM job array with the profile's
    array_parallelism; local processes on `local`). `grid`: {"lr": [0.1, 0.2], ...}, every combination
    (config keys); `configs`: a list of config mappings, each merged over `config`. Points run in that
    order, grid first. The rest as for submit() (an identical sweep is answered as an identical run is)."""
    _expect("configs", configs, (list, type(None)), "a list of config mappings")
    _expect("grid", grid, (dict, type(None)), "a mapping of config keys to lists of values")
    if not configs and not grid:
        raise ValueError("sweep() needs configs=[{...}, ...] and/or grid={'key': [values, ...]}")
    if configs is not None and not all(isinstance(c, dict) for c in configs):
        raise TypeError(f"configs={configs!r}: expected a list of mappings, one per point")
    if grid is not None and not all(isinstance(v, list) for v in grid.values()):
        raise TypeError(f"grid={grid!r}: expected each key to map to a list of values")
    for key, values in (grid or {}).items():  # (a dotted key is a nested config key here, as in a job's sweep)
        if not isinstance(key, str) or not all(key.split(".")):
            raise TypeError(f"grid: key {key!r}: expected a config key ('lr', or 'model.depth' for a nested one)")
        _carried(f"grid[{key!r}]", values)
    for i, point in enumerate(configs or []):
        _carried(f"configs[{i}]", point)
    target = _target(function, entrypoint, None)
    workdir = _workdir(cwd)
    data, blob = _code(target, workdir, name, config)
    data["sweep"] = {**({"grid": {_key(k): v for k, v in grid.items()}} if grid else {}),
                     **({"tasks": [_dotted(c) for c in configs]} if configs else {})}
    handle = _start(Sweep, profile, None, data, blob, sets, after, when, workdir, rerun)
    assert isinstance(handle, Sweep)
    return handle


def attach(run: str | Path | Run, profile: str = "local", runs_dir: str | Path | None = None,
           cwd: str | Path | None = None) -> Run:
    """A handle on an existing run (a Sweep for a sweep): its folder, or its name in the runs_dir of
    `profile` (or `runs_dir`), as `submit.py status RUN` finds it. SubmitError if there is none."""
    if isinstance(run, Run):
        run = run.run_dir
    _expect("run", run, (str, os.PathLike), "a run folder or its name")
    _expect("profile", profile, (str, os.PathLike), "a profile name or file")
    _expect("runs_dir", runs_dir, (str, os.PathLike, type(None)), "a folder")
    workdir = _workdir(cwd)
    folder = workdir / run
    if not any((folder / record).is_file() for record in (RUN_FILE, RECORD)):
        found = [row for row in runs(profile, runs_dir, n=1_000_000, cwd=workdir)
                 if str(run) in (row.get("run"), row.get("run_dir"))]
        if not found:
            raise SubmitError(f"error: run {str(run)!r}: not a run folder (nor a run's name in the runs folder of "
                              f"{'--runs-dir ' + str(runs_dir) if runs_dir else 'profile ' + str(profile)})")
        folder = Path(found[0]["run_dir"])
    folder = folder.resolve()
    cls = Sweep if _is_sweep(folder) else Run
    return cls(workdir, str(profile), folder, runs_dir=runs_dir)


def runs(profile: str = "local", runs_dir: str | Path | None = None, n: int = 20,
         cwd: str | Path | None = None, signature: str | None = None) -> list[dict[str, Any]]:
    """Recent runs, newest first, as `submit.py list --json` gives them: run, run_dir, profile, job,
    executor, tasks, created, state, target_metric, best, signature. `attach(row["run_dir"])` gives a handle.
    `signature`: only the runs with it (a handle's `signature`: the same job, config, shape, code, interpreter)."""
    _expect("profile", profile, (str, os.PathLike), "a profile name or file")
    _expect("n", n, (int,), "a number of runs")
    _expect("signature", signature, (str, type(None)), "a signature as status shows it")
    where = ["--profile", str(profile), *(["--runs-dir", str(runs_dir)] if runs_dir is not None else []),
             *(["--signature", signature] if signature is not None else [])]
    done = Run(_workdir(cwd), str(profile))._cli("list", "-n", str(n), "--json", *where)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        raise SubmitError(errors[0] if errors else f"list exited with {done.returncode}: {done.stderr[-500:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


# ----- arguments -----------------------------------------------------------------------------------

def _expect(name: str, value: Any, types: tuple[type, ...], what: str) -> None:
    """The API's arguments checked where they enter: a TypeError naming the parameter, not one from
    deep inside subprocess or pathlib."""
    if not isinstance(value, types) or isinstance(value, bool) and bool not in types:
        raise TypeError(f"{name}={value!r}: expected {what} ({' or '.join(t.__name__ for t in types)})")


def _target(function: Any, entrypoint: Any, job: Any) -> Any:
    """What to run: the function, an entrypoint (a function or "module:function"), or None for `job=`."""
    if isinstance(function, str) and (entrypoint is not None or job is not None or ":" not in function):
        raise TypeError(f"submit({function!r}, ...): the first argument is the function to run (or its "
                        f"'module:function'); give a profile as profile={function!r}")
    given = [g for g in (function, entrypoint, job) if g is not None]
    if len(given) != 1:
        raise ValueError("give one of: the function (submit(train, ...)), entrypoint= (a function or "
                         "'module:function') or job= (a job name or file)")
    target = function if function is not None else entrypoint
    if target is not None and not (isinstance(target, str) or callable(target)):
        raise TypeError(f"entrypoint={target!r}: expected a function or 'package.module:function'")
    return target


def _workdir(cwd: Any) -> Path:
    _expect("cwd", cwd, (str, os.PathLike, type(None)), "a folder")
    return Path(cwd or os.getcwd()).resolve()


def _carried(where: str, value: Any) -> None:
    """`value` arrives on the ranks exactly as given (the job travels as JSON, read back as YAML), or a
    TypeError/ValueError naming where it sits (`config['model']['depth']`) says why not."""
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}={value!r}: not a finite number, which the job's JSON cannot carry; "
                             f"use None or a finite value")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _carried(f"{where}[{i}]", item)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or not key or "." in key:
                raise (TypeError if not isinstance(key, str) else ValueError)(
                    f"{where}: key {key!r}: keys are non-empty strings without '.' ('.' names a nested key, as "
                    f"in sweeps and --set job.config.a.b): write {{'a': {{'b': ...}}}}")
            _carried(f"{where}[{key!r}]", item)
        return
    hint = " (a list arrives: give one)" if isinstance(value, tuple) else ""
    raise TypeError(f"{where}={short(value)}: {type(value).__name__} does not arrive on the ranks as "
                    f"given{hint}; config values are None, bools, numbers, strings, lists and mappings of them")


def _code(target: Any, workdir: Path, name: str | None, config: Any) -> tuple[dict[str, Any], bytes | None]:
    """The generated job's code keys (and the pickle, for a function handed over by value)."""
    _expect("config", config, (dict, type(None)), "a mapping")
    _carried("config", config)
    _expect("name", name, (str, type(None)), "a job name")
    pythonpath = environment().get("PYTHONPATH", "")
    spec = target if isinstance(target, str) else reference(target, workdir, pythonpath)
    if spec is not None:
        return {"name": name or spec.rpartition(":")[2], "entrypoint": spec, "config": config or {}}, None
    blob = by_value(target, workdir, pythonpath)
    return {"name": name or default_name(target), "function": shown(target),
            "config": config or {}}, blob


def _key(key: str) -> str:
    return key if key.startswith("config.") else f"config.{key}"


def _dotted(point: dict[str, Any]) -> dict[str, Any]:
    """{"lr": 0.1, "model": {"depth": 2}} -> {"config.lr": 0.1, "config.model.depth": 2}: the keys a sweep
    names (and its summary's columns), as `--set` names them."""
    return {f"config.{key}": functools.reduce(lambda inner, part: inner[part], key.split("."), point)
            for key in dotted_keys(point)}


def _after(after: Any, when: str) -> list[str]:
    """`--after RUN:COND` words for each run `after` names."""
    if when not in CONDITIONS:
        raise ValueError(f"when={when!r}: expected 'ok' (start after each run succeeded), 'any' (after each "
                         f"ended) or 'notok' (after each failed)")
    pair = isinstance(after, tuple) and len(after) == 2 and isinstance(after[1], str)
    items = [] if after is None else [after] if pair or isinstance(after, (Run, str, os.PathLike)) else after
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"after={after!r}: expected a run (a Run, a run folder), a (run, condition) pair, or a "
                        f"list of them")
    words = []
    for item in items:
        run, condition = item if isinstance(item, tuple) and len(item) == 2 else (item, when)
        if condition not in CONDITIONS:
            raise ValueError(f"after: ({run!r}, {condition!r}): the condition is one of 'ok', 'any', 'notok'")
        if not isinstance(run, (Run, str, os.PathLike)):
            raise TypeError(f"after: {run!r}: expected a Run or a run folder")
        words += ["--after", f"{run.run_dir if isinstance(run, Run) else os.fspath(run)}:{condition}"]
    return words


def _sets(sets: Any) -> list[str]:
    # A string is a sequence too: sets="job.epochs=3" would be read one character at a time.
    if sets is not None and (isinstance(sets, str) or not all(isinstance(item, str) for item in sets)):
        raise TypeError(f"sets={sets!r}: expected a list of 'KEY=VALUE' strings, e.g. ['job.epochs=3']")
    return [word for item in sets or [] for word in ("--set", item)]


def _start(cls: type[Run], profile: Any, job: str | None, data: dict[str, Any], blob: bytes | None, sets: Any,
           after: Any, when: str, workdir: Path, rerun: bool = False) -> Run:
    _expect("profile", profile, (str, os.PathLike), "a profile name or file")
    _expect("rerun", rerun, (bool,), "True or False")
    args = ["--profile", str(profile), "--job", job if job is not None else "-", *_sets(sets),
            *_after(after, when), *(["--rerun"] if rerun else [])]
    engine = Engine(args, workdir, json.dumps(data) if job is None else None, blob,
                    here=_runs_here(str(profile), sets, workdir))
    said = engine.wait_for("queued", "refused", "failed")
    # (The run queued names it: over SSH an identical run's answer names its own local record, not this one's.)
    run_dir = said.get("run_dir") if said is not None and said["event"] == "queued" else None
    run_dir = run_dir or next((e.get("run_dir") for e in engine.events if e.get("event") == "run_dir"), None)
    if said is None or said["event"] != "queued" or run_dir is None:
        engine.wait()
        error = SubmitError(engine.said())
        if engine.details():
            error.add_note(engine.details())  # your own code's traceback (an import that failed, say)
        raise error
    return cls(workdir, str(profile), Path(run_dir), engine, reused=bool(said.get("reused")))


def _runs_here(profile: str, sets: Any, workdir: Path) -> bool:
    """Whether the profile's executor is `debug`: its run is then this process's own (breakpoint() stops here),
    in this process's working directory, which is never changed for it: `cwd=` elsewhere is refused."""
    try:
        from launcher.config.profile import PROFILE_FILES
        from launcher.config.resolve import load_profile, parse_overrides

        found = PROFILE_FILES.find(profile, here=workdir)  # looked up from the submitter's folder, as the engine does
        debug = load_profile(str(found), parse_overrides(list(sets or []))["profile"])[0].executor == "debug"
    except Exception:  # noqa: BLE001 - a profile that does not load: the engine says why, in its own words
        return False
    if debug and workdir != Path.cwd().resolve():
        raise ValueError(f"cwd={str(workdir)!r}: a debug profile runs in this process (so that breakpoint() "
                         f"stops here), in its working directory {str(Path.cwd())!r}; os.chdir() there first, "
                         f"or use a local profile to run elsewhere")
    return debug


def _is_sweep(folder: Path) -> bool:
    """Whether a run folder's record says it is a sweep, by the rule `status` reads it with (launcher.rundir.
    record.RecordedRun.is_sweep: several tasks, or a sweep's overrides, a one-point sweep's too). A record that
    cannot be read is no sweep here: the handle's first call says what is wrong with it."""
    for name in (RUN_FILE, RECORD):
        try:
            record = json.loads((folder / name).read_text(encoding="utf-8"))
            tasks = record.get("tasks")
            return (isinstance(tasks, int) and tasks > 1) or record.get("sweep_overrides") is not None
        except (OSError, ValueError, AttributeError):
            continue
    return False
