"""Submitting and operating runs on a cluster reached over SSH (profile `login:`; docs/remote.md).

The laptop plans and checks the submission as always, then: a preflight over the one shared
connection (launcher.cluster.ssh), the code snapshot rsynced into a content-addressed folder on the
cluster side, and the same tool run there from that folder, where the login environment reaches
SLURM. So every SLURM command of a run (sbatch through submitit, squeue, sacct, scontrol, scancel)
runs on the cluster side through launcher.cluster.slurm.env, as on a login node; none runs here.
The laptop keeps a small record per run (RUN/remote.json: name, profile, login, job ids, remote
path), written before the remote side queues anything, so `list` works offline and `status`,
`logs`, `cancel` and `--resume` of a recorded run are relayed over the connection.
"""

from __future__ import annotations

import argparse
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
from launcher.commands.remote_sync import code_hash, project_job, project_listing, sync_project
from launcher.config.profile import Profile
from trainer.config.schema import ConfigError

RECORD = "remote.json"
RELAYED = ("status", "logs", "cancel")
# Options of the relayed commands that take a value (the RUN argument is the first other word).
_VALUED = {"--profile", "--runs-dir", "--task", "--rank", "--attempt", "-n"}
# Run on the cluster side from the synced code (launcher.commands.cluster_side).
_SUBMIT_BOOT = "import sys;from launcher.commands.cluster_side import main;sys.exit(main(sys.argv[1:]))"
_MAIN_BOOT = "import sys;from launcher.commands.main import main;sys.exit(main(sys.argv[1:]))"


def interpreter(profile: Profile) -> str:
    """The cluster side's Python: the profile's `python` there, else python3 on the login PATH."""
    return profile.python or "python3"


def preflight(conn: Connection, profile: Profile, folders: tuple[str, ...] = ()) -> tuple[str, set[str]]:
    """One round trip before anything is queued: ssh works, rsync and Python (with submitit and
    yaml) are there, remote_dir can be written. Returns remote_dir as an absolute path there, and
    which of `folders` (relative to it: the project's versions) exist there, asked in the same trip."""
    py = shlex.quote(interpreter(profile))
    probe = "".join(f"test -d {shlex.quote(f)} && echo found:{shlex.quote(f)}; " for f in folders)
    script = (f"D={remote_path(profile.remote_dir)}; command -v rsync >/dev/null 2>&1 || {{ echo 'missing: rsync'; "
              f"exit 3; }}; command -v {py} >/dev/null 2>&1 || {{ echo 'missing: python'; exit 3; }}; "
              f"{py} -c 'import submitit, yaml' >/dev/null 2>&1 || {{ echo 'missing: modules'; exit 3; }}; "
              f"mkdir -p \"$D/code\" \"$D/projects\" \"$D/runs\" 2>/dev/null && test -w \"$D\" || "
              f"{{ echo 'unwritable'; exit 4; }}; "
              f"cd \"$D\" && {{ {probe}pwd -P; }}")
    done = conn.run(script, timeout=120)
    if (said := connection_error(conn.login, done.returncode, done.stderr)) is not None:
        raise ConfigError(f"profile.login: {said}")
    out = done.stdout.strip().splitlines()
    last = out[-1] if out else ""
    found = {line[len("found:"):] for line in out if line.startswith("found:")}
    problems = {
        "missing: rsync": "rsync is not installed on the cluster side (install it there, e.g. apt-get install rsync)",
        "missing: python": f"there is no {interpreter(profile)} on the cluster side's PATH (set profile.python to "
                           f"its interpreter there)",
        "missing: modules": f"{interpreter(profile)} on the cluster side cannot import submitit and yaml "
                            f"(pip install submitit pyyaml there, or set profile.python)",
        "unwritable": f"profile.remote_dir {profile.remote_dir!r} cannot be created or written on the cluster side",
    }
    if last in problems:
        raise ConfigError(f"login {conn.login}: {problems[last]}")
    if done.returncode != 0 or not last.startswith("/"):
        raise ConfigError(f"login {conn.login}: the preflight failed (exit {done.returncode}): "
                          f"{(done.stderr or done.stdout).strip()[-300:]}")
    return last, found


