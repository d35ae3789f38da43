"""Values as users write them, in job files, profile files and `--set`: YAML 1.2 numbers, booleans
only from true/false, no base-60 integers, SLURM's time and memory spellings, relative paths.

The table goes through `launcher.config.resolve.resolve`, the code `submit.py` runs before anything
else; the command-line tests below show the same values in `--dry-run`'s sbatch request and the
one-line `error:` with exit 2.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from launcher.config.resolve import resolve
from tests.helpers import ROOT, last_json, run_submit
from trainer.config.schema import ConfigError


@pytest.fixture(autouse=True)
def no_session_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """These dry runs show what a profile asks for; a SLURM_CONF left by the session's cluster
    fixture would turn them into preflights against the dev cluster's small limits."""
    monkeypatch.delenv("SLURM_CONF", raising=False)

ERROR = object()


def minutes(r: Any) -> int:
    return r.profile.time_min


def mem_mb(r: Any) -> int:
    return r.profile.mem_per_task_mb


# (where the value is written: "job" file, "profile" file or "set"; the text; what to read back
# (a job/profile field name or a function of the resolved config); the expected value, or ERROR
# with substrings of the message)
TABLE: list[tuple[str, str, Any, Any]] = [
    ("job", "lr: 1e-3", "lr", 0.001),
    ("job", "momentum: .5", "momentum", 0.5),
    ("job", "lr: 5e4", "lr", 50000.0),
    ("job", "weight_decay: 5e-4", "weight_decay", 0.0005),
    ("job", "lr: 1.0e+3", "lr", 1000.0),
    ("job", "epochs: 017", "epochs", 17),  # decimal in YAML 1.2 (octal in 1.1)
    ("job", "epochs: 0x10", "epochs", 16),
    ("job", "nesterov: true", "nesterov", True),
    ("job", "nesterov: yes", "nesterov", (ERROR, "'nesterov'", "'yes'", "true or false")),
    ("job", "nesterov: on", "nesterov", (ERROR, "'nesterov'", "'on'")),
    ("job", "name: 1:30", "name", "1:30"),  # the base-60 trap: 90 in YAML 1.1
    ("job", "name: 2026-01-01", "name", "2026-01-01"),  # a date stays a string
    ("job", "epochs: '3'", "epochs", (ERROR, "'epochs'", "'3'", "an integer")),
    ("job", "seed: 1_000", "seed", (ERROR, "'seed'", "'1_000'", "an integer")),
    ("job", "epochs: 5e4", "epochs", (ERROR, "'epochs'", "50000.0", "an integer")),
    ("profile", "time: 90", minutes, 90),
    ("profile", "time: 1:30:00", minutes, 90),  # the base-60 trap: 5400 in YAML 1.1
    ("profile", "time: 2-00:00:00", minutes, 2880),
    ("profile", "time: 1-12", minutes, 2160),
    ("profile", "time: 1-12:30", minutes, 2190),
    ("profile", "time: '1:30'", minutes, 2),  # SLURM's MM:SS: 1 min 30 s, rounded up
    ("profile", "time_min: 45", minutes, 45),  # the former key still reads
    ("profile", "time: 1:75:00", minutes, (ERROR, "'time'", "'1:75:00'", "HH:MM:SS")),
    ("profile", "time: 1h", minutes, (ERROR, "'time'", "'1h'", "D-HH:MM:SS")),
    ("profile", "time: 0", minutes, (ERROR, "'time'", "> 0")),
    ("profile", "time: 30\ntime_min: 45", minutes, (ERROR, "both 'time_min' and 'time'", "keep only 'time'")),
    ("profile", "mem_per_task: 64G", mem_mb, 65536),
    ("profile", "mem_per_task: 500M", mem_mb, 500),
    ("profile", "mem_per_task: 1.5T", mem_mb, 1572864),
    ("profile", "mem_per_task: 4000", mem_mb, 4000),  # a bare number is MB, as in sbatch --mem
    ("profile", "mem_per_task_gb: 2", mem_mb, 2048),  # the former key still reads
    ("profile", "mem_per_task: 64 GiB", mem_mb, (ERROR, "'mem_per_task'", "'64 GiB'", "64G")),
    ("profile", "wait: no", "wait", (ERROR, "'wait'", "'no'", "true or false")),
    ("profile", "cpus_per_task: 2.0", "cpus_per_task", (ERROR, "'cpus_per_task'", "an integer")),
    ("set", "job.lr=1e-3", "lr", 0.001),
    ("set", "job.momentum=.5", "momentum", 0.5),
    ("set", "job.lr=5e4", "lr", 50000.0),
    ("set", "job.name=1:30", "name", "1:30"),
    ("set", "job.nesterov=yes", "nesterov", (ERROR, "'nesterov'", "'yes'")),
    ("set", "job.epochs=5e4", "epochs", (ERROR, "'epochs'", "an integer")),
    ("set", "profile.time=1:30:00", minutes, 90),
    ("set", "profile.time_min=1:30:00", minutes, 90),  # formerly read as base 60: 5400 minutes
    ("set", "profile.time=2-00:00:00", minutes, 2880),
    ("set", "profile.time=1-12", minutes, 2160),
    ("set", "profile.time=90", minutes, 90),
    ("set", "profile.mem_per_task=64G", mem_mb, 65536),
    ("set", "profile.mem_per_task_gb=0.75", mem_mb, 768),
    ("set", "profile.mem_per_task=lots", mem_mb, (ERROR, "'mem_per_task'", "'lots'", "500M")),
    ("set", "profile.time=soon", minutes, (ERROR, "'time'", "'soon'", "1:30:00")),
]


