"""Submitting a run on a cluster reached over SSH (profile `login:`; docs/remote.md).

The laptop plans and checks the submission as always, then: a preflight over the one shared
connection (launcher.cluster.ssh) that also asks which content-addressed folders of the code and
the project are there already, the missing ones rsynced from where they are (launcher.commands.
remote_sync), and the same tool run there from that folder, where the login environment reaches
SLURM. So every SLURM command of a run (sbatch through submitit, squeue, sacct, scontrol, scancel)
runs on the cluster side through launcher.cluster.slurm.env, as on a login node; none runs here.
The laptop keeps a small record per run (launcher.commands.remote_runs), written before the remote
side queues anything.
"""

from __future__ import annotations

import argparse
import base64
import json
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from launcher.cluster.ssh import Connection, connection_error, remote_path
from launcher.commands.console import EXIT_BAD_INPUT, error_line
from launcher.commands.remote_runs import checked_record, read_record, write_record
from launcher.commands.remote_sync import project_job, project_listing, sync_listing, sync_project, tool_listing
from launcher.config.after import split as split_after
from launcher.config.profile import Profile
from launcher.request import channel
from trainer.config.schema import ConfigError

# Run on the cluster side from the synced code (launcher.commands.cluster_side).
MISSING = "missing: "
# The modules are imported first: where they are missing, one marker line (preflight_problem), exit 3.
_SUBMIT_BOOT = ("import sys\ntry:\n import submitit, yaml\nexcept ImportError:\n print('missing: modules')\n"
                " sys.exit(3)\nfrom launcher.commands.cluster_side import main;sys.exit(main(sys.argv[1:]))")


def interpreter(profile: Profile) -> str:
    """The cluster side's Python: the profile's `python` there, else python3 on the login PATH."""
    return profile.python or "python3"


def preflight(conn: Connection, profile: Profile, folders: tuple[str, ...] = ()) -> tuple[str, set[str]]:
    """One round trip before anything is queued: ssh works, rsync and Python are there, remote_dir
    can be written. Returns remote_dir as an absolute path there, and which of `folders` (relative to
    it: the code's and the project's versions) exist there, asked in the same trip. (Whether that
    Python imports submitit and yaml is asked by the submission itself, BOOT: starting one more
    Python there to import them cost 0.3-0.5 s, a third of the budget over a login node.)"""
    py = shlex.quote(interpreter(profile))
    probe = "".join(f"test -d {shlex.quote(f)} && echo found:{shlex.quote(f)}; " for f in folders)
    script = (f"D={remote_path(profile.remote_dir)}; command -v rsync >/dev/null 2>&1 || {{ echo '{MISSING}rsync'; "
              f"exit 3; }}; command -v {py} >/dev/null 2>&1 || {{ echo '{MISSING}python'; exit 3; }}; "
              f"mkdir -p \"$D/code\" \"$D/projects\" \"$D/runs\" 2>/dev/null && test -w \"$D\" || "
              f"{{ echo 'unwritable'; exit 4; }}; "
              f"cd \"$D\" && {{ {probe}pwd -P; }}")
    done = conn.run(script, timeout=120)
    if (said := connection_error(conn.login, done.returncode, done.stderr)) is not None:
        raise ConfigError(f"profile.login: {said}")
    out = done.stdout.strip().splitlines()
    last = out[-1] if out else ""
    found = {line[len("found:"):] for line in out if line.startswith("found:")}
    if (problem := preflight_problem(conn.login, profile, last)) is not None:
        raise ConfigError(problem)
    if done.returncode != 0 or not last.startswith("/"):
        raise ConfigError(f"login {conn.login}: the preflight failed (exit {done.returncode}): "
                          f"{(done.stderr or done.stdout).strip()[-300:]}")
    return last, found


def preflight_problem(login: str, profile: Profile, said: str) -> str | None:
    """The error line for what the cluster side reported missing (`said`: its marker line), else None."""
    problems = {
        f"{MISSING}rsync": "rsync is not installed on the cluster side (install it there, e.g. apt-get install rsync)",
        f"{MISSING}python": f"there is no {interpreter(profile)} on the cluster side's PATH (set profile.python to "
                            f"its interpreter there)",
        f"{MISSING}modules": f"{interpreter(profile)} on the cluster side cannot import submitit and yaml "
                             f"(pip install submitit pyyaml there, or set profile.python)",
        "unwritable": f"profile.remote_dir {profile.remote_dir!r} cannot be created or written on the cluster side",
    }
    return f"login {login}: {problems[said]}" if said in problems else None


def shipped_profile(profile: Profile, remote_root: str) -> dict[str, Any]:
    """The profile as the cluster side runs it: no login; its runs and data under remote_dir, and
    SLURM_CONF from the login environment (local paths mean nothing there)."""
    data = asdict(profile)
    for key in ("login", "remote_dir"):
        data.pop(key)
    data.update(runs_dir=f"{remote_root}/runs", data_dir=f"{remote_root}/data", slurm_conf="", wait=False)
    return data


