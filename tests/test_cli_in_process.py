"""The command line called in this process (`launcher.commands.main.main(argv)`, what submit.py runs):
bad input and dry runs of the shipped SLURM profiles, without SLURM and without torch, in milliseconds.

The subprocess tests (test_bad_inputs, test_dry_run_script) prove the same through `python submit.py`;
these run the same argv in-process, so that the mutation run (tests/mutation.py) sees which of them
reach each function of launcher/config and launcher/request and can run them for every mutant. Every
bad-input case runs here; test_bad_inputs sends most of them, not all (its SUBMIT_CASES), through a
process of its own."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.commands.main import main
from tests.helpers import ROOT
from tests.test_bad_inputs import ALL_CASES, write


def call(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    out, err = capsys.readouterr()
    return int(code or 0), out, err


@pytest.fixture(autouse=True)
def no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without a SLURM cluster, whatever ran before; runs/ of this test's folder."""
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("files,args,expected", ALL_CASES)
def test_bad_input_is_one_clear_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                files: dict[str, str], args: list[str], expected: list[str]) -> None:
    paths = {name: write(tmp_path / name, text) for name, text in files.items()}
    paths["empty"] = str(tmp_path / "empty")
    paths["missing"] = str(tmp_path / "missing" / "cifar")
    for name, path in paths.items():
        args = [a.replace("{" + name + "}", path) for a in args]
    # --dry-run: a mutant that lets bad input through must not start a real local run (2 ranks training
    # in the background of a mutation run); test_bad_inputs proves nothing is queued without it.
    code, out, err = call(args if args[0] in ("status", "logs", "cancel") else [*args, "--dry-run"], capsys)
    assert code == 2, out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for text in expected:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    assert not (tmp_path / "runs").exists()


def dry_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = call([*argv, "--dry-run", "--json"], capsys)
    assert code == 0, err
    assert not Path("runs").exists(), "a dry run created a run folder"
    return json.loads(out.strip().splitlines()[-1])


def script_lines(shown: dict[str, Any]) -> list[str]:
    return shown["sbatch_script"].splitlines()


def test_slurm_gpu_profile_requests_one_task_per_gpu_and_kills_the_job_on_a_bad_exit(
        capsys: pytest.CaptureFixture[str]) -> None:
    shown = dry_run(["--profile", "slurm-gpu"], capsys)
    assert (shown["executor"], shown["world_size"], shown["global_batch_size"]) == ("slurm", 16, 512)
    lines = script_lines(shown)
    for line in ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=8", "#SBATCH --cpus-per-task=10",
                 "#SBATCH --gpus-per-node=8", "#SBATCH --mem=524288M", "#SBATCH --time=240",
                 "#SBATCH --signal=USR2@180", "#SBATCH --requeue", "#SBATCH --partition=gpu",
                 "#SBATCH --account=ml-research", "export SUBMITIT_PREEMPT_SIGNAL=USR2", "export OMP_NUM_THREADS=10",
                 "export NCCL_DEBUG=WARN", "module load cuda/12.4", 'eval "$(conda shell.bash hook)"', "conda activate ddp"]:
        assert line in lines, line
    assert not any(line.startswith(("#SBATCH --qos", "#SBATCH --constraint", "#SBATCH --array")) for line in lines)
    # stderr in its own file per task: the submitter reads the failing rank's traceback there
    assert any(line.startswith("#SBATCH --error=") and line.endswith("_0_log.err") for line in lines)
    (srun,) = [line for line in lines if line.startswith("srun ")]
    assert "--kill-on-bad-exit=1" in srun.split()
    settings = shown["settings"]
    assert (settings["threads"], settings["use_gpus"], settings["stop_signal"]) == (10, True, "USR2")
    assert (settings["init_timeout_s"], settings["collective_timeout_s"]) == (180, 45)


def test_sets_change_the_request(capsys: pytest.CaptureFixture[str]) -> None:
    shown = dry_run(["--profile", "slurm-cpu", "--set", "profile.nodes=3", "--set", "profile.tasks_per_node=1",
                     "--set", "profile.qos=high", "--set", "profile.constraint=avx2", "--set", "profile.time_min=7",
                     "--set", "profile.signal_delay_s=20", "--set", "profile.mem_per_task_gb=1.5",
                     "--set", "profile.cpus_per_task=2", "--set", "job.batch_size_per_rank=10"], capsys)
    assert (shown["world_size"], shown["batch_size_per_rank"], shown["global_batch_size"]) == (3, 10, 30)
    lines = script_lines(shown)
    for line in ["#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=1", "#SBATCH --qos=high", "#SBATCH --constraint=avx2",
                 "#SBATCH --time=7", "#SBATCH --signal=USR2@20", "#SBATCH --mem=1536M", "#SBATCH --cpus-per-task=2",
                 "export OMP_NUM_THREADS=2"]:
        assert line in lines, line
    assert not any(line.startswith(("#SBATCH --gpus", "#SBATCH --account")) for line in lines)
    assert shown["settings"]["threads"] == 2 and shown["settings"]["use_gpus"] is False


def test_a_sweep_is_one_array_capped_at_its_task_count(capsys: pytest.CaptureFixture[str]) -> None:
    shown = dry_run(["--profile", "slurm-cpu", "--job", "digits-lr-sweep"], capsys)
    assert shown["tasks"] == 9 and len(shown["task_dirs"]) == 9
    assert shown["sweep_overrides"][0] == {"lr": 0.005, "batch_size_per_rank": 16}
    assert shown["sweep_overrides"][-1] == {"lr": 0.5, "batch_size_per_rank": 64, "nesterov": True}
    assert "#SBATCH --array=0-8%9" in script_lines(shown)
    shown = dry_run(["--profile", "slurm-cpu", "--job", "digits-lr-sweep", "--set", "profile.array_parallelism=2"],
                    capsys)
    assert "#SBATCH --array=0-8%2" in script_lines(shown)


def test_local_profile_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    shown = dry_run([], capsys)
    assert (shown["executor"], shown["world_size"], shown["global_batch_size"]) == ("local", 2, 64)
    assert shown["job"]["name"] == "digits" and shown["profile"]["name"] == "local"
    assert "sbatch_script" not in shown or not shown["sbatch_script"]


