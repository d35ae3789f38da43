"""Submitting over SSH (issue 23, docs/remote.md): what the connection, the preflight and the sync add.

Through the tests' real sshd on 127.0.0.1 (launcher/devcluster/sshd.py: an unprivileged account whose login
environment alone reaches the dev cluster), with the shared connection already open (warm):
  1. one submission of `digits` over SSH (`--profile` with `login:`), timed on the laptop, beside
     the same submission made on the login node itself (the cluster side's copy of the tool, run
     there with the dev-cluster profile), timed there, so the ssh of the measuring command is not
     counted; interleaved, medians of --repeats. The jobs are held (`--begin now+1hour`) and
     cancelled: only queueing is measured. Issue's budget: at most 1 s more.
  2. syncing a 20,000-file project (benchmarks/snapshot.py's generated git repository) with
     launcher.remote.sync (as a submission lists and syncs it): the first (cold) sync, then unchanged (the content hash
     from remembered per-file hashes and the listing's stamps, one check there; issue's budget: at most
     0.5 s), then with one file edited (a new folder, the rest copied there by --copy-dest).
Needs root (sshd, the account) and the dev cluster up. Usage: python benchmarks/remote.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import load_note  # noqa: E402
from benchmarks.snapshot import make_repo  # noqa: E402
from launcher import devcluster  # noqa: E402
from launcher.devcluster import sshd  # noqa: E402
from launcher.remote import sync, transport  # noqa: E402
from launcher.remote.connection import Connection  # noqa: E402
from launcher.rundir import snapshot  # noqa: E402

# (--rerun: each measured submission queues; an identical pending one would otherwise be followed, not queued.)
HOLD = ["--set", "profile.sbatch_extra.begin=now+1hour", "--set", "job.epochs=1", "--json", "--rerun"]
# On the login node: the same tool the SSH submission runs there, timed there (the ssh around it is not).
LOGIN_TIMED = ("import json,subprocess,sys,time;t=time.perf_counter();"
               "p=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
               "print(json.dumps({'s':time.perf_counter()-t,'rc':p.returncode,'out':p.stdout[-400:],"
               "'err':p.stderr[-400:]}))")


AS_FILES = ("import json,sys,yaml;s=json.load(open(sys.argv[1]+'.json'))['submission'];"
            "open(sys.argv[1]+'-profile.yaml','w').write(yaml.safe_dump(s['profile']));"
            "open(sys.argv[1]+'-job.yaml','w').write(yaml.safe_dump(s['tasks'][0]['job']))")


def over_ssh(laptop: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / "submit.py"), "--profile", "mylab.yaml", *HOLD], cwd=laptop,
                          env=env, capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"submission over SSH failed: {done.stderr[-1000:]}")
    return took, str(json.loads(done.stdout.strip().splitlines()[-1])["job_id"])


def on_login_node(server: sshd.Server, remote_dir: str, code: str, profile: str) -> tuple[float, str]:
    tool = ["env", f"PYTHONPATH={remote_dir}/code/{code}", "python3", "-m", "launcher",
            "--profile", f"{profile}-profile.yaml", "--job", f"{profile}-job.yaml", *HOLD]
    said = server.run_remote(f"cd {remote_dir} && python3 -c {shlex.quote(LOGIN_TIMED)} {shlex.join(tool)}")
    result = json.loads(said.stdout.strip().splitlines()[-1])
    if result["rc"] != 0:
        raise SystemExit(f"submission on the login node failed: {result['err']}")
    return result["s"], str(json.loads(result["out"].strip().splitlines()[-1])["job_id"])


def sync_unchanged(conn: Connection, repo: Path, remote_dir: str, repeats: int) -> dict[str, float]:
    """launcher.remote.sync.listing + sync as a submission calls them (the plan's listing given, made
    fresh for each: its cost is shown apart, as the snapshot's own)."""
    # Content the cluster side has not seen (a repository made the same way earlier would be found there).
    (repo / "NONCE").write_text(f"{time.time()}\n")
    listing = snapshot.survey(repo, [], 1000, "bench", skip=[repo / "runs"])

    def timed() -> tuple[float, int]:
        """What a submission adds for the project: its listing's address, the preflight's question
        (timed here as a round trip of its own, so pessimistic), and the sync. The plan's listing is
        made fresh each time, as every submission makes it, and not counted (its cost is shown apart)."""
        survey = snapshot.survey(repo, [], 1000, "bench", skip=[repo / "runs"])
        start = time.perf_counter()
        found = sync.listing(repo, survey.files, stamps=survey.stats)
        asked = " ".join(f"test -d {f} && echo found:{f};" for f in found.folders())
        there = conn.run(f"cd {remote_dir} && {asked} true").stdout
        _, sent = sync.sync(conn, found, {w[6:] for w in there.split() if w.startswith("found:")}, remote_dir)
        return time.perf_counter() - start, sent

    cold, cold_sent = timed()
    unchanged = [timed() for _ in range(repeats)]
    hashes, stats = [], []
    for _ in range(repeats):  # the hash alone: as a submission runs it (the listing's stamps), and with lstat calls
        start = time.perf_counter()
        sync.project_hash(repo, listing.files, known_stamps=listing.stats)
        hashes.append(time.perf_counter() - start)
        start = time.perf_counter()
        sync.project_hash(repo, listing.files)
        stats.append(time.perf_counter() - start)
    edited = repo / listing.files[len(listing.files) // 2]
    edited.write_text(edited.read_text() + "# edited\n")
    one, one_sent = timed()
    return {"files": len(listing.files), "cold_s": cold, "cold_sent": cold_sent,
            "unchanged_s": statistics.median(t for t, _ in unchanged), "sent": max(n for _, n in unchanged),
            "hash_s": statistics.median(hashes), "stat_s": statistics.median(stats), "one_s": one, "one_sent": one_sent, "listing_s": listing.seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--sync-only", action="store_true", help="only part 2 (the project's sync)")
    args = parser.parse_args()
    if not devcluster.is_up():
        raise SystemExit("the dev cluster is not up (python -m launcher.devcluster up)")
    print(load_note())
    with tempfile.TemporaryDirectory(prefix="bench-remote-") as tmp:
        work = Path(tmp)
        server = sshd.make_server(work / "sshd", devcluster.slurm_conf_path())
        server.start()
        os.environ["DDP_SUBMIT_SSH"] = server.ssh_command  # this process's own Connection, too
        queued: list[str] = []
        try:
            laptop = work / "laptop"
            laptop.mkdir()
            (laptop / "mylab.yaml").write_text("extends: dev-cluster\nslurm_conf: ''\nlogin: mylab\n")
            # Bytecode caches on both sides, as on a user's laptop: the login node (ssh's environment)
            # writes them; a PYTHONDONTWRITEBYTECODE here would add 0.15 s of compiling to the laptop alone.
            env = {**server.client_env(), "PYTHONPATH": str(ROOT)}
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            if args.sync_only:  # where the remote_dir is: the shipped preflight's answer
                where = SimpleNamespace(python="", remote_dir="~/ddp-submit")
                remote_dir = transport.check_cluster_side(Connection("mylab"), where)[0]  # type: ignore[arg-type]
                synced = sync_unchanged(Connection("mylab"), make_repo(work / "repo", args.files, 0.0), remote_dir,
                                      args.repeats)
                print_sync(synced, args.repeats)
                return 0
            warm, first = over_ssh(laptop, env)  # opens the shared connection and syncs the code: not counted
            queued.append(first)
            record = json.loads(next((laptop / "runs").glob("*/remote.json")).read_text())
            remote_dir, code = record["remote_dir"], record["code"]
            # The login node runs the profile and job exactly as the SSH submission shipped them there
            # (written as files from the submission it kept: a login node's user has files, not JSON).
            profile = f"{remote_dir}/submissions/{record['name']}"
            server.run_remote(f"cd {remote_dir} && python3 -c {shlex.quote(AS_FILES)} {shlex.quote(profile)}")
            ssh_s, login_s = [], []
            for _ in range(args.repeats):
                took, job = on_login_node(server, remote_dir, code, profile)
                login_s.append(took)
                queued.append(job)
                took, job = over_ssh(laptop, env)
                ssh_s.append(took)
                queued.append(job)
            repo = make_repo(work / "repo", args.files, 0.0)
            synced = sync_unchanged(Connection("mylab"), repo, remote_dir, args.repeats)
        finally:
            if queued:
                server.run_remote(f"scancel {' '.join(queued)}", check=False)
            server.cut()
    ssh_m, login_m = statistics.median(ssh_s), statistics.median(login_s)
    print(f"\n1. one submission of digits (queued, held), medians of {args.repeats}; first (cold) one over SSH "
          f"{warm:.2f} s")
    print(f"{'':34}{'login node':>12}{'over SSH':>12}{'more':>10}{'ratio':>8}")
    print(f"{'submit, warm connection (s)':34}{login_m:12.2f}{ssh_m:12.2f}{ssh_m - login_m:10.2f}"
          f"{ssh_m / login_m:8.2f}   (budget: at most 1 s more)")
    print(f"{'  each (s)':34}{' '.join(f'{s:.2f}' for s in login_s):>12}  {' '.join(f'{s:.2f}' for s in ssh_s)}")
    print_sync(synced, args.repeats)
    return 0


def print_sync(synced: dict[str, float], repeats: int) -> None:
    print(f"\n2. syncing a {synced['files']}-file project (medians of {repeats})")
    print(f"{'':44}{'seconds':>10}{'sent':>8}{'of budget':>11}")
    print(f"{'first sync (cold: nothing there yet)':44}{synced['cold_s']:10.3f}{synced['cold_sent']:8d}")
    print(f"{'unchanged (hash from stat + one check)':44}{synced['unchanged_s']:10.3f}{synced['sent']:8d}"
          f"{synced['unchanged_s'] / 0.5:11.2f}   (budget: at most 0.5 s)")
    print(f"{'  of which the content hash':44}{synced['hash_s']:10.3f}")
    print(f"{'  (the hash with an lstat per file of its own)':44}{synced['stat_s']:10.3f}")
    print(f"{'one file edited (--copy-dest: the rest copied)':44}{synced['one_s']:10.3f}{synced['one_sent']:8d}")
    print(f"{'(the snapshot listing, for scale)':44}{synced['listing_s']:10.3f}")


if __name__ == "__main__":
    sys.exit(main())