def shipped_profile(profile: Profile, remote_root: str) -> dict[str, Any]:
    """The profile as the cluster side runs it: no login; its runs and data under remote_dir, and
    SLURM_CONF from the login environment (local paths mean nothing there)."""
    data = asdict(profile)
    for key in ("login", "remote_dir"):
        data.pop(key)
    data.update(runs_dir=f"{remote_root}/runs", data_dir=f"{remote_root}/data", slurm_conf="", wait=False)
    return data


def submit(sub: Any, args: argparse.Namespace, job_data: dict[str, Any], source: str = "") -> int:
    """A new run over SSH; `sub` was planned and checked on this machine."""
    from launcher.rundir import layout, snapshot

    profile = sub.profile
    conn = Connection(profile.login)
    listing = project_listing(sub, source or profile.name)
    root, found = preflight(conn, profile, listing.folders() if listing else ())
    local = sub.run_dir
    while True:
        try:
            local.mkdir(parents=True)
            break
        except FileExistsError:
            local = layout.next_free(local)
    code = snapshot.ensure(local)
    address = code_hash(code)
    sent = conn.rsync(code, f"{root}/code/{address}")
    try:
        synced = sync_project(conn, listing, found, root, Path(sub.submit_dir)) if listing else None
    except ConfigError:
        shutil.rmtree(local, ignore_errors=True)  # nothing was queued: no run record either
        raise
    remote_run = f"{root}/runs/{local.name}"
    record = {"name": local.name, "profile": profile.name, "login": profile.login, "remote_dir": root,
              "remote_run_dir": remote_run, "code": address, "python": interpreter(profile), "job_ids": [],
              "job": sub.tasks[0].job.name, "tasks": len(sub.tasks), "created": time.time(),
              **({"project": synced["dir"]} if synced else {})}
    _write(local, record)
    print(f"code: {sent} file(s) sent to {profile.login}:{root}/code/{address}", flush=True)
    if synced:
        print(f"project: {synced['sent']} of {synced['files']} file(s) sent to {profile.login}:{synced['dir']}",
              flush=True)
        job_data = project_job(job_data, sub.tasks[0].job, synced)
    spec = {"profile": shipped_profile(profile, root), "job": job_data, "run_dir": remote_run,
            "code": f"{root}/code/{address}", "note": snapshot.read_note(local) or {},
            "project": synced and {"dir": synced["dir"], "submit_dir": synced["submit_dir"],
                                   "laptop_root": synced["root"], "laptop_submit_dir": str(sub.submit_dir)}}
    extra = ["--json", *(["--wait"] if args.wait else [])]
    command = (f"cd {shlex.quote(root)} && mkdir -p submissions && cat > submissions/{local.name}.json && "
               f"PYTHONPATH=\"$PWD/code/{address}\" exec {shlex.quote(record['python'])} "
               f"-c {shlex.quote(_SUBMIT_BOOT)} submissions/{local.name}.json {shlex.join(extra)}")
    code_rc, last = _stream(conn, command, json.dumps(spec))
    if code_rc == 255:
        print(error_line(f"{connection_error(profile.login, 255, '') or 'the connection was lost'}; the run may "
                         f"be queued: `status {local}` asks the cluster side"), file=sys.stderr)
        return 1
    result = _parse(last)
    if result.get("job_ids") or result.get("job_id"):
        record["job_ids"] = result.get("job_ids") or [str(result["job_id"])]
        _write(local, record)
    if code_rc == 0:
        print(f"local record: {local}\nfrom here: {Path(sys.argv[0]).name} status {local}", flush=True)
    if args.json and last:  # the last line, as --json promises
        print(last, flush=True)
    return code_rc