def submit(sub: Any, args: argparse.Namespace, job_data: dict[str, Any], source: str = "") -> int:
    """A new run over SSH; `sub` was planned and checked on this machine. Unchanged code and project
    cost two round trips (the preflight, which also finds their folders there, and the submission)."""
    from launcher.rundir import layout

    profile = sub.profile
    conn = Connection(profile.login)
    listing = project_listing(sub, source or profile.name)
    tool, note = tool_listing()
    root, found = preflight(conn, profile, (*tool.folders("code"), *(listing.folders() if listing else ())))
    local = layout.claim(sub.run_dir)
    try:
        code_dir, sent = sync_listing(conn, tool, found, root, "code")
        synced = sync_project(conn, listing, found, root, Path(sub.submit_dir)) if listing else None
    except ConfigError:
        shutil.rmtree(local, ignore_errors=True)  # nothing was queued: no run record either
        raise
    remote_run = f"{root}/runs/{local.name}"
    record = {"name": local.name, "profile": profile.name, "login": profile.login, "remote_dir": root,
              "remote_run_dir": remote_run, "code": tool.address, "python": interpreter(profile), "job_ids": [],
              "job": sub.tasks[0].job.name, "tasks": len(sub.tasks), "created": time.time(),
              **({"project": synced["dir"]} if synced else {})}
    write_record(local, record)
    channel.tell("run_dir", run_dir=str(local), remote_run_dir=remote_run)
    print(f"run folder: {local} (the local record; the run: {profile.login}:{remote_run})", flush=True)
    print(f"code: {sent} file(s) sent to {profile.login}:{code_dir}", flush=True)
    if synced:
        print(f"project: {synced['sent']} of {synced['files']} file(s) sent to {profile.login}:{synced['dir']}",
              flush=True)
        job_data = project_job(job_data, sub.tasks[0].job, synced)
    spec = {"profile": shipped_profile(profile, root), "job": job_data, "run_dir": remote_run,
            # A function handed over from Python by value travels with the run (the cluster side checks it).
            **({"function": base64.b64encode(sub.function).decode()} if sub.function is not None else {}),
            "code": code_dir, "note": note,
            "project": synced and {"dir": synced["dir"], "submit_dir": synced["submit_dir"],
                                   "laptop_root": synced["root"], "laptop_submit_dir": str(sub.submit_dir)}}
    extra = ["--json", *(["--wait"] if args.wait else []), *after_there(args.after)]
    # (umask 077: the submission may hold a pickled function, and unpickling runs code)
    command = (f"umask 077 && cd {shlex.quote(root)} && mkdir -p submissions && "
               f"cat > submissions/{local.name}.json && "
               f"PYTHONPATH={shlex.quote(code_dir)} exec {shlex.quote(record['python'])} "
               f"-c {shlex.quote(_SUBMIT_BOOT)} submissions/{local.name}.json {shlex.join(extra)}")
    code_rc, last = _stream(conn, command, json.dumps(spec))
    if code_rc == 255:
        print(error_line(f"{connection_error(profile.login, 255, '') or 'the connection was lost'}; the run may "
                         f"be queued: `status {local}` asks the cluster side"), file=sys.stderr)
        return 1
    if (problem := preflight_problem(profile.login, profile, last)) is not None:
        shutil.rmtree(local, ignore_errors=True)  # its Python cannot run the tool: nothing was queued
        raise ConfigError(problem)
    if last and not last.startswith("{"):
        print(last, flush=True)
    result = _parse(last)
    if result.get("job_ids") or result.get("job_id"):
        record["job_ids"] = result.get("job_ids") or [str(result["job_id"])]
        write_record(local, record)
        channel.tell("queued", run_dir=str(local), job_ids=record["job_ids"])
    if code_rc == EXIT_BAD_INPUT and not record["job_ids"]:
        shutil.rmtree(local, ignore_errors=True)  # refused there (its error line said why): nothing queued
    elif code_rc == 0:
        print(f"from here: {Path(sys.argv[0]).name} status {local}", flush=True)
    if args.json and last.startswith("{"):  # the last line, as --json promises
        print(last, flush=True)
    return code_rc


def after_there(after: list[str] | None) -> list[str]:
    """Each `--after RUN[:COND]` as the cluster side reads it: a run recorded here is its run folder there."""
    words = []
    for item in after or []:
        run, condition = split_after(item, Path(item).is_dir())
        record = checked_record(Path(run), ("remote_run_dir",)) if read_record(Path(run)) is not None else None
        words += ["--after", f"{record['remote_run_dir'] if record else run}:{condition}"]
    return words


def _stream(conn: Connection, command: str, stdin: str) -> tuple[int, str]:
    """Run `command` there, its output shown as it comes; the last line (the JSON summary or a
    marker) held back, for the caller."""
    process = subprocess.Popen(conn.argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(stdin)
    process.stdin.close()
    held = ""
    for line in process.stdout:
        if held:
            print(held, end="", flush=True)
        held = line
    return process.wait(), held.strip()


def _parse(line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def dry_run_lines(profile: Profile, project_root: str = "") -> str:
    """What a submission would run over SSH (nothing connects): shown by --dry-run."""
    from trainer.config.lookup import CODE_ROOT

    conn = Connection(profile.login, control=Path("<private socket folder>"))
    rsync = conn.files_rsync_argv(CODE_ROOT, f"{profile.remote_dir}/code/<content hash>")
    project = ""
    if project_root:  # your project's files (the snapshot's list, on standard input)
        files = conn.files_rsync_argv(Path(project_root), f"{profile.remote_dir}/projects/<content hash>")
        project = f"# then (your project's files, named on standard input): {shlex.join(files)}\n"
    ssh = conn.argv(f"cd {profile.remote_dir} && PYTHONPATH=code/<content hash> {interpreter(profile)} -c ... "
                    f"--profile PROFILE --job JOB --json")
    return (f"# over SSH to {profile.login} (nothing connects in a dry run):\n# preflight, then (unless "
            f"code/<content hash> is there; the tool's files, named on standard input): "
            f"{shlex.join(rsync)}\n{project}# then: {shlex.join(ssh)}\n")
