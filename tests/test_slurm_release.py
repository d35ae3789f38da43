"""The SLURM release a run is queued on (launcher/cluster/slurm/release.py): read once by the preflight from the
live cluster, shown by the dry run with what it decided, refused below the oldest supported; and the one
behaviour it gates (--requeue=expedite from 25.11), checked on the releases this machine can run (Debian 12's
22.05, Debian 13's 24.11: the dev cluster runs either, tests/run_all.sh both) and on one it cannot."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from launcher.cluster.preflights import Answer
from launcher.cluster.slurm import release
from launcher.cluster.slurm.release import Release
from launcher.request.executor import sbatch_script
from launcher.request.plan import new_run
from tests.helpers import run_submit
from trainer.config.schema import ConfigError

CONFIG = "Configuration data as of 2026-12-04T10:00:00\nSLURM_VERSION           = {}\nSlurmctldPort = 6817\n"


def live_version() -> str:
    """The controller's own word for its release."""
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True, timeout=30)
    return release.parse(config.stdout)


def test_the_release_is_the_older_of_the_controllers_and_the_commands() -> None:
    assert release.of(CONFIG.format("24.11.5"), "slurm-wlm 24.11.5\n", "p").version == "24.11.5"
    assert release.of(CONFIG.format("25.11.1"), "slurm 24.11.5", "p").version == "24.11.5"
    assert release.of(CONFIG.format("22.05.8"), "slurm 24.11.5", "p").version == "22.05.8"
    assert release.of("", "", "p") == Release()  # nothing read: decided as for the oldest supported
    assert release.parse("slurm 24.11.0-0rc1") == "24.11.0"


def test_a_release_below_the_oldest_supported_is_a_config_error_naming_both_and_what_is_supported() -> None:
    with pytest.raises(ConfigError) as err:
        release.of(CONFIG.format("23.02.7"), "slurm 21.08.8", "profile cluster_profiles/x.yaml")
    said = str(err.value)
    assert "SLURM 21.08.8" in said and "23.02.7" in said and "22.05 and newer" in said and "x.yaml" in said
    assert "\n" not in said


@pytest.mark.parametrize("version, requeue", [("22.05.8", True), ("24.11.5", True), ("25.05.3", True),
                                              ("25.11.0", "expedite"), ("26.05.1", "expedite"), ("", True)])
def test_expedited_requeue_is_asked_for_exactly_where_the_release_has_it(version: str, requeue: object) -> None:
    sub = new_run_submission("dev-cluster")
    script = sbatch_script(sub, Answer(None, Release(version)))
    wanted = "#SBATCH --requeue=expedite" if requeue == "expedite" else "#SBATCH --requeue"
    assert wanted in script.splitlines(), script


def new_run_submission(profile: str, *sets: str):  # type: ignore[no-untyped-def]
    import argparse

    args = argparse.Namespace(profile=profile, job="digits", sets=list(sets), wait=False, function=None, after=[])
    return new_run(args).submission()


@pytest.mark.slurm
def test_the_dry_run_shows_the_live_release_and_what_it_decided(slurm_cluster: Path, tmp_path: Path) -> None:
    done = run_submit(["--profile", "dev-cluster", "--dry-run", "--json", "--set", f"profile.runs_dir={tmp_path}"],
                      tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout.splitlines()[-1])
    version = live_version()
    assert version and shown["slurm"]["release"] == version
    assert shown["slurm"]["requeue"].startswith("--requeue=expedite") == (Release(version).parts >= release.EXPEDITE)
    assert "#SBATCH --requeue" in shown["sbatch_script"].splitlines()  # neither release here has expedite
    assert f"SLURM: release {version}" in run_submit(["--profile", "dev-cluster", "--dry-run", "--set",
                                                      f"profile.runs_dir={tmp_path}"], tmp_path, timeout=120).stdout


@pytest.mark.slurm
def test_commands_older_than_supported_are_refused_at_the_preflight_with_one_line(slurm_cluster: Path,
                                                                                  tmp_path: Path) -> None:
    """A login node whose SLURM commands are 21.08 (a site mid-upgrade): its `scontrol` says so, the rest is
    the live cluster's. One `error:` line, exit 2, no run folder, nothing queued."""
    real = shutil.which("scontrol")
    assert real is not None
    shim = tmp_path / "bin" / "scontrol"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "slurm 21.08.8"; exit 0; }}\nexec {real} "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    done = run_submit(["--profile", "dev-cluster", "--set", f"profile.runs_dir={tmp_path / 'runs'}"], tmp_path,
                      timeout=120, env={"PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "21.08.8" in lines[0] and "22.05" in lines[0], lines
    assert not (tmp_path / "runs").exists()  # the preflight comes before the run folder and sbatch