def _resolve(tmp_path: Path, where: str, text: str) -> Any:
    (tmp_path / "job.yaml").write_text("extends: digits\n" + (text + "\n" if where == "job" else ""))
    (tmp_path / "profile.yaml").write_text("extends: slurm-cpu\n" + (text + "\n" if where == "profile" else ""))
    sets = [text] if where == "set" else []
    return resolve(str(tmp_path / "profile.yaml"), str(tmp_path / "job.yaml"), sets)


@pytest.mark.parametrize("where,text,read,expected", TABLE, ids=[f"{w}:{t}" for w, t, _, _ in TABLE])
def test_value_table(tmp_path: Path, where: str, text: str, read: Any, expected: Any) -> None:
    if isinstance(expected, tuple) and expected[0] is ERROR:
        with pytest.raises(ConfigError) as err:
            _resolve(tmp_path, where, text)
        message = str(err.value)
        assert "\n" not in message
        for part in expected[1:]:
            assert part in message, f"{part!r} not in {message!r}"
        return
    resolved = _resolve(tmp_path, where, text)
    if callable(read):
        got = read(resolved)
    elif where == "profile" or text.startswith("profile."):
        got = getattr(resolved.profile, read)
    else:
        got = getattr(resolved.job, read)
    assert got == expected and type(got) is type(expected), (got, expected)


def test_table_is_large_enough() -> None:
    assert len(TABLE) >= 30
    assert {w for w, _, _, _ in TABLE} == {"job", "profile", "set"}


def test_dry_run_asks_slurm_for_what_was_written(tmp_path: Path) -> None:
    """`time: 1:30:00` and `mem_per_task: 3G` reach the sbatch script as 90 minutes and 3072 MB."""
    (tmp_path / "p.yaml").write_text("extends: slurm-cpu\ntime: 1:30:00\nmem_per_task: 3G\n")
    proc = run_submit(["--profile", "p.yaml", "--set", "job.lr=1e-3", "--dry-run", "--json"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    info = last_json(proc.stdout)
    assert info["executor_parameters"]["time"] == 90
    assert info["executor_parameters"]["mem"] == f"{3072 * 2}M"  # 2 tasks per node
    assert math.isclose(info["job"]["lr"], 0.001)
    assert "#SBATCH --time=90" in info["sbatch_script"]


@pytest.mark.parametrize("text,expected", [
    ("", "the file is empty"),
    ("# only a comment\n", "the file is empty"),
    ("epochs: 3\nepochs: 4\n", "duplicate key 'epochs'"),
])
def test_empty_or_ambiguous_job_file_is_one_line_error(tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / "j.yaml").write_text(text)
    proc = run_submit(["--job", "j.yaml", "--dry-run"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "j.yaml" in proc.stderr and expected in proc.stderr


def test_relative_paths_follow_the_file_that_wrote_them(tmp_path: Path) -> None:
    """In a file: relative to that file's folder (through `extends:` too); on the command line:
    relative to the current directory; defaults no file sets: the current directory."""
    conf, base, here = tmp_path / "conf", tmp_path / "shared", tmp_path / "work"
    for folder in (conf, base, here):
        folder.mkdir()
    (base / "base.yaml").write_text("extends: slurm-cpu\ndata_dir: datasets\nslurm_conf: ../cluster/slurm.conf\n")
    (conf / "p.yaml").write_text("extends: ../shared/base.yaml\nruns_dir: runs\n")
    (conf / "j.yaml").write_text("extends: digits\ndata_dir: ../cifar\n")
    proc = run_submit(["--profile", "../conf/p.yaml", "--job", "../conf/j.yaml", "--dry-run", "--json"],
                      cwd=here, timeout=60)
    assert proc.returncode == 0, proc.stderr
    info = last_json(proc.stdout)
    assert info["profile"]["runs_dir"] == str(conf / "runs")
    assert info["run_dir"].startswith(str(conf / "runs") + "/")
    assert info["profile"]["data_dir"] == str(base / "datasets")
    assert info["profile"]["slurm_conf"] == str(tmp_path / "cluster" / "slurm.conf")
    assert info["job"]["data_dir"] == str(tmp_path / "cifar")
    assert f"export SLURM_CONF={tmp_path / 'cluster' / 'slurm.conf'}" in info["sbatch_script"]

    proc = run_submit(["--profile", "../conf/p.yaml", "--set", "profile.runs_dir=out", "--set",
                       "profile.data_dir=d", "--set", "job.data_dir=c", "--dry-run", "--json"], cwd=here, timeout=60)
    info = last_json(proc.stdout)
    assert info["profile"]["runs_dir"] == str(here / "out")
    assert info["profile"]["data_dir"] == str(here / "d")
    assert info["job"]["data_dir"] == str(here / "c")

    # No file sets runs_dir or data_dir: the current directory's runs/ and data/.
    proc = run_submit(["--profile", "local", "--dry-run", "--json"], cwd=here, timeout=60)
    info = last_json(proc.stdout)
    assert info["run_dir"].startswith(str(here / "runs") + "/")
    assert info["settings"]["data_dir"] == str(here / "data")


def test_shipped_dev_cluster_profiles_find_the_project_slurm_conf(tmp_path: Path) -> None:
    for profile in ("dev-cluster", "dev-cluster-gpu"):
        proc = run_submit(["--profile", profile, "--dry-run", "--json"], cwd=tmp_path, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert last_json(proc.stdout)["profile"]["slurm_conf"] == str(ROOT / ".dev-cluster" / "slurm.conf")