SWEEP_ERRORS = [
    ("grd: {lr: [0.1]}", ["unknown key 'sweep.grd'", "grid", "tasks"]),
    ("grid: {lrr: [0.1]}", ["unknown key 'sweep.grid.lrr'", "lr"]),
    ("grid: [0.1, 0.2]", ["key 'sweep.grid' must map job keys to lists of values"]),
    ("tasks: [0.1]", ["key 'sweep.tasks' must be a list of mappings of job keys to values"]),
    ("tasks: {lr: 0.1}", ["key 'sweep.tasks' must be a list of mappings"]),
    ("grid: {lr: []}", ["key 'sweep.grid.lr' must be a non-empty list of values, got []"]),
    ("grid: {lr: 0.1}", ["key 'sweep.grid.lr' must be a non-empty list of values, got 0.1"]),
    ("grid: {}", ["key 'sweep' defines no tasks; give 'grid' and/or 'tasks'"]),
    ("tasks: [{lr: 0.1}, {lrr: 1}]", ["unknown key 'sweep.tasks[1].lrr'", "lr"]),
    ("tasks: [{epochs: -1}]", ["sweep task 0: {'epochs': -1}", "'epochs'", "-1"]),
]


@pytest.mark.parametrize("sweep,expected", SWEEP_ERRORS, ids=[c[0] for c in SWEEP_ERRORS])
def test_a_bad_sweep_names_the_file_and_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str], sweep: str,
                                                expected: list[str]) -> None:
    job = write(tmp_path / "s.yaml", f"extends: digits\nsweep: {{{sweep}}}\n")
    code, out, err = call(["--profile", "slurm-cpu", "--job", job, "--dry-run"], capsys)
    assert code == 2, out + err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: {job}"), line
    for text in expected:
        assert text in line, f"{text!r} not in {line!r}"


def test_a_relative_slurm_conf_is_relative_to_the_profile_file_not_the_working_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = write(tmp_path / "profiles" / "p.yaml", "extends: slurm-cpu\nslurm_conf: nowhere/slurm.conf\n")
    shown = dry_run(["--profile", profile], capsys)
    assert f"export SLURM_CONF={tmp_path / 'profiles' / 'nowhere' / 'slurm.conf'}" in script_lines(shown)


def test_a_setup_line_that_is_not_valid_bash_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = write(tmp_path / "p.yaml", "extends: slurm-cpu\nsetup: ['echo \"unclosed']\n")
    code, out, err = call(["--profile", profile, "--dry-run"], capsys)
    assert code == 2, out + err
    (line,) = err.strip().splitlines()
    assert line.startswith("error: profile.setup[0]: 'echo \"unclosed' is not a valid bash line"), line
    assert "setup lines run as written" in line


@pytest.mark.parametrize("key,written,value", [
    ("job.name", "two\nlines", "two\nlines"),  # a real newline in the argument
    ("profile.constraint", "a\rb", "a\rb"),
    ("profile.sbatch_extra.comment", '"a\\tb"', "a\tb"),  # a YAML escape
])
def test_a_control_character_in_an_sbatch_value_is_refused(capsys: pytest.CaptureFixture[str], key: str,
                                                           written: str, value: str) -> None:
    # A newline would end the #SBATCH line and start a shell command in the batch script.
    code, out, err = call(["--profile", "slurm-cpu", "--set", f"{key}={written}", "--dry-run"], capsys)
    assert code == 2, out + err
    (line,) = err.strip().splitlines()
    control = next(c for c in value if ord(c) < 32)
    # Named in the file the value would have gone through (here the shipped one, with --set), at its key.
    assert f"with --set {key}: key '{key.split('.', 1)[1]}' has invalid value {value!r}; " in line, line
    assert f"expected one line of text without control characters (found {control!r})" in line, line


def test_the_job_names_the_slurm_conf_of_its_profile_and_none_without_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert not any("SLURM_CONF" in line for line in script_lines(dry_run(["--profile", "slurm-cpu"], capsys)))


