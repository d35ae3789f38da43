"""A SLURM job is queued held and released once submitit has made its log folder.

SLURM 22.05 does not make the folder of `--output`, and submitit makes logs/<job id>/ only after sbatch
returns. On an idle partition the scheduler started a job within a millisecond of sbatch, before that
folder existed: slurmd could not open the job's stdout file, and the job ended FAILED (signal 53) with
no log at all (a loaded CI run's test_clean_exit, job 66). Here the controller is asked about the job at exactly
that moment, in this process: it must be held, then run and log as usual."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from launcher.commands.main import main
from tests.helpers import last_json
from tests.test_slurm_submit import sacct_state


def test_a_job_waits_held_until_its_log_folder_exists_then_runs_and_logs(
        slurm_cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from submitit.core.utils import JobPaths

    seen: dict[str, str] = {}
    make_folder = JobPaths.move_temporary_file

    def slowly(self: Any, tmp_path_: Any, name: str, keep_as_symlink: bool = False) -> None:
        # What the controller says of the job while its log folder does not exist yet: held, not merely
        # pending (an unheld job on an idle node started 1 ms after sbatch in the failure).
        if seen:  # submitit moves the job's pickle there next, into the folder the first move made
            return make_folder(self, tmp_path_, name, keep_as_symlink)
        shown = subprocess.run(["scontrol", "-o", "show", "job", str(self.job_id)], capture_output=True,
                               text=True, timeout=60, check=False).stdout
        seen.update(field.split("=", 1) for field in shown.split() if "=" in field)
        seen["folder existed"] = str(self.folder.exists())
        return make_folder(self, tmp_path_, name, keep_as_symlink)

    monkeypatch.setattr(JobPaths, "move_temporary_file", slowly)
    monkeypatch.delenv("SLURM_CONF", raising=False)  # the profile supplies it, as for a user's shell
    monkeypatch.chdir(tmp_path)
    code = main(["--profile", "dev-cluster", "--job", "digits", "--set", "job.epochs=1",
                 "--set", "profile.nodes=1", "--set", f"profile.runs_dir={tmp_path / 'runs'}", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    info = last_json(out)
    job_id = str(info["job_id"])
    assert seen["folder existed"] == "False"
    assert (seen["JobState"], seen["Reason"]) == ("PENDING", "JobHeldUser"), seen
    assert sacct_state(job_id, timeout=300) == "COMPLETED"
    logs = Path(info["run_dir"]) / "logs" / job_id
    assert "[trainer]" in (logs / f"{job_id}_0_log.out").read_text()
