"""Submitting from a laptop over SSH (profile `login:`, docs/remote.md), through a real sshd whose
unprivileged account alone reaches the dev cluster (launcher/devcluster/sshd.py). The submitting side has no
SLURM_CONF and looks at the cluster side only through ssh.

One training run (started first, in the background) is checked for several things; the preflight
faults, which queue nothing, run while it trains.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT as REPO, wait_until

pytestmark = pytest.mark.slurm

PROFILE = "extends: dev-cluster\nslurm_conf: ''\nlogin: mylab\n"


class Laptop:
    """A folder on the submitting side with an ssh profile, and the run it submitted first."""

    def __init__(self, folder: Path, server: object) -> None:
        self.folder, self.server = folder, server
        (folder / "mylab.yaml").write_text(PROFILE)
        self.first = subprocess.Popen(self.argv("--profile", "mylab.yaml", "--set", "job.epochs=2", "--wait",
                                                "--json"), cwd=folder, env=self.env(), text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._result: tuple[int, str, str] | None = None

    def env(self, **extra: str) -> dict[str, str]:
        env = self.server.client_env()  # type: ignore[attr-defined]
        env["PYTHONPATH"] = str(REPO)
        return {**env, **extra}

    @staticmethod
    def argv(*args: str) -> list[str]:
        return [sys.executable, str(REPO / "submit.py"), *args]

    def run(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), cwd=self.folder, env=self.env(**extra), capture_output=True,
                              text=True, timeout=300, check=False)

    def finished(self) -> tuple[int, str, str]:
        if self._result is None:
            out, err = self.first.communicate(timeout=400)
            self._result = (self.first.returncode, out, err)
        return self._result

    def records(self) -> list[Path]:
        return sorted(p.parent for p in (self.folder / "runs").glob("*/remote.json"))


@pytest.fixture(scope="module")
def laptop(ssh_login: object, tmp_path_factory: pytest.TempPathFactory) -> Laptop:
    return Laptop(tmp_path_factory.mktemp("laptop"), ssh_login)


def test_dry_run_never_connects_and_shows_the_ssh_and_rsync_lines(laptop: Laptop) -> None:
    done = laptop.run("--profile", "mylab.yaml", "--dry-run", DDP_SUBMIT_SSH="/nonexistent/ssh")
    assert done.returncode == 0, done.stderr
    assert "/nonexistent/ssh -o ControlMaster=auto" in done.stdout and "rsync -slc" in done.stdout
    assert "Dry run: nothing was submitted." in done.stdout
    # --after a run recorded here (submitted over SSH): the dependency on its recorded job id.
    record = laptop.folder / "runs" / "recorded"
    record.mkdir(parents=True, exist_ok=True)
    (record / "remote.json").write_text(json.dumps({"login": "mylab", "job_ids": ["4242"], "remote_dir": "/r",
                                                    "remote_run_dir": "/r/runs/recorded"}))
    after = laptop.run("--profile", "mylab.yaml", "--dry-run", "--after", str(record), DDP_SUBMIT_SSH="/nonexistent/ssh")
    assert after.returncode == 0 and "--dependency=afterok:4242" in after.stdout, after.stdout[-3000:] + after.stderr
    other = laptop.run("--profile", "dev-cluster", "--dry-run", "--after", str(record))
    assert other.returncode == 2 and "submitted over SSH to 'mylab'" in other.stderr, other.stderr
    shutil.rmtree(record)


@pytest.mark.parametrize("case, sets, expected", [
    ("unknown host key", {"DDP_SUBMIT_SSH": "EMPTY_KNOWN_HOSTS"}, "the host key is unknown or does not match"),
    ("unknown host", {"login": "nosuchhost.invalid"}, "the host name is unknown"),
    ("missing python", {"python": "python9.99"}, "there is no python9.99 on the cluster side's PATH"),
    ("missing rsync", {"login": "mylab-norsync"}, "rsync is not installed on the cluster side"),
    # (asked by the submission itself, after the sync: a Python there without site-packages)
    ("missing modules", {"python": "NO_SITE_PYTHON"}, "on the cluster side cannot import submitit and yaml"),
    ("unwritable remote_dir", {"remote_dir": "/proc/ddp"}, "profile.remote_dir '/proc/ddp' cannot be created"),
])
def test_preflight_faults_are_one_error_line_and_queue_nothing(laptop: Laptop, tmp_path: Path, case: str,
                                                               sets: dict[str, str], expected: str) -> None:
    env, args = {}, ["--profile", "mylab.yaml", "--set", f"profile.runs_dir={tmp_path}"]
    if sets.get("DDP_SUBMIT_SSH") == "EMPTY_KNOWN_HOSTS":
        # Another host name for the same server (a shared connection to 127.0.0.1 may already be
        # open, and connection sharing rightly skips the check then), with no key known for it.
        config = tmp_path / "ssh_config"
        (tmp_path / "empty_known_hosts").write_text("")
        config.write_text(laptop.server.ssh_config.read_text().replace(  # type: ignore[attr-defined]
            str(laptop.server.known_hosts), str(tmp_path / "empty_known_hosts")).replace(  # type: ignore[attr-defined]
            "HostName 127.0.0.1", "HostName localhost"))
        env["DDP_SUBMIT_SSH"] = f"ssh -F {config}"
    if sets.get("python") == "NO_SITE_PYTHON":
        home = laptop.server.run_remote("pwd").stdout.strip()  # type: ignore[attr-defined]
        sets = {"python": f"{home}/python-without-site"}
        laptop.server.run_remote(  # type: ignore[attr-defined]
            f"printf '#!/bin/sh\\nexec python3 -S \"$@\"\\n' > {sets['python']} && chmod +x {sets['python']}")
    for key, value in sets.items():
        if key != "DDP_SUBMIT_SSH":
            args += ["--set", f"profile.{key}={value}"]
    done = laptop.run(*args, **env)
    assert done.returncode == 2, (case, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], (case, done.stderr)
    assert not list(tmp_path.glob("*/remote.json")), "a failed preflight must leave no run record"


def test_digits_trains_on_two_nodes_through_the_login(laptop: Laptop) -> None:
    code, out, err = laptop.finished()
    assert code == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["world_size"] == 2 and result["test_accuracy"] > 0.5
    assert len(set(result["nodes"])) == 2, result["nodes"]
    assert str(result["run_dir"]).startswith("/home/"), "the run folder lives on the cluster side"
    sent = [line for line in out.splitlines() if line.startswith("code: ")]
    assert sent and "sent to mylab:" in sent[0]
    (record,) = laptop.records()
    assert json.loads((record / "remote.json").read_text())["job_ids"] == [str(result["job_id"])]
    # The identical submission again: answered where the runs live with that run, nothing queued, the same result;
    # here its one local record is named, and no second is left (the tests below list one).
    again = laptop.run("--profile", "mylab.yaml", "--set", "job.epochs=2", "--wait", "--json")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    answered = json.loads(again.stdout.strip().splitlines()[-1])
    assert answered["reused"] is True and answered["job_id"] == result["job_id"], answered
    assert answered["nodes"] == result["nodes"] and answered["test_accuracy"] == result["test_accuracy"]
    assert f"its local record: {record}" in again.stdout and laptop.records() == [record]


def test_status_logs_and_list_from_the_laptop(laptop: Laptop) -> None:
    assert laptop.finished()[0] == 0
    (record,) = laptop.records()
    # `--wait` returns once every rank left its result; SLURM may list the job as running a moment
    # longer (its steps end, the epilog runs) on a loaded machine: status follows the scheduler.
    status = wait_until(lambda: (done := laptop.run("status", str(record))).returncode == 0
                        and "COMPLETED" in done.stdout.upper() and done, 120, "status to say COMPLETED")
    assert "COMPLETED" in status.stdout.upper()
    logs = laptop.run("logs", record.name, "--runs-dir", "runs")
    assert logs.returncode == 0 and "epoch" in logs.stdout.lower(), logs.stdout[-2000:] + logs.stderr
    # `list` answers from the local records alone: no ssh (a command that cannot start) is needed.
    listed = laptop.run("list", "--runs-dir", "runs", "--json", DDP_SUBMIT_SSH="/nonexistent/ssh")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [r["run"] for r in rows] == [record.name] and "on mylab" in rows[0]["state"]
    watched = laptop.run("watch", str(record), "--once")  # relayed too (no terminal here: one frame)
    assert watched.returncode == 0 and "1 done" in watched.stdout and "(epoch 2/2)" in watched.stdout, watched.stdout


def test_the_python_api_with_the_ssh_profile(laptop: Laptop, monkeypatch: pytest.MonkeyPatch) -> None:
    """launcher.client from the laptop (a notebook's process): attach to the run submitted over SSH,
    its status, logs and result asked over the connection; a submission the cluster side refuses is
    SubmitError with its error line, and leaves no local record."""
    from launcher.client import SubmitError, attach, submit

    code, out, _ = laptop.finished()
    assert code == 0
    (record,) = laptop.records()
    for key, value in laptop.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_CONF", raising=False)
    run = attach(record)
    assert run.run_dir == record and [s["state"] for s in run.status()] == ["completed"]
    assert "epoch" in run.logs(rank=0).lower()
    result = run.result(timeout=60)
    assert result["test_accuracy"] == json.loads(out.strip().splitlines()[-1])["test_accuracy"], result
    with pytest.raises(SubmitError, match="nosuch"):  # refused before anything is queued: submit() says so
        submit(profile="mylab.yaml", job="digits", sets=["profile.partition=nosuch"], cwd=laptop.folder)
    assert laptop.records() == [record], "a refused submission leaves no local record"


def test_a_function_pickled_by_value_travels_with_the_run(laptop: Laptop, monkeypatch: pytest.MonkeyPatch) -> None:
    """launcher.client.submit(fn) of a closure (pickled by value) with the ssh profile: the pickle goes with the
    run, the cluster side checks it (a lambda taking no ctx is refused there: SubmitError, no local record)
    and its 2 nodes run it; the result and what a rank raised come back over the connection."""
    from launcher.client import RunFailed, SubmitError, submit

    for key, value in laptop.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_CONF", raising=False)

    def make(offset: int) -> Any:
        def train(ctx: Any, config: dict[str, Any]) -> dict[str, Any]:
            if config.get("fail_rank") == ctx.rank:
                raise KeyError(f"rank {ctx.rank} has no shard")
            return {"value": config["x"] + offset, "world": ctx.world_size}
        return train

    run = submit(make(2), profile="mylab.yaml", config={"x": 40}, cwd=laptop.folder)
    failing = submit(make(0), profile="mylab.yaml", config={"x": 0, "fail_rank": 1}, cwd=laptop.folder)
    assert (run.run_dir / "remote.json").is_file() and run.remote
    result = run.result(timeout=600)
    assert result["value"] == 42 and result["world"] == 2
    # It travelled inside the planned submission (kept there as sent) and sits in the run folder there; both private.
    kept = json.loads((run.run_dir / "remote.json").read_text())
    there = laptop.server.run_remote(  # type: ignore[attr-defined]
        f"cd {kept['remote_dir']} && stat -c %a {kept['remote_run_dir']}/function.pkl submissions/{run.run_dir.name}.json "
        f"&& cat submissions/{run.run_dir.name}.json").stdout.splitlines()
    assert there[:2] == ["600", "600"], there[:2]
    assert json.loads(there[2])["submission"]["function"], "the submission carries the pickled function"
    with pytest.raises(RunFailed, match="rank 1 raised KeyError: 'rank 1 has no shard'"):
        failing.result(timeout=600)
    with pytest.raises(SubmitError, match=r"the function must take \(ctx\) or \(ctx, config\), its signature is \(\)"):
        submit(lambda: None, profile="mylab.yaml", cwd=laptop.folder)
    assert not [r for r in laptop.records() if "-lambda-" in r.name], "a refused submission leaves no local record"


def with_events(laptop: Laptop, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """The command line run with `--events FD` as launcher.client runs it: its output and its events."""
    read, write = os.pipe()
    try:
        done = subprocess.run(laptop.argv(*args, "--events", str(write)), cwd=laptop.folder, env=laptop.env(),
                              pass_fds=(write,), capture_output=True, text=True, timeout=300, check=False)
    finally:
        os.close(write)
    with os.fdopen(read, encoding="utf-8") as stream:
        return done, [json.loads(line) for line in stream]


def test_a_refusal_on_the_cluster_side_is_told_as_data(laptop: Laptop) -> None:
    """With `--events FD` (what launcher.client reads), what the cluster side refused (an unknown
    partition: only its SLURM knows) comes back as a `refused` event carrying its error line's text,
    after the `run_dir` event of a local record that is gone again; exit status 2."""
    done, events = with_events(laptop, "--profile", "mylab.yaml", "--set", "profile.partition=nosuch")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr
    assert [e["event"] for e in events] == ["run_dir", "refused"], events
    refused = events[-1]["error"]
    assert "nosuch" in refused and f"error: {refused}" in done.stderr, (refused, done.stderr)
    assert not Path(events[0]["run_dir"]).exists() and events[0]["remote_run_dir"], events[0]


def test_a_relayed_resume_keeps_its_events_here(laptop: Laptop) -> None:
    """`--resume RECORD --events FD` runs on the cluster side without the descriptor (it names one of this
    machine's pipes); how it ended is told here: a completed run has nothing to resume (exit 0, `result`)."""
    assert laptop.finished()[0] == 0
    first = min(laptop.records(), key=lambda folder: folder.name)  # (named by the time it was submitted)
    done, events = with_events(laptop, "--resume", str(first))
    assert done.returncode == 0 and "nothing to resume" in done.stdout, done.stdout[-2000:] + done.stderr
    assert events == [{"event": "result", "payload": {"run_dir": str(first)}}], events


def states(laptop: Laptop, record: Path) -> list[str]:
    status = laptop.run("status", str(record), "--json")
    found = [json.loads(line)["state"].upper() for line in status.stdout.splitlines() if line.startswith("{")]
    assert found, status.stdout + status.stderr
    return found


def test_unchanged_code_sends_nothing_and_a_cut_after_sbatch_loses_nothing(laptop: Laptop) -> None:
    """A second submission of the same project, cut off (sshd and its connections killed) once the
    cluster side recorded its job id: the next status, over a new connection, finds the job queued;
    cancel and --resume work on it from the laptop."""
    assert laptop.finished()[0] == 0
    before = set(laptop.records())
    waiting = subprocess.Popen(laptop.argv("--profile", "mylab.yaml", "--set", "job.epochs=200", "--wait"),
                               cwd=laptop.folder, env=laptop.env(), text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    queued = ""
    while not queued and time.monotonic() < deadline:  # until the cluster side recorded the job id
        time.sleep(0.5)
        for record in set(laptop.records()) - before:
            remote = json.loads((record / "remote.json").read_text())["remote_run_dir"]
            said = laptop.server.run_remote(  # type: ignore[attr-defined]
                f"cat {remote}/run.json 2>/dev/null", check=False).stdout
            queued = str(json.loads(said).get("job_ids") or "") if said.strip() else ""
    assert queued, "the submission never queued"
    laptop.server.cut()  # type: ignore[attr-defined]
    try:
        out, err = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode != 0 and "status" in err, err
    assert "code: 0 file(s) sent" in out, "an unchanged project transfers no file"
    laptop.server.start()  # type: ignore[attr-defined]
    (record,) = set(laptop.records()) - before
    assert states(laptop, record)[0] in ("PENDING", "RUNNING"), "status finds the job queued before the cut"
    assert laptop.run("cancel", str(record)).returncode == 0
    assert all(state.startswith("CANCEL") for state in states(laptop, record))
    # --resume of the local record resubmits on the cluster side; its new job is what status sees.
    # (profile.wait=false: the run was submitted with --wait, which its recorded profile keeps.)
    resumed = laptop.run("--resume", str(record), "--set", "profile.wait=false", "--json")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    new_id = str(json.loads(resumed.stdout.strip().splitlines()[-1])["job_id"])
    assert new_id not in queued
    assert laptop.run("cancel", str(record)).returncode == 0


@pytest.mark.parametrize("key, value, valid", [
    ("login", "-oProxyCommand=touch /tmp/x", "an ssh destination"),  # would be read as an ssh option
    ("login", "my lab", "an ssh destination"),
    ("remote_dir", "relative/dir", "an absolute folder on the cluster side, or one under ~/"),
])
def test_a_bad_login_key_is_one_error_line_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           key: str, value: str, valid: str) -> None:
    from launcher.commands.main import main

    (tmp_path / "mylab.yaml").write_text(PROFILE)
    code = main(["--profile", str(tmp_path / "mylab.yaml"), "--set", f"profile.{key}={value}", "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"key '{key}'" in err[0] and valid in err[0], err


ENTRY = '''import os

import mypkg


def main(ctx, config):
    with open(os.path.join(config["data"], "x.txt")) as f:
        data = f.read().strip()
    ctx.log({"ok": 1.0}, 1)
    return {"ok": 1.0, "version": mypkg.VERSION, "data": data, "module": mypkg.__file__, "cwd": os.getcwd()}
'''


def user_repo(root: Path) -> Path:
    """A git repository of the user's own, outside this project: a package, a job file, data beside it."""
    files = {"mypkg/__init__.py": 'VERSION = "submitted"\n', "mypkg/train.py": ENTRY,
             "sub/data/x.txt": "sub-data\n", "data/x.txt": "root-data\n",
             ".gitignore": f"runs/\n# {root.parent.name} {time.time()}: a project the cluster side has not seen\n",
             "jobs/entry.yaml": 'entrypoint: "mypkg.train:main"\ntarget_metric: ok\nconfig:\n  data: data\n'}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "sub" / "mylab.yaml").write_text(PROFILE)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "submitted"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True)
    return root


def test_a_user_project_travels_and_an_edit_after_submission_does_not_reach_the_queued_run(
        laptop: Laptop, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A user entrypoint from its own git repository, submitted from its `sub/` folder over SSH and
    held in the queue (--begin); a second submission of the unchanged project sends no file; the
    laptop's copy is edited, then the held job released: it runs the submitted code, imported from
    its RUN/project, in the synced copy of `sub/` (its relative `data` is sub/data); `logs -f` from
    the laptop follows it to the end."""
    repo = user_repo(tmp_path / "repo")
    args = ["--profile", "mylab.yaml", "--job", "../jobs/entry.yaml", "--set", f"profile.runs_dir={tmp_path / 'runs'}"]

    def run(*more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(laptop.argv(*args, *more), cwd=repo / "sub", env=laptop.env(), capture_output=True,
                              text=True, timeout=300, check=False)

    held = run("--set", "profile.sbatch_extra.begin=now+1hour", "--json")
    assert held.returncode == 0, held.stdout + held.stderr
    job_id = str(json.loads(held.stdout.strip().splitlines()[-1])["job_id"])
    server = laptop.server
    request.addfinalizer(lambda: server.run_remote(f"scancel {job_id}", check=False))  # type: ignore[attr-defined]
    (sent,) = [line for line in held.stdout.splitlines() if line.startswith("project: ")]
    assert sent.startswith("project: 7 of 7 file(s) sent to mylab:"), sent
    (record,) = [p.parent for p in (tmp_path / "runs").glob("*/remote.json")]
    # The same project again: the synced folder is found whole (refused afterwards by the cluster
    # side's live preflight, an unknown partition, so nothing more is queued).
    again = run("--set", "profile.partition=nosuch")
    assert "project: 0 of 7 file(s) sent" in again.stdout, again.stdout + again.stderr
    assert again.returncode == 2 and "nosuch" in again.stderr, again.stderr

    (repo / "mypkg" / "__init__.py").write_text('VERSION = "edited"\n')
    (repo / "sub" / "data" / "x.txt").write_text("edited-data\n")
    laptop.server.run_remote(f"scontrol update jobid={job_id} starttime=now")  # type: ignore[attr-defined]
    follow = subprocess.run(laptop.argv("logs", "-f", str(record)), cwd=repo, env=laptop.env(), capture_output=True,
                            text=True, timeout=300, check=False)
    assert follow.returncode == 0, follow.stdout[-2000:] + follow.stderr
    assert states(laptop, record) == ["COMPLETED"]
    remote = json.loads((record / "remote.json").read_text())
    result = json.loads(laptop.server.run_remote(  # type: ignore[attr-defined]
        f"cat {remote['remote_run_dir']}/result.json").stdout)
    assert result["version"] == "submitted" and result["data"] == "sub-data", result
    assert result["module"] == f"{remote['remote_run_dir']}/project/mypkg/__init__.py", result
    assert result["cwd"] == f"{remote['project']}/sub", "the ranks start in the synced copy of sub/"


def test_the_project_hash_follows_contents_and_the_dry_run_shows_the_project_rsync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """In-process: remembered per-file hashes (by size, mtime, ctime, inode) never hide an edit, and an
    unchanged project keeps its address; --dry-run's lines name the project's rsync."""
    from launcher import filestamp
    from launcher.commands.main import main
    from launcher.remote import sync
    from launcher.remote.connection import Connection

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.py").write_text("def main(ctx, config):\n    return {}\n")
    (tmp_path / "p" / "b.py").write_text("B = 1\n")
    # Old enough to be remembered: a file changed within RACY_S is re-read (the tool's one rule, filestamp).
    wait_until(lambda: all(filestamp.settled(filestamp.source_stat(p.stat()), time.time())
                           for p in (tmp_path / "p").iterdir()),
               30, "the files to be older than the racy window", poll=0.2)
    first, before = sync.project_hash(tmp_path / "p", ["a.py", "b.py"])
    remembered = json.loads(sync.hash_cache_file(tmp_path / "p").read_text())
    assert before == "" and remembered["names"] == ["a.py", "b.py"], remembered
    assert all(len(entry) == 5 for entry in remembered["entries"]), remembered  # the stamp and the content hash
    assert sync.project_hash(tmp_path / "p", ["a.py", "b.py"]) == (first, first)
    # Edited in place with its mtime put back (as `cp -p`, `touch -r` or an archive tool do): same size,
    # mtime and inode; only the ctime tells, as for the snapshot's links. The sync's own rule missed it.
    original = (tmp_path / "p" / "a.py").read_text()
    st = (tmp_path / "p" / "a.py").stat()
    (tmp_path / "p" / "a.py").write_text(original.replace("{}", "[]"))
    os.utime(tmp_path / "p" / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns))
    hidden, before = sync.project_hash(tmp_path / "p", ["a.py", "b.py"])
    assert hidden != first and before == first, "an edit hidden by its mtime"
    (tmp_path / "p" / "a.py").write_text(original.replace("{}", "()"))  # same size: the mtime (or inode) tells
    edited, before = sync.project_hash(tmp_path / "p", ["a.py", "b.py"])
    assert edited not in (first, hidden) and before == hidden
    (tmp_path / "p" / "a.py").write_text(original)
    assert sync.project_hash(tmp_path / "p", ["a.py", "b.py"])[0] == first, "content, not stat, is the address"
    (tmp_path / "p" / "job.yaml").write_text('entrypoint: "a:main"\ntarget_metric: ok\n')
    (tmp_path / "p" / "mylab.yaml").write_text(PROFILE)
    monkeypatch.chdir(tmp_path / "p")
    assert main(["--profile", "mylab.yaml", "--job", "job.yaml", "--dry-run"]) == 0
    lines = capsys.readouterr().out
    assert "--files-from=-" in lines and "projects/." in lines and "mylab:~/ddp-submit/projects/." in lines, lines
    # A remote_dir with spaces and a quote: each path one argument, unquoted (rsync -s carries it
    # through its own protocol; a shell quote would become part of the name).
    argv = Connection("mylab", control=tmp_path).files_rsync_argv(tmp_path / "p", "/h/my runs/it's/projects/b",
                                                                  "/h/my runs/it's/projects/a")
    assert "-slc" in argv and "--copy-dest=/h/my runs/it's/projects/a" in argv, argv
    assert argv[-1] == "mylab:/h/my runs/it's/projects/b/", argv


def test_the_request_queued_there_is_the_one_the_dry_run_showed(laptop: Laptop, request: pytest.FixtureRequest) -> None:
    """Plan once: the laptop's `--dry-run --json` and the submission the cluster side queued are the
    same object: its sbatch script (as submitit wrote it there), its executor parameters (as run.json
    there recorded them) and its run folder, named as the laptop's record (remote_dir written absolute,
    so that the dry run knows it without connecting)."""
    home = laptop.server.run_remote("pwd").stdout.strip()  # type: ignore[attr-defined]
    args = ["--profile", "mylab.yaml", "--set", f"profile.remote_dir={home}/ddp-submit",
            "--set", "profile.sbatch_extra.begin=now+1hour", "--set", "job.epochs=1", "--json"]
    dry = laptop.run(*args, "--dry-run", DDP_SUBMIT_SSH="/nonexistent/ssh")
    assert dry.returncode == 0, dry.stderr
    shown = json.loads(dry.stdout.strip().splitlines()[-1])
    before = set(laptop.records())
    sent = laptop.run(*args)
    assert sent.returncode == 0, sent.stdout[-2000:] + sent.stderr
    job_id = str(json.loads(sent.stdout.strip().splitlines()[-1])["job_id"])
    request.addfinalizer(lambda: laptop.server.run_remote(f"scancel {job_id}", check=False))  # type: ignore[attr-defined]
    (record,) = set(laptop.records()) - before
    remote = json.loads((record / "remote.json").read_text())["remote_run_dir"]
    shown_dir, name = Path(shown["run_dir"]), record.name
    assert shown_dir.parent == Path(home, "ddp-submit", "runs") and Path(remote) == shown_dir.parent / name
    there = json.loads(laptop.server.run_remote(f"cat {remote}/run.json").stdout)  # type: ignore[attr-defined]
    script = laptop.server.run_remote(  # type: ignore[attr-defined]
        f"cat $(find {remote}/logs -name '*_submission.sh' | head -1)").stdout
    renamed = lambda text: text.replace(shown_dir.name, name)  # noqa: E731  (the dry run's second, the run's)
    assert there["run_dir"] == remote and there["executor_parameters"] == json.loads(
        renamed(json.dumps(shown["executor_parameters"]))), (there["executor_parameters"], shown["executor_parameters"])
    assert script and script == renamed(shown["sbatch_script"]), (script, shown["sbatch_script"])
    kept = json.loads(laptop.server.run_remote(  # type: ignore[attr-defined]
        f"cat {home}/ddp-submit/submissions/{name}.json").stdout)
    assert kept["submission"]["run_dir"] == remote and kept["submission"]["profile"]["login"] == ""


def test_an_ssh_uri_login_reaches_the_cluster_side(laptop: Laptop, tmp_path: Path) -> None:
    """`login: ssh://user@host:port` (OpenSSH's own form): ssh and rsync reach the same account, the
    port passed as -p; the cluster side then refuses an unknown partition, so nothing is queued."""
    from launcher.devcluster import sshd

    login = f"ssh://{sshd.USER}@127.0.0.1:{laptop.server.port}"  # type: ignore[attr-defined]
    done = laptop.run("--profile", "mylab.yaml", "--set", f"profile.login={login}", "--set",
                      f"profile.runs_dir={tmp_path}", "--set", "profile.partition=nosuch")
    assert done.returncode == 2 and "nosuch" in done.stderr, done.stdout + done.stderr
    assert f"file(s) sent to {sshd.USER}@127.0.0.1:/" in done.stdout, done.stdout
    assert not list(tmp_path.glob("*/remote.json")), "refused there: no local record"


@pytest.mark.parametrize("login, shown, rsync_dest", [
    ("ssh://mylab", "-- mylab ", " 'mylab:"), ("ssh://alice@mylab", "-- alice@mylab ", " 'alice@mylab:"),
    ("ssh://alice@login.example.org:2222", "-p 2222 -- alice@login.example.org ", "-p 2222' /"),
    ("ssh://[::1]:22", "-p 22 -- ::1 ", " '[::1]:~/"), ("alice@mylab", "-- alice@mylab ", " 'alice@mylab:"),
])
def test_an_ssh_login_in_either_openssh_form_is_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      login: str, shown: str, rsync_dest: str) -> None:
    """`login:` as ssh takes it: an alias, user@host, or ssh://[user@]host[:port]; the port travels
    as -p to ssh and to rsync's ssh alike (the dry run shows the commands as they will run)."""
    from launcher.commands.main import main

    (tmp_path / "mylab.yaml").write_text(PROFILE)
    code = main(["--profile", str(tmp_path / "mylab.yaml"), "--set", f"profile.login={login}", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and shown in out, out[:3000]
    rsync = next(line for line in out.splitlines() if line.startswith("# 2."))
    assert rsync_dest in rsync and ("-p " in rsync) == ("-p " in shown), rsync


@pytest.mark.parametrize("login", ["ssh://", "ssh://mylab:0", "ssh://mylab:65536", "ssh://mylab:port",
                                   "ssh://mylab/home", "ssh://-oProxyCommand=x", "ssh://alice@", "ssh://al ice@mylab",
                                   "ssh://alice@-mylab", "-oProxyCommand=x"])
def test_a_malformed_ssh_login_is_one_error_line_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                login: str) -> None:
    from launcher.commands.main import main

    (tmp_path / "mylab.yaml").write_text(PROFILE)
    code = main(["--profile", str(tmp_path / "mylab.yaml"), "--set", f"profile.login={login}", "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "key 'login'" in err[0] and "ssh://[user@]host[:port]" in err[0], err


@pytest.mark.parametrize("value, dry, expected", [
    ('ssh -F "unclosed', True, "No closing quotation"),  # even a dry run cannot show that command
    ("/nonexistent/ssh -F cfg", False, "the program '/nonexistent/ssh' is not there"),
])
def test_a_bad_ddp_submit_ssh_is_one_error_line_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str], value: str,
                                                                   dry: bool, expected: str) -> None:
    from launcher.commands.main import main

    monkeypatch.setenv("DDP_SUBMIT_SSH", value)
    (tmp_path / "mylab.yaml").write_text(PROFILE)
    code = main(["--profile", str(tmp_path / "mylab.yaml"), "--set", f"profile.runs_dir={tmp_path / 'runs'}",
                 *(["--dry-run"] if dry else [])])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: DDP_SUBMIT_SSH=") and expected in err[0], err
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir()), "nothing is left"
    # The operating commands of a run recorded here read the same variable, the same way.
    record = tmp_path / "runs" / "recorded"
    record.mkdir(parents=True, exist_ok=True)
    (record / "remote.json").write_text(json.dumps({"login": "mylab", "remote_dir": "/r", "remote_run_dir": "/r/runs/x",
                                                    "code": "abc", "job_ids": ["12"]}))
    code = main(["status", str(record)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and expected in err[0], err


@pytest.mark.parametrize("job_ids, expected", [
    ("4711", "'job_ids' has invalid value '4711'"), (["12", {"x": 1}], "'job_ids[1]'"), (["12", "abc"], "'job_ids[1]'"),
])
def test_a_remote_record_whose_job_ids_do_not_fit_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                     job_ids: object, expected: str) -> None:
    """remote.json's one typed reader (launcher.remote.ssh_record): `--after` of a record whose job ids are a
    string does not depend on jobs 4, 7 and 1; `status` does not relay a record with a foreign id."""
    from launcher.commands.main import main

    (tmp_path / "mylab.yaml").write_text(PROFILE)
    record = tmp_path / "recorded"
    record.mkdir()
    (record / "remote.json").write_text(json.dumps({"login": "mylab", "remote_dir": "/r", "remote_run_dir": "/r/runs/x",
                                                    "code": "abc", "job_ids": job_ids}))
    for argv in (["--profile", str(tmp_path / "mylab.yaml"), "--after", str(record), "--dry-run"],
                 ["status", str(record)]):
        code = main(argv)
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert code == 2 and len(err) == 1 and expected in err[0] and "remote.json" in err[0], (argv, err)
        assert "afterok" not in captured.out
