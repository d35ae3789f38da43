"""A new run submitted over SSH (a profile with `login:`; docs/remote.md): planned once, here, as the
cluster side will queue it, and sent there as that object.

The plan is checked here as any other (launcher.request.plan.check), then built with the cluster
side's folders (launcher.remote.cluster_side): the submission `--dry-run` shows is the one queued
there (a dry run connects nowhere, so it puts remote_dir where the profile writes it; a real one
where the preflight found it). Sending it is the transport's steps (launcher.remote.transport): the
preflight, the code and your project synced by content, the local record (launcher.remote.ssh_record)
written before anything is queued, then the submission as JSON to the cluster side's `receive`,
whose output comes back line by line. The verb says each line (`say`: it prints them).
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher.cluster import preflights
from launcher.remote import folders, ssh_record, sync, transport
from launcher.remote.cluster_side import ClusterSide, interpreter
from launcher.remote.connection import Connection
from launcher.request import channel, wire
from launcher.request.errors import LostAfterSending
from launcher.request.plan import Checked
from launcher.request.submission import Submission, build
from launcher.rundir import layout, snapshot
from trainer.config.lookup import CODE_ROOT
from trainer.config.schema import ConfigError

EXIT_BAD_INPUT = 2  # the cluster side's exit status for bad input (launcher.commands.console's)


class SshPlan:
    """A new run's plan, sent from here to the cluster side of `profile.login`."""

    def __init__(self, checked: Checked, argv: list[str], say: Callable[[str], None]) -> None:
        self.checked, self.argv, self.source, self.say = checked, argv, checked.source, say
        self.profile = checked.profile
        files, self.git = snapshot.tool_files(CODE_ROOT)
        self.tool = sync.listing(CODE_ROOT, files, folders.CODE)
        survey = checked.project
        self.project = sync.listing(survey.root, survey.files, stamps=survey.stats) if survey is not None else None
        self.local = checked.run_dir  # the local record's folder; the run's there has the same name
        self._side = self._at(self.profile.remote_dir)  # where nothing connects (a dry run)
        self._sub: Submission | None = None

    def _at(self, root: str) -> ClusterSide:
        return ClusterSide(root, self.tool.address, self.project.address if self.project else "",
                           str(self.project.root) if self.project else "")

    @property
    def sub(self) -> Submission:
        """The submission as the cluster side queues it: built once, at the folders last learnt."""
        if self._sub is None:
            side, c = self._side, self.checked
            profile = side.profile(c.profile)
            survey = None if c.project is None else snapshot.Survey(
                Path(side.project_dir), c.project.files, c.project.bytes, c.project.git)
            origin = {"code": {"sent_from": str(CODE_ROOT), **self.git},
                      "project": {"laptop_root": str(c.project.root), "laptop_submit_dir": str(c.submit_dir)}
                      if c.project is not None else {}}
            self._sub = build(profile, side.points(profile, c.points), side.run_dir(self.local.name), c.is_sweep,
                              c.after, side.submit_dir(c.submit_dir), survey, Path(side.code_dir), origin,
                              function=c.function)
        return self._sub

    def heading(self) -> str:
        """What a dry run shows first: the commands that would run, quoted as they will run."""
        conn, side = Connection(self.profile.login, control=Path("<private socket folder>")), self._side
        wanted = (*self.tool.folders(), *(self.project.folders() if self.project else ()))
        lines = [f"# over SSH to {self.profile.login} (nothing connects in a dry run; remote_dir as the profile "
                 f"writes it, where the preflight finds it when it runs):",
                 f"# 1. the preflight: {shlex.join(conn.argv(transport.preflight_script(self.profile, wanted)))}"]
        for listing in (self.tool, self.project):
            if listing is not None:
                partial = folders.under(side.root, folders.partial(listing.kind, listing.address, "PID"))
                lines.append(f"# {len(lines)}. unless {listing.folders()[0]} is there ({len(listing.files)} files, named on "
                             f"standard input; then renamed from .partial): "
                             f"{shlex.join(conn.files_rsync_argv(listing.root, partial))}")
        command = transport.submission_command(side.root, self.local.name, interpreter(self.profile), side.code_dir)
        lines.append(f"# {len(lines)}. the submission below, as JSON on standard input: {shlex.join(conn.argv(command))}")
        return "\n".join(lines) + "\n"

    def preflight(self, dry_run: bool) -> preflights.Answer:
        """Nothing asked here: the cluster side asks its own SLURM (launcher.commands.receive)."""
        return preflights.Answer()

    def send(self, answer: preflights.Answer, as_json: bool) -> int:
        """Preflight, sync, record, ship; the cluster side's exit status."""
        conn = Connection(self.profile.login)
        wanted = (*self.tool.folders(), *(self.project.folders() if self.project else ()))
        root, found = transport.check_cluster_side(conn, self.profile, wanted)
        local = self.local = layout.claim(self.local)
        try:
            code_dir, sent = sync.sync(conn, self.tool, found, root)
            project = sync.sync(conn, self.project, found, root) if self.project else None
        except ConfigError:
            shutil.rmtree(local, ignore_errors=True)  # nothing was queued: no run record either
            raise
        self._side, self._sub = self._at(root), None
        sub = self.sub
        kept = ssh_record.RemoteRun(login=self.profile.login, remote_dir=root, remote_run_dir=str(sub.run_dir),
                                name=local.name, code=self.tool.address, python=interpreter(self.profile),
                                profile=self.profile.name, job=sub.tasks[0].job.name, tasks=len(sub.tasks),
                                created=time.time(), project=project[0] if project else "")
        ssh_record.write_remote_record(local, kept)
        channel.tell("run_dir", run_dir=str(local), remote_run_dir=str(sub.run_dir))
        self.say(f"run folder: {local} (the local record; the run: {self.profile.login}:{sub.run_dir})")
        self.say(f"code: {sent} file(s) sent to {conn.to.rsync_host}:{code_dir}")
        if project and self.project:
            self.say(f"project: {project[1]} of {len(self.project.files)} file(s) sent to "
                     f"{conn.to.rsync_host}:{project[0]}")
        command = transport.submission_command(root, local.name, kept.python, code_dir)
        code, last = transport.ship(conn, command, wire.dumps(sub, self.argv, self.source), self.say)
        if (lost := transport.lost(self.profile.login, code)) is not None:
            raise LostAfterSending(f"{lost}: `status {local}` asks the cluster side")
        if (problem := transport.problem_there(self.profile.login, self.profile, last)) is not None:
            shutil.rmtree(local, ignore_errors=True)  # its Python cannot run the tool: nothing was queued
            raise ConfigError(problem)
        if last and not last.startswith("{"):
            self.say(last)
        result = _parsed(last)
        earlier = _record_of(local, kept.login, str(result.get("run_dir") or "")) if result.get("reused") else None
        if earlier is not None:  # one run, one record here: this submission's is dropped for the one kept
            shutil.rmtree(local, ignore_errors=True)
            local, kept = earlier
            self.local = local
            channel.tell("run_dir", run_dir=str(local), remote_run_dir=kept.remote_run_dir)
            self.say(f"its local record: {local}")
        if result.get("job_ids") or result.get("job_id"):
            kept.job_ids = [str(i) for i in result.get("job_ids") or [result["job_id"]]]  # (reused: its newest)
            kept.remote_run_dir = str(result.get("run_dir") or kept.remote_run_dir)  # (a name taken there)
            ssh_record.write_remote_record(local, kept)
            channel.tell("queued", run_dir=str(local), job_ids=kept.job_ids, reused=bool(result.get("reused")))
        if code == EXIT_BAD_INPUT and not kept.job_ids:
            shutil.rmtree(local, ignore_errors=True)  # refused there (its error line said why): nothing queued
            # What it refused, as data (receive's last line), for a program that started this one.
            said = result.get("refused") if isinstance(result.get("refused"), dict) else {}
            channel.tell("refused", error=str(said.get("error") or f"login {self.profile.login}: the cluster side "
                                              f"refused the submission (exit {code})"),
                         details=str(said.get("details") or ""))
            return code
        if code == 0:
            self.say(f"from here: {Path(sys.argv[0]).name} status {local}")
        if last.startswith("{"):  # the last line, as --json promises (and as data, to a program that started this one)
            channel.tell("result", payload=result)
            if as_json:
                self.say(last)
        return code


def _record_of(local: Path, login: str, remote_run_dir: str) -> tuple[Path, ssh_record.RemoteRun] | None:
    """The local record, beside `local`, of the run `remote_run_dir` that the cluster side answered an identical
    submission with (launcher.commands.reuse); None where this machine has none (submitted from elsewhere)."""
    for folder in sorted(local.parent.iterdir()):
        if folder == local or folder.name.startswith("."):
            continue
        try:
            kept = ssh_record.read_remote_record(folder)
        except ConfigError:  # (a damaged record is not the one: `list` names it)
            continue
        if kept is not None and kept.login == login and kept.remote_run_dir == remote_run_dir:
            return folder, kept
    return None


def _parsed(line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
