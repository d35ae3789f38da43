"""Pre-submission checks (launcher.config.checks), sweep expansion (trainer.config.sweep) and the
container command lines (launcher.cluster.slurm.sbatch), called directly in this process.

The subprocess tests (test_bad_inputs, test_script_jobs, test_container_script, test_oversize_sweeps)
prove the same through `python submit.py`; these call the functions so that the mutation run
(tests/mutation.py) sees which tests reach them and runs them for every mutant."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest

from launcher.cluster.slurm.sbatch import SlurmRequest, container_srun_args, python_command
from launcher.config.checks import (check_data, check_entrypoint, check_here, check_where_it_runs, check_writable_folder,
                                    script_path)
from launcher.config.profile import Profile
from trainer.config import sweep
from trainer.config.job import JobConfig
from trainer.config.schema import ConfigError


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative scripts are looked up from the current directory: this test's own folder."""
    monkeypatch.chdir(tmp_path)


def check_local(profile: Profile, job: JobConfig, source: str, job_source: str = "") -> None:
    """The checks a submission planned and queued from this machine makes (launcher.request.plan.check)."""
    check_here(profile, job, source, job_source)
    check_where_it_runs(profile, job, source, job_source)


def error_of(call, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as raised:
        call(*args, **kwargs)
    return str(raised.value)


# -- script_path, check_here and check_where_it_runs ---------------------------------------------------------------


def test_a_relative_script_is_found_in_the_current_directory_first_then_the_job_files_folder(
        tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("")
    job = JobConfig(name="s", script="train.py", code_dir=str(code))
    assert script_path(job, "jobs/s.yaml") == str((code / "train.py").resolve())
    (tmp_path / "train.py").write_text("")  # the current directory wins
    assert script_path(job, "jobs/s.yaml") == str((tmp_path / "train.py").resolve())


def test_an_absolute_script_is_used_as_given(tmp_path: Path) -> None:
    (tmp_path / "abs.py").write_text("")
    job = JobConfig(name="s", script=str(tmp_path / "abs.py"), code_dir=str(tmp_path / "elsewhere"))
    assert script_path(job) == str((tmp_path / "abs.py").resolve())


def test_a_missing_script_names_the_job_file_the_value_and_every_folder_looked_in(tmp_path: Path) -> None:
    job = JobConfig(name="s", script="nope.py", code_dir="/opt/code")
    assert error_of(script_path, job, "jobs/s.yaml") == (
        f"jobs/s.yaml: key 'script' has invalid value 'nope.py'; no such file (a path to a Python file; "
        f"looked in {tmp_path}, /opt/code)")


def test_a_missing_script_without_a_source_names_the_job(tmp_path: Path) -> None:
    job = JobConfig(name="mine", script="nope.py")
    assert error_of(script_path, job) == (
        f"job 'mine': key 'script' has invalid value 'nope.py'; no such file (a path to a Python file; "
        f"looked in {tmp_path})")


def test_a_missing_absolute_script_names_its_folder_once(tmp_path: Path) -> None:
    missing = tmp_path / "sub" / "gone.py"
    job = JobConfig(name="s", script=str(missing), code_dir="/opt/code")
    assert error_of(script_path, job, "jobs/s.yaml").endswith(f"(a path to a Python file; looked in {missing.parent})")


def test_check_local_writes_the_absolute_script_back_into_the_job(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    job = JobConfig(name="s", script="train.py")
    check_local(Profile(), job, "profile 'local'", "jobs/s.yaml")
    assert job.script == str((tmp_path / "train.py").resolve())


def test_check_local_names_the_job_file_or_else_the_job_in_script_errors() -> None:
    error = error_of(check_local, Profile(), JobConfig(name="s", script="nope.py"), "profile 'local'", "jobs/s.yaml")
    assert error.startswith("jobs/s.yaml: key 'script' has invalid value 'nope.py'; no such file"), error
    error = error_of(check_local, Profile(), JobConfig(name="s", script="nope.py"), "profile 'local'")
    assert error.startswith("job 's': key 'script' has invalid value 'nope.py'; no such file"), error


def test_entrypoint_errors_name_the_job_file_or_else_the_job() -> None:
    spec = "no_such_module_13b:main"
    expected = f": key 'entrypoint' has invalid value {spec!r}; no module named 'no_such_module_13b'"
    error = error_of(check_entrypoint, JobConfig(name="e", entrypoint=spec), "jobs/e.yaml")
    assert error.startswith("jobs/e.yaml" + expected), error
    error = error_of(check_local, Profile(), JobConfig(name="e", entrypoint=spec), "profile 'local'", "jobs/e.yaml")
    assert error.startswith("jobs/e.yaml" + expected), error
    error = error_of(check_local, Profile(), JobConfig(name="e", entrypoint=spec), "profile 'local'")
    assert error.startswith("job 'e'" + expected), error


# -- check_data and check_writable_folder ----------------------------------------------------------


def test_a_data_dir_that_is_a_file_does_not_exist_as_a_folder_when_nothing_is_downloaded(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    job = JobConfig(dataset="cifar10", model="lenet", data_dir=str(tmp_path / "afile"), download=False)
    assert error_of(check_data, Profile(), job) == (
        f"job.data_dir: data folder {str(tmp_path / 'afile')!r} does not exist; point it at the folder that holds "
        f"'cifar-10-batches-py' (or leave it empty to use the profile's data_dir)")


def test_a_download_under_a_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    target = tmp_path / "afile" / "cifar"
    job = JobConfig(dataset="cifar10", model="lenet", data_dir=str(target), download=True)
    assert error_of(check_data, Profile(), job) == (
        f"job.data_dir: {str(target)!r} is under {str(tmp_path / 'afile')!r}, which is a file, not a folder; "
        f"the download needs a folder there")


def test_a_path_that_is_a_file_is_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    assert error_of(check_writable_folder, tmp_path / "afile", "profile.runs_dir", "the run folder") == (
        f"profile.runs_dir: {str(tmp_path / 'afile')!r} is a file, not a folder; the run folder needs a folder there")


@pytest.mark.parametrize("below", ["", "sub/deeper"])
def test_a_broken_link_in_the_way_cannot_be_created(tmp_path: Path, below: str) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    path = link / below if below else link
    assert error_of(check_writable_folder, path, "profile.runs_dir", "the run folder") == (
        f"profile.runs_dir: {str(path)!r} cannot be created ({str(link)!r} is a broken link)")


def test_a_folder_that_exists_or_can_be_made_passes(tmp_path: Path) -> None:
    check_writable_folder(tmp_path, "profile.runs_dir", "the run folder")
    check_writable_folder(tmp_path / "new" / "runs", "profile.runs_dir", "the run folder")
    assert not (tmp_path / "new").exists()  # checked, not made


def read_only_folder(tmp_path: Path) -> Path:
    """A real folder that access() (what the check asks) says this user cannot write: a folder made
    read-only, unless this user is root (root writes there anyway); then /proc/sys, whose top folder
    Linux lets nobody write (not even root), or a read-only mount."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    candidates = [folder, Path("/proc/sys")]
    candidates += [Path(line.split()[1]) for line in Path("/proc/self/mounts").read_text().splitlines()
                   if line.split()[3].split(",")[0] == "ro"]
    for candidate in candidates:
        if candidate.is_dir() and not os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    pytest.fail("no folder here that this user cannot write (root, no /proc/sys, no read-only mount)")


def test_a_read_only_folder_is_not_writable_here(tmp_path: Path) -> None:
    folder = read_only_folder(tmp_path)
    assert error_of(check_writable_folder, folder, "profile.runs_dir", "the run folder") == (
        f"profile.runs_dir: {str(folder)!r} is not writable here (read-only or not yours); "
        f"the run folder needs a folder it can write")


def test_a_path_under_a_read_only_folder_names_its_nearest_existing_folder(tmp_path: Path) -> None:
    folder = read_only_folder(tmp_path)
    target = folder / "no-such-folder-13b" / "cifar"
    job = JobConfig(dataset="cifar10", model="lenet", download=True)
    assert error_of(check_data, Profile(data_dir=str(target)), job) == (
        f"profile.data_dir: {str(target)!r} (its nearest existing folder {str(folder)!r}) is not writable here "
        f"(read-only or not yours); the download needs a folder it can write")


# -- container command lines -----------------------------------------------------------------------


def request(**kwargs) -> SlurmRequest:
    return SlurmRequest(job_name="j", nodes=1, tasks_per_node=1, cpus_per_task=1, time_min=5, **kwargs)


def test_apptainer_runs_the_images_python3_with_the_gpus_and_binds() -> None:
    req = request(gpus_per_node=2, container="img.sif", container_binds=["/data", "/runs:/mnt/runs:ro"])
    assert python_command(req) == "apptainer exec --nv --bind /data --bind /runs:/mnt/runs:ro img.sif python3"
    assert container_srun_args(req) == []  # apptainer is started by the command, not by srun


def test_singularity_without_gpus_runs_the_profiles_python() -> None:
    req = request(container="my img.sif", container_runtime="singularity", python="/opt/py/bin/python",
                  container_binds=["/data"])
    assert python_command(req) == "singularity exec --bind /data 'my img.sif' /opt/py/bin/python"


def test_pyxis_enters_the_container_through_srun_options() -> None:
    req = request(container="nvcr.io/nvidia/pytorch:24.01-py3", container_runtime="pyxis",
                  container_binds=["/data", "/runs:/mnt/runs:ro"])
    assert python_command(req) == "python3"
    assert container_srun_args(req) == ["--container-image=nvcr.io/nvidia/pytorch:24.01-py3",
                                        "--container-mounts=/data:/data,/runs:/mnt/runs:ro"]
    req = request(container="img.sqsh", container_runtime="pyxis", python="/usr/bin/python3.11")
    assert python_command(req) == "/usr/bin/python3.11"
    assert container_srun_args(req) == ["--container-image=img.sqsh"]  # no binds: no --container-mounts


def test_without_a_container_the_interpreter_is_the_profiles_or_submitits_default() -> None:
    assert python_command(request()) is None
    assert python_command(request(python="/opt/my env/python")) == "'/opt/my env/python'"
    assert container_srun_args(request(container_runtime="pyxis")) == []


# -- sweeps ----------------------------------------------------------------------------------------


def test_a_sweep_is_the_grid_in_the_order_written_then_the_listed_tasks() -> None:
    jobs = sweep.expand({"name": "d", "epochs": 2},
                        {"grid": {"lr": [0.1, 0.2], "batch_size_per_rank": [16, 32]},
                         "tasks": [{"lr": 0.5, "epochs": 3}]}, "jobs/s.yaml")
    overrides = [o for _, o in jobs]
    assert overrides == [{"lr": 0.1, "batch_size_per_rank": 16}, {"lr": 0.1, "batch_size_per_rank": 32},
                         {"lr": 0.2, "batch_size_per_rank": 16}, {"lr": 0.2, "batch_size_per_rank": 32},
                         {"lr": 0.5, "epochs": 3}]
    assert [(j.lr, j.batch_size_per_rank, j.epochs) for j, _ in jobs] == [
        (0.1, 16, 2), (0.1, 32, 2), (0.2, 16, 2), (0.2, 32, 2), (0.5, 64, 3)]
    assert sweep.swept_keys(overrides) == ["lr", "batch_size_per_rank", "epochs"]


def test_swept_keys_are_every_points_keys_once_in_first_seen_order() -> None:
    assert sweep.swept_keys([]) == []
    assert sweep.swept_keys([{"lr": 1, "seed": 2}, {"seed": 3, "nesterov": True}, {"lr": 4}]) == [
        "lr", "seed", "nesterov"]


def test_dotted_keys_sweep_the_entrypoints_nested_config() -> None:
    base = {"name": "e", "entrypoint": "m:f", "config": {"opt": {"momentum": 0.9}, "width": 8}}
    jobs = sweep.expand(base, {"grid": {"config.opt.lr": [0.1, 0.2]}, "tasks": [{"config.width": 16}]},
                        "jobs/e.yaml")
    assert [o for _, o in jobs] == [{"config.opt.lr": 0.1}, {"config.opt.lr": 0.2}, {"config.width": 16}]
    assert [j.config for j, _ in jobs] == [{"opt": {"momentum": 0.9, "lr": 0.1}, "width": 8},
                                           {"opt": {"momentum": 0.9, "lr": 0.2}, "width": 8},
                                           {"opt": {"momentum": 0.9}, "width": 16}]


def test_a_yaml_date_in_the_config_does_not_break_the_duplicate_check() -> None:
    base = {"name": "e", "entrypoint": "m:f", "config": {"since": datetime.date(2024, 1, 1)}}
    jobs = sweep.expand(base, {"grid": {"lr": [0.1, 0.2]}}, "jobs/e.yaml")
    assert [j.lr for j, _ in jobs] == [0.1, 0.2]


def test_the_same_job_twice_is_an_error_whatever_the_order_of_its_config_keys() -> None:
    error = error_of(sweep.expand, {"name": "e", "entrypoint": "m:f"},
                     {"tasks": [{"config": {"a": 1, "b": 2}}, {"config": {"b": 2, "a": 1}}]}, "jobs/e.yaml")
    assert error == ("jobs/e.yaml: key 'sweep': task 1 {'config': {'b': 2, 'a': 1}} is the same job as task 0 "
                     "{'config': {'a': 1, 'b': 2}}; each point once (vary 'seed' to repeat a run)")


def test_a_sweep_may_have_exactly_the_most_tasks() -> None:
    listed = [{"seed": i} for i in range(sweep.MAX_SWEEP_TASKS)]
    assert len(sweep.expand({"name": "d"}, {"tasks": listed}, "jobs/s.yaml")) == sweep.MAX_SWEEP_TASKS


@pytest.mark.parametrize("grid,listed,counts", [
    ({}, 10_001, "10001 tasks (grid 0 = 0, plus 10001 listed)"),
    ({"lr": list(range(1, 101)), "seed": list(range(100))}, 1, "10001 tasks (grid 100 x 100 = 10000, plus 1 listed)"),
])
def test_a_sweep_over_the_most_tasks_says_how_it_counted(grid: dict, listed: int, counts: str) -> None:
    error = error_of(sweep.expand, {"name": "d"}, {"grid": grid, "tasks": [{"seed": i} for i in range(listed)]},
                     "jobs/s.yaml")
    assert error == (f"jobs/s.yaml: key 'sweep' defines {counts}; a sweep may have at most 10000: split it, or "
                     f"narrow the grid")


def test_sweep_errors_name_the_file_and_the_key() -> None:
    assert error_of(sweep.expand, {"name": "d"}, {"grid": {"lr": []}}, "jobs/s.yaml") == (
        "jobs/s.yaml: key 'sweep.grid.lr' must be a non-empty list of values, got []")
    assert error_of(sweep.expand, {"name": "d"}, {}, "jobs/s.yaml") == (
        "jobs/s.yaml: key 'sweep' defines no tasks; give 'grid' and/or 'tasks'")
    assert "jobs/s.yaml: unknown key 'sweep.grid.confg.lr'" in error_of(
        sweep.expand, {"name": "d"}, {"grid": {"confg.lr": [1]}}, "jobs/s.yaml")
    assert "jobs/s.yaml: unknown key 'sweep.tasks[1].lrr'" in error_of(
        sweep.expand, {"name": "d"}, {"tasks": [{"lr": 1.0}, {"lrr": 2}]}, "jobs/s.yaml")