def test_cifar10_data_folders_are_checked_before_anything_is_queued(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    missing, empty = tmp_path / "missing", tmp_path / "empty"
    empty.mkdir()
    code, _, err = call(["--job", "cifar10", "--set", f"job.data_dir={missing}", "--dry-run"], capsys)
    assert code == 2 and err.strip() == (f"error: job.data_dir: data folder {str(missing)!r} does not exist; point "
                                         "it at the folder that holds 'cifar-10-batches-py' (or leave it empty to "
                                         "use the profile's data_dir)"), err
    for where in (["--set", f"job.data_dir={empty}"], ["--set", f"profile.data_dir={empty}"]):
        code, _, err = call(["--job", "cifar10", "--set", "job.download=false", *where, "--dry-run"], capsys)
        key = where[1].split("=")[0]
        assert code == 2 and err.strip() == (f"error: {key}: {str(empty)!r} holds no 'cifar-10-batches-py' folder "
                                             "and job.download is false; copy CIFAR-10 there or set --set "
                                             "job.download=true"), err
    (empty / "cifar-10-batches-py").mkdir()
    assert dry_run(["--job", "cifar10", "--set", "job.download=false", "--set", f"profile.data_dir={empty}"],
                   capsys)["job"]["dataset"] == "cifar10"
    # An existing folder is enough while downloading is allowed; digits needs no folder at all.
    assert dry_run(["--job", "cifar10", "--set", f"job.data_dir={empty}"], capsys)["job"]["dataset"] == "cifar10"
    assert dry_run(["--set", f"job.data_dir={missing}"], capsys)["job"]["dataset"] == "digits"


@pytest.mark.parametrize("profile", ["local", "debug"])
def test_gpus_on_an_in_machine_executor_without_a_driver_are_refused(capsys: pytest.CaptureFixture[str],
                                                                     profile: str) -> None:
    from launcher.config.checks import cuda_visible_here  # a machine with a driver accepts the request
    code, _, err = call(["--profile", profile, "--set", "profile.gpus_per_node=1", "--set",
                         "profile.tasks_per_node=1", "--dry-run"], capsys)
    if cuda_visible_here():
        assert code == 0, err
    else:
        assert code == 2, err
        assert f"has no NVIDIA GPU (no driver found), so the {profile} executor allows only 0" in err
        # The error names the profile file and the --set options that shaped it.
        assert err.startswith("error: ") and (f"cluster_profiles/{profile}.yaml with --set profile.gpus_per_node "
                                              "profile.tasks_per_node: key 'gpus_per_node' has invalid value 1") in err


def test_the_dry_run_shows_the_run_folder_and_what_each_executor_is_given(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # A terminal: the progress bar is drawn on in-machine executors, never in a SLURM log.
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    shown = dry_run(["--set", "profile.checkpoint_every_steps=7", "--set", "profile.collective_timeout_s=90",
                     "--set", "profile.signal=USR1", "--set", "profile.data_dir=elsewhere"], capsys)
    run_dir = Path(shown["run_dir"])
    assert run_dir.parent == tmp_path / "runs" and shown["log_dir"] == str(run_dir / "logs")
    expected = {"run_dir": str(run_dir), "data_dir": str(tmp_path / "elsewhere"), "use_gpus": False,
                "threads": 1, "checkpoint_every_steps": 7, "init_timeout_s": 180,
                "collective_timeout_s": 90, "stop_signal": "USR1", "progress_bar": True,
                "max_restarts": 3}
    assert {key: shown["settings"].get(key) for key in expected} == expected
    # What the trackers tag a run with (trainer/rank/trackers.py): its profile, and its place in a sweep.
    assert {key: shown["settings"].get(key) for key in ("profile", "task", "sweep", "swept")} == \
        {"profile": "local", "task": 0, "sweep": "", "swept": {}}
    assert shown["executor_parameters"] == {"timeout_min": 60, "tasks_per_node": 2, "nodes": 1, "gpus_per_node": 0,
                                            "signal_delay_s": 120}
    assert shown["sweep_overrides"] is None
    # The job's data_dir wins over the profile's.
    assert dry_run(["--set", "job.data_dir=mine"], capsys)["settings"]["data_dir"] == str(tmp_path / "mine")
    shown = dry_run(["--profile", "debug"], capsys)
    assert shown["executor_parameters"] == {"timeout_min": 60} and shown["settings"]["progress_bar"] is True
    shown = dry_run(["--profile", "slurm-cpu", "--set", "profile.signal=USR1"], capsys)
    assert shown["settings"]["progress_bar"] is False and shown["settings"]["stop_signal"] == "USR1"
    assert {"#SBATCH --signal=USR1@60", "export SUBMITIT_PREEMPT_SIGNAL=USR1"} <= set(script_lines(shown))
    # One GPU is a GPU run.
    assert dry_run(["--profile", "slurm-gpu", "--set", "profile.gpus_per_node=1", "--set", "profile.tasks_per_node=1"],
                   capsys)["settings"]["use_gpus"] is True


def test_each_sweep_task_trains_in_its_own_folder(capsys: pytest.CaptureFixture[str]) -> None:
    shown = dry_run(["--profile", "slurm-cpu", "--job", "digits-lr-sweep"], capsys)
    run_dir = Path(shown["run_dir"])
    assert shown["task_dirs"] == [str(run_dir / f"task-{i:04d}") for i in range(9)]
    assert shown["settings"]["run_dir"] == str(run_dir / "task-0000")


@pytest.mark.parametrize("runtime", ["apptainer", "pyxis"])
def test_a_container_sees_its_binds_the_code_and_the_run_folder(capsys: pytest.CaptureFixture[str],
                                                               runtime: str) -> None:
    from trainer.config.lookup import CODE_ROOT
    shown = dry_run(["--profile", "slurm-cpu", "--set", "profile.container=/img.sif", "--set",
                     f"profile.container_runtime={runtime}", "--set", "profile.container_binds=[/tmp]",
                     "--set", "profile.python=/opt/py"], capsys)
    # The directory the ranks start in (where the user submitted) is bound too (docs/your-code.md).
    run_dir, here = shown["run_dir"], shown["submit_dir"]
    (srun,) = [line for line in script_lines(shown) if line.startswith("srun ")]
    if runtime == "apptainer":
        assert (f"apptainer exec --bind /tmp --bind {CODE_ROOT} --bind {run_dir} --bind {here} /img.sif /opt/py -u -m "
                "submitit.core._submit") in srun
    else:
        assert (f"--container-image=/img.sif --container-mounts=/tmp:/tmp,{CODE_ROOT}:{CODE_ROOT},"
                f"{run_dir}:{run_dir},{here}:{here} /opt/py -u -m submitit.core._submit") in srun
    # Without a container, srun starts the profile's interpreter itself.
    (srun,) = [line for line in script_lines(dry_run(["--profile", "slurm-cpu", "--set", "profile.python=/opt/py"],
                                                     capsys)) if line.startswith("srun ")]
    assert " /opt/py -u -m submitit.core._submit" in srun and "--bind" not in srun


def test_after_makes_the_job_depend_on_every_job_of_that_run(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "before" / "run.json", json.dumps({"executor": "slurm", "job_ids": ["41", "42"]}))
    shown = dry_run(["--profile", "slurm-cpu", "--after", str(tmp_path / "before")], capsys)
    assert shown["executor_parameters"]["dependency"] == "afterok:41:42"
    assert "#SBATCH --dependency=afterok:41:42" in script_lines(shown)
    # A condition after RUN, and several runs: SLURM's dependency types, all required; a condition that can
    # never hold cancels the job instead of leaving it pending.
    write(tmp_path / "other" / "run.json", json.dumps({"executor": "slurm", "job_ids": ["43_0", "43_1"]}))
    shown = dry_run(["--profile", "slurm-cpu", "--after", f"{tmp_path / 'before'}:notok", "--after",
                     f"{tmp_path / 'other'}:any"], capsys)
    assert shown["executor_parameters"]["dependency"] == "afternotok:41:42,afterany:43"
    assert "#SBATCH --kill-on-invalid-dep=yes" in script_lines(shown)
    assert dry_run(["--profile", "slurm-cpu", "--after", f"{tmp_path / 'before'}:ok"],
                   capsys)["executor_parameters"]["dependency"] == "afterok:41:42"
    code, out, err = call(["--profile", "slurm-cpu", "--after", f"{tmp_path / 'before'}:maybe", "--dry-run"], capsys)
    assert code == 2 and err.strip() == (f"error: --after {tmp_path / 'before'}:maybe: 'maybe' is not a condition; "
                                         "after RUN write :ok (RUN succeeded, the default), :any (RUN ended, "
                                         "however) or :notok (RUN failed)"), err


def test_a_submission_moved_to_a_free_folder_name_trains_there(tmp_path: Path) -> None:
    # What a submitter does when a concurrent one took the run folder's name first.
    from launcher.config.resolve import resolve
    from launcher.config.resolve import Point
    from launcher.request.submission import build, moved
    job = resolve("local", "digits", []).job
    profile = resolve("local", "digits", []).profile
    sub = moved(build(profile, [Point(0, job), Point(1, job)], tmp_path / "taken", True), tmp_path / "free")
    assert (sub.run_dir, sub.log_dir) == (tmp_path / "free", tmp_path / "free" / "logs")
    assert [t.settings.run_dir for t in sub.tasks] == [str(tmp_path / "free" / f"task-000{i}") for i in (0, 1)]
    assert [t.job for t in sub.tasks] == [job, job]
    # The points before each, whose interruptions `checkpoint_every_steps: auto` reads (trainer.rank.interval).
    assert [t.settings.history for t in sub.tasks] == [[], [str(tmp_path / "free" / "task-0000")]]


SET_ERRORS = [
    (["--set", "job.=3"], "--set job.=3: expected KEY=VALUE with KEY as job.FIELD or profile.FIELD (for example --set "
                          "job.epochs=3)"),
    (["--set", "job.lr.=1"], "--set job.lr.=1: 'job.lr.' has an empty part; write KEY as job.FIELD or "
                             "profile.FIELD[.NAME]"),
    (["--set", "job.extra.a=x", "--set", "job.extra.a.b.c=1"], "--set job.extra.a.b.c=1: 'extra.a' was already set "
     "to the value 'x' by another --set, so it cannot also hold 'b'; give one or the other"),
    (["--set", "profile.env.A=1", "--set", "profile.env.B=2", "--set", "profile.env=x"], "--set profile.env=x: 'env' "
     "already holds keys set by other --set options (A, B); give one or the other"),
    (["--set", "job.epochz=3"], "--set: unknown key 'job.epochz' (did you mean 'epochs'?); valid keys: amp_bf16,"),
    (["--set", "job.lr=[1]"], "--set job.lr=[1]: value must be a single scalar, got list"),
    (["--set", "job.name.x=1", "--set", "job.name=n"], "--set job.name=n: 'name' already holds keys set by other "
     "--set options (x); give one or the other"),
    (["--set", "profile.time_min=5", "--set", "profile.time=6"], "--set: both 'profile.time_min' and 'profile.time' "
     "are set; 'time_min' is the former name of 'time': keep only 'time'"),
    # The error names the file and every --set that shaped the value.
    (["--set", "profile.tasks_per_node=0", "--set", "profile.cpus_per_task=1"], "cluster_profiles/local.yaml with "
     "--set profile.tasks_per_node profile.cpus_per_task: key 'tasks_per_node' has invalid value 0; expected an "
     "integer > 0"),
    (["--set", "job.epochs=0", "--set", "job.lr=0.1"], "jobs/digits.yaml with --set job.epochs job.lr: key 'epochs' "
     "has invalid value 0; expected an integer > 0"),
    (["--set", "job.epochs=0"], "jobs/digits.yaml with --set job.epochs: key 'epochs' has invalid value 0"),
    # Keys nothing would read: config: without an entrypoint, args: without a script.
    (["--set", "job.config.lr=0.1"], "jobs/digits.yaml with --set job.config.lr: key 'config' has invalid value "
     "{'lr': 0.1}; expected empty without an 'entrypoint'"),
    (["--set", "job.args=[--lr, '0.1']"], "key 'args' has invalid value ['--lr', '0.1']; expected empty without a "
     "'script'"),
    # A former name is refused as written (not as the `--set profile.time` it reads as).
    (["--set", "profile.time_min=0"], "--set: key 'profile.time_min' has invalid value 0; expected a SLURM time limit"),
    (["--set", "profile.mem_per_task_gb=0"], "--set: key 'profile.mem_per_task_gb' has invalid value 0; expected a "
     "number of GB that makes a valid mem_per_task (mem_per_task: '0G' is refused: expected memory > 0"),
]


@pytest.mark.parametrize("argv,message", SET_ERRORS, ids=[m.split(":")[0] + str(i) for i, (_, m) in
                                                          enumerate(SET_ERRORS)])
def test_a_bad_set_is_refused_in_words_that_name_it(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                    message: str) -> None:
    code, out, err = call([*argv, "--dry-run"], capsys)
    assert code == 2, out + err
    (line,) = err.strip().splitlines()
    assert line.startswith("error: ") and message in line, line


def test_set_values_yaml_would_not_read_as_written_are_text_where_the_key_holds_text(
        capsys: pytest.CaptureFixture[str]) -> None:
    # A comment, an anchor, a tag, a block marker, KEY: VALUE, lines: kept as typed in an entry of a mapping of
    # strings; quoted text is still read as YAML reads it, and a plain '#' inside a word was never a comment.
    sets = {"profile.env.NOTE": "run #3", "profile.env.ONLY": "#3", "profile.env.ANCHOR": "&a x",
            "profile.env.TAG": "!!str 5", "profile.env.BAR": "|", "profile.env.MAP": "a: b",
            "profile.env.QUOTED": "'it''s #1'", "profile.env.WORD": "run#3", "profile.sbatch_extra.comment": "x #y",
            "job.extra.k": "v # w", "job.name": "run #3"}
    shown = dry_run(["--profile", "slurm-cpu", *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")]], capsys)
    assert shown["profile"]["env"] == {"NOTE": "run #3", "ONLY": "#3", "ANCHOR": "&a x", "TAG": "!!str 5", "BAR": "|",
                                       "MAP": "a: b", "QUOTED": "it's #1", "WORD": "run#3"}
    assert shown["profile"]["sbatch_extra"] == {"comment": "x #y"} and shown["job"]["extra"] == {"k": "v # w"}
    assert shown["job"]["name"] == "run #3"
    assert "export NOTE='run #3'" in script_lines(shown) or "export NOTE=\"run #3\"" in script_lines(shown)


def test_set_values_are_read_as_files_read_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Lists and mappings where a key holds them; '=' inside a value is part of the value.
    shown = dry_run(["--profile", "slurm-cpu", "--job", str(ROOT / "examples" / "seed-script.yaml"), "--set",
                     'profile.setup=["echo hi"]', "--set", "profile.env={A: 1}",
                     "--set", "profile.sbatch_extra={comment: x}", "--set", "job.extra={k: 1}", "--set",
                     "job.args=[a, b]", "--set", "job.extra.eq=a=b"], capsys)
    assert shown["profile"]["setup"] == ["echo hi"] and shown["profile"]["env"] == {"A": "1"}
    assert shown["profile"]["sbatch_extra"] == {"comment": "x"} and shown["job"]["args"] == ["a", "b"]
    assert shown["job"]["extra"] == {"k": "1", "eq": "a=b"}
    # A profile in another folder extends its neighbour by a path relative to itself.
    write(tmp_path / "profiles" / "b.yaml", "extends: local\ncpus_per_task: 2\n")
    profile = write(tmp_path / "profiles" / "a.yaml", "extends: b.yaml\ntasks_per_node: 1\n")
    shown = dry_run(["--profile", profile], capsys)
    assert (shown["profile"]["cpus_per_task"], shown["profile"]["tasks_per_node"]) == (2, 1)


def test_a_job_file_names_the_job_and_finds_its_code_parent_and_data_beside_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proj = tmp_path / "proj"
    write(proj / "train.py", "print(1)\n")
    write(proj / "mymod.py", "def main(cfg):\n    pass\n")
    shown = dry_run(["--job", write(proj / "job.yaml", "script: train.py\n")], capsys)
    assert (shown["job"]["name"], shown["job"]["code_dir"]) == ("job", str(proj))
    shown = dry_run(["--job", write(proj / "ep.yaml", "entrypoint: mymod:main\n")], capsys)
    assert shown["job"]["code_dir"] == str(proj)
    write(proj / "b.yaml", "extends: digits\nepochs: 3\ndata_dir: d\n")
    shown = dry_run(["--job", write(proj / "a.yaml", "extends: b.yaml\n")], capsys)
    assert (shown["job"]["epochs"], shown["job"]["data_dir"], shown["job"]["code_dir"]) == (3, str(proj / "d"), "")
    profile = write(proj / "p.yaml", "extends: local\ntime_min: 5\ntime: 6\n")
    code, out, err = call(["--profile", profile, "--dry-run"], capsys)
    assert code == 2 and err.strip() == (f"error: {profile}: both 'time_min' and 'time' are set; 'time_min' is the "
                                         "former name of 'time': keep only 'time'"), out + err


def test_the_submission_carries_the_interpreter_slurm_conf_and_dependencies(tmp_path: Path) -> None:
    # The parts no dry run shows: what send() and the local executor use (launcher.request.submission).
    from launcher.config.resolve import resolve, runs_dir
    from launcher.config.resolve import Point
    from launcher.request.submission import build
    local = resolve("local", "digits", ["profile.python=/opt/my py"])
    assert build(local.profile, [Point(0, local.job)], tmp_path / "a", False).python == "'/opt/my py'"
    plain = resolve("local", "digits", [])
    assert build(plain.profile, [Point(0, plain.job)], tmp_path / "b", False).python is None
    slurm = resolve("slurm-cpu", "digits", [f"profile.slurm_conf={tmp_path / 'slurm.conf'}"])
    sub = build(slurm.profile, [Point(0, slurm.job)], tmp_path / "c", False, ["41"])
    assert (sub.slurm_conf, sub.after_job_ids) == (str(tmp_path / "slurm.conf"), ["41"])
    assert sub.request is not None and sub.request.after == ["41"] and sub.parameters["dependency"] == "afterok:41"
    assert (runs_dir("local", str(tmp_path)), runs_dir("local")) == (tmp_path, Path("runs"))


TIMES = [(90, 90), (90.0, 90), ("90", 90), (" 90 ", 90), ("1:30", 2), ("0:59", 1), ("10:00", 10), ("1:30:00", 90),
         ("0:0:1", 1), ("1-12", 2160), ("1-12:30", 2190), ("1-12:30:30", 2191), ("0-0:0:59", 1), ("1-0", 1440)]
BAD_TIMES = [1.5, True, None, [1], "1:60:00", "1:00:60", "0:60", "1-24", "1-1:60", "x", "1:2:3:4", "-5", ""]
MEMORY = [("64G", 65536), ("500M", 500), ("500", 500), (4000, 4000), (1.5, 2), ("1.5T", 1572864), ("1024K", 1),
          ("1K", 1), ("2GB", 2048), ("64g", 65536), (".5G", 512), (" 2 G ", 2048), ("3MB", 3)]
BAD_MEMORY = ["64X", True, None, [1], "", "-1G", "G", "1.G", "1e3M"]


def test_slurm_time_limits_and_memory_read_as_slurm_reads_them() -> None:
    from launcher.config import units
    assert [units.time_minutes(v) for v, _ in TIMES] == [m for _, m in TIMES]
    assert [units.memory_mb(v) for v, _ in MEMORY] == [m for _, m in MEMORY]
    for bad, read, formats in [(BAD_TIMES, units.time_minutes, units.TIME_FORMATS),
                               (BAD_MEMORY, units.memory_mb, units.MEMORY_FORMATS)]:
        for value in bad:
            with pytest.raises(ValueError) as raised:
                read(value)  # type: ignore[arg-type]
            assert str(raised.value).startswith(formats), value
    with pytest.raises(ValueError, match="with hours < 24 after days and minutes, seconds < 60 after hours"):
        units.time_minutes("1-24")


# Each sbatch option the profile models, and the profile key the refusal points to (docs/profiles-and-jobs.md: sbatch_extra).
MODELLED = {
    "nodes": "nodes", "ntasks": "nodes x tasks_per_node", "ntasks-per-node": "tasks_per_node",
    "tasks-per-node": "tasks_per_node", "ntasks-per-core": "tasks_per_node", "ntasks-per-socket": "tasks_per_node",
    "ntasks-per-gpu": "tasks_per_node", "cpus-per-task": "cpus_per_task", "cpus-per-gpu": "cpus_per_task",
    "mincpus": "cpus_per_task", "gpus": "gpus_per_node", "gpus-per-node": "gpus_per_node",
    "gpus-per-task": "gpus_per_task", "gpus-per-socket": "gpus_per_node",
    "gres": "gpus_per_node, gpu_type and gpu_request: gres", "mem": "mem_per_task", "mem-per-cpu": "mem_per_task", "mem-per-gpu": "mem_per_task",
    "time": "time", "time-min": "time", "partition": "partition", "account": "account", "qos": "qos",
    "constraint": "constraint", "signal": "signal and signal_delay_s", "array": "the sweep (one array task per point)",
    "output": "the run folder's logs (submitit's layout)", "error": "the run folder's logs (submitit's layout)",
    "input": "the run folder's logs (submitit's layout)", "open-mode": "the run folder's logs (submitit's layout)",
    "job-name": "job.name", "chdir": "the run folder's logs (submitit's layout)", "dependency": "--after",
    "requeue": "max_timeout_requeues (runs are always requeueable)",
    "no-requeue": "max_timeout_requeues (runs are always requeueable)", "wrap": "the job script",
    "distribution": "tasks_per_node (one rank per task)", "export": "env", "get-user-env": "env",
    # sbatch takes unique prefixes of long options: an abbreviation names every key it could mean.
    "ntasks-per-s": "tasks_per_node", "gpus-per": "gpus_per_node / gpus_per_task", "ex": "env", "co": "constraint",
}


def test_every_sbatch_option_the_profile_models_is_refused_in_sbatch_extra(capsys: pytest.CaptureFixture[str]) -> None:
    for option, key in MODELLED.items():
        code, out, err = call(["--profile", "slurm-cpu", "--set", f"profile.sbatch_extra.{option}=1", "--dry-run"],
                              capsys)
        assert code == 2, option
        assert err.strip().endswith(f"key 'sbatch_extra.{option}' has invalid value '1'; expected no value here: "
                                    f"--{option} would change {key}, which the profile sets (the trainer expects "
                                    f"the world size and paths the profile describes); set {key} instead"), err
    for option in ("mail-type", "comment", "exclusive", "c"):  # no profile key behind these ("c": --comment, ...)
        expected = 0 if option != "c" else 2
        assert call(["--profile", "slurm-cpu", "--set", f"profile.sbatch_extra.{option}=1", "--dry-run"],
                    capsys)[0] == expected, option


PROFILE_ERRORS = [
    ("profile.tasks_per_node=65536", "'tasks_per_node' has invalid value 65536; expected at most 65535 (a 16-bit "
                                     "SLURM field)"),
    ("profile.cpus_per_task=65536", "'cpus_per_task' has invalid value 65536; expected at most 65535 (a 16-bit"),
    ("profile.signal_delay_s=65536", "'signal_delay_s' has invalid value 65536; expected at most 65535 (a 16-bit"),
    ("profile.nodes=2147483648", "'nodes' has invalid value 2147483648; expected at most 2147483647 (a 32-bit "
                                 "field)"),
    ("profile.max_timeout_requeues=2147483648", "expected at most 2147483647 (a 32-bit field)"),
    ("profile.checkpoint_every_steps=2147483648", "expected at most 2147483647 (a 32-bit field)"),
    ("profile.array_parallelism=2147483648", "expected at most 2147483647 (a 32-bit field)"),
    ("profile.max_array_size=2147483648", "expected at most 2147483647 (a 32-bit field)"),
    ("profile.init_timeout_s=2147483648", "expected at most 2147483647 (a 32-bit field)"),
    ("profile.collective_timeout_s=2147483648", "expected at most 2147483647 (a 32-bit field)"),
    ("profile.time=2147483648", "'time' has invalid value 2147483648; expected at most 2147483647 minutes (a 32-bit"),
    ("profile.mem_per_task=1073741824", "'mem_per_task' has invalid value 1073741824; expected at most 2147483647 "
                                        "MB per node (a 32-bit field)"),
    ("profile.partition=a/b", "'partition' has invalid value 'a/b'; expected a SLURM name (letters, digits, '_', "
                              "'.', '-')"),
    ("profile.account=a b", "'account' has invalid value 'a b'; expected a SLURM name"),
    ("profile.qos=a;b", "'qos' has invalid value 'a;b'; expected a SLURM name"),
    ("profile.max_array_size=0", "'max_array_size' has invalid value 0; expected an integer > 0 or null"),
    ("profile.time=1:60", "'time' has invalid value '1:60'; expected a SLURM time limit > 0: minutes (90)"),
    ("profile.mem_per_task=0", "'mem_per_task' has invalid value 0; expected memory > 0: a size with a unit"),
    ("profile.mem_per_task_gb=x", "--set: key 'profile.mem_per_task_gb' has invalid value 'x'; expected a number of "
                                  "GB (or write mem_per_task: 64G)"),
    ("profile.container_binds=['a,b']", "'container_binds[0]' has invalid value"),
    ("profile.container_binds=['']", "'container_binds[0]' has invalid value ''; expected SRC[:DST[:ro|rw]] "
                                     "(SRC an existing absolute path, DST absolute, no commas)"),
    ("profile.gpus_per_node=-1", "'gpus_per_node' has invalid value -1; expected an integer >= 0"),
    ("profile.init_timeout_s=0", "'init_timeout_s' has invalid value 0; expected an integer > 0"),
]


@pytest.mark.parametrize("setting,message", PROFILE_ERRORS, ids=[s for s, _ in PROFILE_ERRORS])
def test_profile_values_slurm_cannot_take_are_refused_with_the_limit(capsys: pytest.CaptureFixture[str],
                                                                     setting: str, message: str) -> None:
    long = ["--profile", "slurm-cpu", "--set", "profile.time=100000"]  # room for the longest signal delay
    code, out, err = call([*long, "--set", setting, "--dry-run"], capsys)
    assert code == 2 and err.startswith("error: ") and message in err, out + err
    # The largest value each field takes is accepted.
    key, _, value = setting.partition("=")
    if value in ("65536", "2147483648"):
        code, out, err = call([*long, "--set", f"{key}={int(value) - 1}", "--dry-run"], capsys)
        assert code == 0, err


def test_paths_in_a_profile_file_are_read_from_its_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "profiles"
    profile = write(folder / "p.yaml", "extends: slurm-cpu\npython: venv/bin/python\ncontainer: img.sif\n"
                                       "container_binds: ['data:/data:ro', /tmp, '~']\n")
    (folder / "data").mkdir()
    shown = dry_run(["--profile", profile], capsys)["profile"]
    assert (shown["python"], shown["container"]) == (str(folder / "venv/bin/python"), str(folder / "img.sif"))
    assert shown["container_binds"] == [f"{folder / 'data'}:/data:ro", "/tmp", str(Path("~").expanduser())]
    # A command name, a registry reference and a relative image path as written.
    registry = "nvcr.io/nvidia/pytorch:24.01-py3"
    for container, image in [("docker://repo/img", "docker://repo/img"), (registry, registry),
                             ("./x", str(folder / "x")), ("../y", str(tmp_path / "y")),
                             ("~/img", str(Path("~/img").expanduser()))]:
        write(folder / "q.yaml", f"extends: slurm-cpu\npython: python3\ncontainer: {container}\n")
        shown = dry_run(["--profile", str(folder / "q.yaml")], capsys)["profile"]
        assert (shown["python"], shown["container"]) == ("python3", image)


IMAGES = {"model": "lenet", "dataset": "synthetic-cifar10"}
JOB_LIMITS_OK = [
    {"epochs": 2**31 - 1, "batch_size_per_rank": 1, "eval_every_epochs": 2**31 - 1, "log_every_steps": 1,
     "keep_checkpoints": 2**31 - 1, "grad_accum_steps": 2**31 - 1, "seed": 2**32 - 1, "momentum": 0.0,
     "weight_decay": 0.0, "warmup_fraction": 0.0, "label_smoothing": 0.0, "stop_at_accuracy": 1.0,
     "checkpoint_every_steps": 2**31 - 1, "fail_at": "3:1", "interrupt_at": "1, 40"},
    {**IMAGES, "synthetic_train_size": 1_000_000, "synthetic_test_size": 1_000_000, "seed": 0,
     "stop_at_accuracy": 0.0, "checkpoint_every_steps": 0, "interrupt_at": 5, "target_metric": "train_loss"},
    {"model": "resnet-small", "dataset": "cifar10", "target_metric": "images_per_second"},
    {"entrypoint": "pkg.mod:main", "target_metric": "my_score"}, {"script": "train.py", "target_metric": "score"},
    {"checkpoint_every_steps": "auto", "auto_checkpoint_min_s": 0.5, "auto_checkpoint_max_s": 0.5},
]
JOB_LIMITS_BAD = [
    ({"epochs": 0}, "'epochs' has invalid value 0; expected an integer > 0"),
    ({"synthetic_test_size": 0}, "'synthetic_test_size' has invalid value 0; expected an integer > 0"),
    ({"keep_checkpoints": 2**31}, f"'keep_checkpoints' has invalid value {2**31}; expected an integer <= {2**31 - 1}"),
    ({"grad_accum_steps": 2**31}, "'grad_accum_steps' has invalid value"),
    ({"log_every_steps": 2**31}, "'log_every_steps' has invalid value"),
    ({**IMAGES, "synthetic_train_size": 1_000_001}, "'synthetic_train_size' has invalid value 1000001; expected an "
     "integer <= 1000000 (3 GB of 32x32 images)"),
    ({**IMAGES, "synthetic_test_size": 1_000_001}, "'synthetic_test_size' has invalid value 1000001"),
    ({"seed": -1}, f"'seed' has invalid value -1; expected an integer in [0, {2**32 - 1}]"),
    ({"seed": 2**32}, "'seed' has invalid value 4294967296"),
    ({"lr": 0.0}, "'lr' has invalid value 0.0; expected a number > 0"),
    ({"momentum": 1.0}, "'momentum' has invalid value 1.0; expected a number in [0, 1)"),
    ({"momentum": -0.1}, "'momentum' has invalid value -0.1"),
    ({"weight_decay": -0.1}, "'weight_decay' has invalid value -0.1; expected a number >= 0"),
    ({"warmup_fraction": 1.0}, "'warmup_fraction' has invalid value 1.0; expected a number in [0, 1)"),
    ({"warmup_fraction": -0.1}, "'warmup_fraction' has invalid value -0.1"),
    ({"label_smoothing": 1.0}, "'label_smoothing' has invalid value 1.0; expected a number in [0, 1)"),
    ({"label_smoothing": -0.1}, "'label_smoothing' has invalid value -0.1"),
    ({"stop_at_accuracy": 1.01}, "'stop_at_accuracy' has invalid value 1.01; expected a number in [0, 1]"),
    ({"stop_at_accuracy": -0.1}, "'stop_at_accuracy' has invalid value -0.1"),
    ({"checkpoint_every_steps": -1}, f"'checkpoint_every_steps' has invalid value -1; expected an integer in [0, "
     f"{2**31 - 1}], auto or null"),
    ({"checkpoint_every_steps": "often"}, "'checkpoint_every_steps' has invalid value 'often'"),
    ({"auto_checkpoint_min_s": 0}, "'auto_checkpoint_min_s' has invalid value 0.0; expected seconds > 0"),
    ({"auto_checkpoint_min_s": 90, "auto_checkpoint_max_s": 60}, "'auto_checkpoint_min_s' has invalid value 90"),
    ({"checkpoint_every_steps": 2**31}, "'checkpoint_every_steps' has invalid value 2147483648"),
    ({"target_metric": "acc"}, "'target_metric' has invalid value 'acc'; expected one of test_accuracy, test_loss, "
     "train_loss, images_per_second (any metric name with an entrypoint)"),
    ({"entrypoint": "m:f", "script": "t.py"}, "'script' has invalid value 't.py'; expected empty when 'entrypoint' is "
     "set (a job runs one or the other)"),
    ({"entrypoint": "a-b:c"}, "'entrypoint' has invalid value 'a-b:c'; expected 'package.module:function'"),
    ({"entrypoint": "a.b"}, "'entrypoint' has invalid value 'a.b'"),
    ({"entrypoint": "a:b-c"}, "'entrypoint' has invalid value 'a:b-c'"),
    ({"fail_at": "3"}, "'fail_at' has invalid value '3'; expected '' or 'STEP:RANK' with two integers"),
    ({"fail_at": "a:1"}, "'fail_at' has invalid value 'a:1'"),
    ({"fail_at": "1:2:3"}, "'fail_at' has invalid value '1:2:3'"),
    ({"interrupt_at": "0"}, "'interrupt_at' has invalid value '0'; expected '' or global steps > 0 separated by "
     "commas, e.g. '12,40'"),
    ({"interrupt_at": "1,,2"}, "'interrupt_at' has invalid value '1,,2'"),
    ({"interrupt_at": "x"}, "'interrupt_at' has invalid value 'x'"),
    ({"dataset": "cifar10"}, "'model' has invalid value 'mlp'; expected 'lenet' or 'resnet-small' for 32x32 images"),
    ({"model": "lenet"}, "'model' has invalid value 'lenet'; expected 'mlp' for the 8x8 digits data"),
]


def test_job_values_at_their_limits_are_accepted_and_one_past_them_refused_by_name() -> None:
    from trainer.config.job import JobConfig, interrupt_steps
    from trainer.config.schema import ConfigError, build
    for data in JOB_LIMITS_OK:
        job = build(JobConfig, dict(data), "j.yaml")
        assert all(getattr(job, k) == v for k, v in data.items()), data
    for data, message in JOB_LIMITS_BAD:
        with pytest.raises(ConfigError) as raised:
            build(JobConfig, dict(data), "j.yaml")
        assert str(raised.value).startswith(f"j.yaml: key {message}"), (data, str(raised.value))
    assert [interrupt_steps(build(JobConfig, {"interrupt_at": v}, "j")) for v in ("", 7, "12, 40")] == [
        set(), {7}, {12, 40}]


def test_python_m_trainer_loads_a_job_by_name_or_path_as_the_submitter_does(tmp_path: Path) -> None:
    from trainer.config.job import load_job
    from trainer.config.schema import ConfigError
    digits = load_job("digits")
    assert (digits.name, digits.model, digits.dataset) == ("digits", "mlp", "digits")
    assert load_job("digits-lr-sweep").name == "digits-lr-sweep"  # a sweep file's base job trains as itself
    write(tmp_path / "mine" / "base.yaml", "extends: digits\nepochs: 3\ndata_dir: d\n")
    job = load_job(write(tmp_path / "mine" / "mine.yaml", "extends: base.yaml\nlr: 0.5\n"))
    assert (job.epochs, job.lr, job.data_dir) == (3, 0.5, str(tmp_path / "mine" / "d"))
    bad = write(tmp_path / "bad.yaml", "extends: digits\nepochs: 0\n")
    with pytest.raises(ConfigError) as raised:
        load_job(bad)
    assert str(raised.value).startswith(f"{bad} (extending ") and "key 'epochs' has invalid value 0" in str(raised.value)
    write(tmp_path / "jobs" / "here.yaml", "extends: digits\nepochs: 4\n")  # ./jobs of the working folder
    assert load_job("here").epochs == 4


EXECUTOR_LIMITS = [
    # The debug executor runs in this process: one rank, its interpreter.
    *[(["--profile", "debug", "--set", f"profile.{setting}"], f"key {said} for the debug executor")
      for setting, said in (("nodes=2", "'nodes' has invalid value 2; expected 1"),
                            ("tasks_per_node=2", "'tasks_per_node' has invalid value 2; expected 1"),
                            ("python=py", "'python' has invalid value 'py'; expected empty"),
                            ("container=img.sif", "'python' has invalid value ''; expected empty"))],
    (["--set", "profile.nodes=2"], "key 'nodes' has invalid value 2; expected 1 for the local executor (use a slurm "
     "profile for more)"),
    (["--profile", "slurm-cpu", "--set", "profile.gpus_per_node=2", "--set", "profile.tasks_per_node=1"],
     "key 'tasks_per_node' has invalid value 1; expected one task per GPU: 2 (= gpus_per_node)"),
    (["--profile", "slurm-cpu", "--set", "profile.time=1", "--set", "profile.signal_delay_s=60"],
     "key 'signal_delay_s' has invalid value 60; expected fewer seconds than the time limit (60 s)"),
    (["--profile", "slurm-cpu", "--set", "profile.sbatch_extra.t=1"], "--t is not supported (sbatch would only "
     "estimate a start time and queue nothing)"),
    (["--set", "profile.env.BAD-NAME=1"], "key 'env.BAD-NAME' has invalid value 'BAD-NAME'; expected a shell variable "
     "name (letters, digits, underscore)"),
    (["--set", "profile.env.a1_B=1", "--set", "profile.env.1a=1"], "key 'env.1a' has invalid value '1a'"),
    (["--profile", "slurm-cpu", "--set", "profile.sbatch_extra.Mail=1"], "key 'sbatch_extra.Mail' has invalid value "
     "'Mail'; expected an sbatch long option name such as 'mail-type'"),
    (["--set", 'profile.setup=["x"]'], "key 'setup' has invalid value ['x']; expected [] for the local executor "
     "(setup lines run only in SLURM batch scripts;"),
    (["--set", "profile.container=docker://x"], "key 'container' has invalid value 'docker://x'; expected empty unless "
     "executor is slurm (containers start through srun)"),
    # A control character in a value that reaches a process.
    *[(["--profile", "slurm-cpu", "--set", f"profile.{key}={value}"],
       f"key '{key}' has invalid value {value!r}; expected one line of text without control characters")
      for key, value in (("container", "a\x07b"), ("python", "a\x7fb"), ("python", "a\x1fb"))],
]


def test_what_each_executor_can_run_is_checked_to_the_limit(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in EXECUTOR_LIMITS:
        code, out, err = call([*argv, "--dry-run"], capsys)
        assert code == 2 and err.startswith("error: ") and message in err, (argv, err)
    for argv in (["--set", "profile.time=1", "--set", "profile.signal_delay_s=59"],
                 ["--set", "profile.max_array_size=1"], ["--set", "profile.partition=GPU_a.1-x"],
                 ["--set", "profile.mem_per_task=2147483647", "--set", "profile.tasks_per_node=1"]):
        code, out, err = call(["--profile", "slurm-cpu", *argv, "--dry-run"], capsys)
        assert code == 0, (argv, err)
    # A SLURM_CONF recorded relative (older runs) is the project's; an absolute one stays; local runs have none.
    from launcher.config.profile import slurm_conf_file
    from trainer.config.lookup import CODE_ROOT as PROJECT_ROOT
    assert slurm_conf_file("slurm", "x/slurm.conf") == str(PROJECT_ROOT / "x" / "slurm.conf")
    assert (slurm_conf_file("slurm", "/etc/s.conf"), slurm_conf_file("local", "/etc/s.conf")) == ("/etc/s.conf", "")


def test_a_profile_in_the_working_folders_cluster_profiles_is_found_by_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "cluster_profiles" / "mine.yaml", "extends: local\ncpus_per_task: 1\n")
    assert dry_run(["--profile", "mine"], capsys)["profile"]["name"] == "mine"