def _stream(conn: Connection, command: str, stdin: str) -> tuple[int, str]:
    """Run `command` there, its output shown as it comes; the last line (the JSON summary) held back."""
    process = subprocess.Popen(conn.argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(stdin)
    process.stdin.close()
    held = ""
    for line in process.stdout:
        if held:
            print(held, end="", flush=True)
        held = line
    if held and not held.startswith("{"):
        print(held, end="", flush=True)
        held = ""
    return process.wait(), held.strip()


def _parse(line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _write(local: Path, record: dict[str, Any]) -> None:
    (local / RECORD).write_text(json.dumps(record, indent=1) + "\n")


def read_record(folder: Path) -> dict[str, Any] | None:
    try:
        value = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def dry_run_lines(profile: Profile, project_root: str = "") -> str:
    """What a submission would run over SSH (nothing connects): shown by --dry-run."""
    conn = Connection(profile.login, control=Path("<private socket folder>"))
    rsync = conn.rsync_argv(Path("RUN/code"), f"{profile.remote_dir}/code/<content hash>")
    project = ""
    if project_root:  # your project's files (the snapshot's list, on standard input)
        files = conn.files_rsync_argv(Path(project_root), f"{profile.remote_dir}/projects/<content hash>")
        project = f"# then (your project's files, named on standard input): {shlex.join(files)}\n"
    ssh = conn.argv(f"cd {profile.remote_dir} && PYTHONPATH=code/<content hash> {interpreter(profile)} -c ... "
                    f"--profile PROFILE --job JOB --json")
    return (f"# over SSH to {profile.login} (nothing connects in a dry run):\n# preflight, then: "
            f"{shlex.join(rsync)}\n{project}# then: {shlex.join(ssh)}\n")


def relayed(argv: list[str]) -> int | None:
    """status/logs/cancel/--resume of a run recorded here: run on the cluster side. None: not one."""
    if argv and argv[0] in RELAYED:
        words, at = argv[1:], None
        skip = False
        for i, word in enumerate(words):
            if skip:
                skip = False
            elif word in _VALUED:
                skip = True
            elif not word.startswith("-"):
                at = i
                break
        head, run = [argv[0]], at
    elif "--resume" in argv and argv.index("--resume") + 1 < len(argv):
        words, head, run = argv, [], argv.index("--resume") + 1
    else:
        return None
    if run is None:
        return None
    folder = _record_folder(words[run], words)
    if folder is None:
        return None
    record = read_record(folder)
    assert record is not None
    # --runs-dir: the cluster side has none of this machine's profiles to look runs up in.
    rest = _without_runs_dir(words[:run] + [record["remote_run_dir"]] + words[run + 1:])
    rest += ["--runs-dir", f"{record['remote_dir']}/runs"]
    conn = Connection(record["login"])
    command = (f"cd {shlex.quote(record['remote_dir'])} && PYTHONPATH=\"$PWD/code/{record['code']}\" exec "
               f"{shlex.quote(record['python'])} -c {shlex.quote(_MAIN_BOOT)} {shlex.join(head + rest)}")
    code = subprocess.run(conn.argv(command), check=False).returncode
    if code == 255:
        print(error_line(connection_error(record["login"], 255, "") or "ssh failed"), file=sys.stderr)
        return EXIT_BAD_INPUT
    return code


def _record_folder(word: str, words: list[str]) -> Path | None:
    if read_record(Path(word)) is not None:
        return Path(word)
    if "/" in word:
        return None
    try:
        from launcher.config.resolve import runs_dir

        profile = words[words.index("--profile") + 1] if "--profile" in words[:-1] else "local"
        explicit = words[words.index("--runs-dir") + 1] if "--runs-dir" in words[:-1] else None
        folder = runs_dir(profile, explicit) / word
    except (ConfigError, OSError):
        return None
    return folder if read_record(folder) is not None else None


def _without_runs_dir(words: list[str]) -> list[str]:
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("--profile", "--runs-dir"):
            skip = True
        else:
            out.append(word)
    return out


def with_records(rows: list[dict[str, Any]], where: Path, most: int) -> list[dict[str, Any]]:
    """`list`'s rows with the runs recorded here merged in, newest first (as run_folders orders)."""
    if not (recorded := record_rows(where)):
        return rows
    when = lambda r: r["created"] if isinstance(r.get("created"), (int, float)) else 0  # noqa: E731
    return sorted(rows + recorded, key=lambda r: (when(r), str(r["run"])), reverse=True)[:max(0, most)]


def record_rows(where: Path) -> list[dict[str, Any]]:
    """`list`'s rows for the runs recorded here (offline: what the record says)."""
    rows = []
    for folder in sorted(where.glob(f"*/{RECORD}"), reverse=True):
        if (record := read_record(folder.parent)) is not None:
            ids = ",".join(str(i) for i in record.get("job_ids") or []) or "?"
            rows.append({"run": record.get("name", folder.parent.name), "run_dir": str(folder.parent),
                         "profile": record.get("profile", ""), "job": record.get("job", ""),
                         "tasks": record.get("tasks", ""), "created": record.get("created"),
                         "state": f"on {record.get('login')} (job {ids})", "remote_run_dir": record.get("remote_run_dir"),
                         "target_metric": "", "best": None})
    return rows

