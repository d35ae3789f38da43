"""A run's records read back as inputs (issue 43): job ids are SLURM's, a local run's or a debug run's by type,
so an edited run.json cannot change a dependency or a cancel; `--after` takes only a run that SLURM queued.
Each refusal is one `error:` line, exit 2, and no new run folder. In-process: the command line's own `main`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cluster import jobids
from launcher.commands.main import main


def run_folder(parent: Path, name: str, executor: str, job_ids: list[object]) -> Path:
    """A run folder as a submission leaves it, with `job_ids` as given."""
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({
        "executor": executor, "tasks": 1, "created": 1767000000.0, "world_size": 2, "job_ids": job_ids,
        "profile": {"name": "dev-cluster", "executor": executor}, "job": {"name": "digits"}}))
    return folder


def call(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    """`submit.py ARGV` in this process: (exit status, standard error's lines, standard output)."""
    try:
        code = main(argv)
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, [line for line in err.splitlines() if line.strip() and not line.startswith("note: ")], out


@pytest.mark.parametrize("recorded", ["4711?afterany:1", "4711,4712", "4711:1", "12_[1-3]", "-1", " 4711", "4711\n",
                                      "../4711", "DEBUG_", "12_"])
def test_a_job_id_that_is_not_one_is_refused_where_the_record_is_read(tmp_path: Path, recorded: str,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    parent = run_folder(tmp_path / "runs", "parent", "slurm", [recorded])
    runs = tmp_path / "new-runs"
    code, lines, _ = call(["--profile", "dev-cluster", "--after", str(parent), "--dry-run",
                        "--set", f"profile.runs_dir={runs}"], capsys)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "job_ids" in lines[0] and "run.json" in lines[0] and "a job id" in lines[0], lines
    assert not runs.exists()


def test_ids_the_executors_record_are_read_back_as_they_are() -> None:
    for kept in ("4711", "4711_3", "123456789012", "DEBUG_140234", ""):
        assert jobids.recorded(kept), kept
    assert jobids.is_slurm("4711_3") and not jobids.is_slurm("DEBUG_1") and not jobids.is_slurm("")


@pytest.mark.parametrize("executor, ids", [("local", ["31337"]), ("debug", ["DEBUG_140234"])])
def test_after_a_run_that_slurm_never_queued_is_refused(tmp_path: Path, executor: str, ids: list[str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A local run's id is a process id: as a SLURM dependency it would wait on whatever job has that number."""
    parent = run_folder(tmp_path / "runs", "local-run", executor, ids)
    runs = tmp_path / "new-runs"
    code, lines, _ = call(["--profile", "dev-cluster", "--after", f"{parent}:any", "--dry-run",
                        "--set", f"profile.runs_dir={runs}"], capsys)
    assert code == 2 and len(lines) == 1, lines
    assert f"ran on the {executor} executor" in lines[0] and "--after needs a run that SLURM queued" in lines[0]
    assert not runs.exists()


def test_after_a_slurm_run_depends_on_its_jobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The other side of the two refusals above: a SLURM run's ids become the dependency, unchanged."""
    parent = run_folder(tmp_path / "runs", "slurm-run", "slurm", ["4711_0", "4711_1", "4712"])
    code, lines, out = call(["--profile", "dev-cluster", "--after", f"{parent}:notok", "--dry-run", "--json",
                             "--set", f"profile.runs_dir={tmp_path / 'new-runs'}"], capsys)
    assert code == 0, lines
    script = json.loads(out.splitlines()[-1])["sbatch_script"]
    assert "#SBATCH --dependency=afternotok:4711:4712" in script.splitlines(), script


def test_the_python_handles_on_a_damaged_record_say_what_is_damaged(tmp_path: Path) -> None:
    """runs() lists it as unreadable, with its folder; attach() by its name finds it; the handle's first call is a
    SubmitError naming the file and the damage (it was a bare KeyError, and runs() gave no folder)."""
    from launcher.client import SubmitError, attach, runs

    runs_dir = tmp_path / "runs"
    (runs_dir / "cut").mkdir(parents=True)
    (runs_dir / "cut" / "run.json").write_text('{"executor": "slurm", "tasks": ')
    (row,) = runs(cwd=tmp_path)
    assert row["run"] == "cut" and row["run_dir"] == str(runs_dir / "cut") and row["state"].startswith("unreadable")
    handle = attach("cut", cwd=tmp_path)
    assert handle.run_dir == runs_dir / "cut"
    with pytest.raises(SubmitError) as raised:
        handle.state()
    assert "run.json: not valid JSON" in str(raised.value)


def test_the_retry_steps_policy_travels_typed_and_is_read_back_checked() -> None:
    """The batch script carries the retry step's policy as one JSON argument: what the request made is what the
    step reads, and a field that is not what was written is a ValueError naming it (the step then says so in
    one line and the job goes on: launcher/heal/__main__.py)."""
    from launcher.cluster.slurm.healing import RetryPolicy

    policy = RetryPolicy(run="/r", max_failures=2, patterns=("Xid 79",), partition="gpu", nodes=2, tasks_per_node=4,
                         cpus_per_task=8, mem_per_node_mb=1000, gpus_per_node=4, gpu_type="a100", pinned="gpu[1-2]",
                         stop_signal="USR2")
    assert RetryPolicy.loads(policy.dumps()) == policy and policy.pinned_nodes() == ("gpu1", "gpu2")
    for field, value in (("nodes", "2"), ("max_failures", True), ("patterns", "Xid"), ("run", None)):
        compact = {"separators": (",", ":")}
        was = json.dumps({field: list(policy.patterns) if field == "patterns" else getattr(policy, field)}, **compact)
        text = policy.dumps().replace(was[1:-1], json.dumps({field: value}, **compact)[1:-1])
        assert text != policy.dumps()
        with pytest.raises(ValueError, match=f"'{field}'"):
            RetryPolicy.loads(text)
