"""Stored records read defensively, property-tested: run.json, tasks.json and result.json with any
field replaced by any JSON value (text for a date, text for a count, lists of the wrong items, an
enormous task count) never give a traceback in `status`, `logs`, `cancel`, `list` or `--resume`,
nor make `status` run without end: each command answers, or prints one `error:` line naming the
file and the field (exit 2); `list` still lists the healthy run beside the broken one.

In-process and fast: the run folders are written here in the shape the submitter writes (a local
two-task sweep whose tasks' processes are long gone: ids above any pid the kernel hands out), so
hypothesis can try hundreds of records in seconds. tests/test_broken_run_folders.py does the same
for a few corruptions of a real run's folder, through the installed command.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_cli_in_process import call  # the command line in this process, its exit code and output

DEAD = ["4999998", "4999999"]  # above /proc/sys/kernel/pid_max's ceiling (2**22): no process has them
JOB = {"name": "digits", "model": "mlp", "dataset": "digits", "epochs": 1, "lr": 0.05,
       "target_metric": "test_accuracy", "target_mode": "max"}
PROFILE = {"name": "local", "executor": "local", "nodes": 1, "tasks_per_node": 1, "slurm_conf": ""}


def run_json(run_dir: Path) -> dict[str, Any]:
    return {"executor": "local", "run_dir": str(run_dir), "log_dir": str(run_dir / "logs"), "world_size": 1,
            "tasks": 2, "profile": dict(PROFILE), "job": dict(JOB),
            "sweep_overrides": [{"lr": 0.05}, {"lr": 0.06}], "created": time.time() - 60,
            "argv": ["python", "submit.py"], "job_ids": list(DEAD), "task_jobs": [[DEAD[0]], [DEAD[1]]],
            "resumes": [{"job_ids": [DEAD[1]], "time": time.time() - 30}], "state": "FAILED",
            "best": {"test_accuracy": 0.7, "task": 0}}


def tasks_json(run_dir: Path) -> dict[str, Any]:
    return {"tasks": [{"task": t, "overrides": {"lr": lr}, "run_dir": str(run_dir / f"task-{t:04d}"),
                       "job": {**JOB, "lr": lr}} for t, lr in ((0, 0.05), (1, 0.06))]}


def result_json(run_dir: Path) -> dict[str, Any]:
    return {"test_accuracy": 0.7, "test_loss": 1.5, "train_loss": 1.9, "images_per_second": 3000.0, "epochs": 1,
            "steps": 22, "world_size": 1, "wall_time_s": 40.0, "state": "COMPLETED", "job_id": DEAD[0],
            "restarts": 0, "task": 0}


RECORDS = {"run.json": run_json, "tasks.json": tasks_json, "task-0000/result.json": result_json}


def make_run(run_dir: Path, replace: tuple[str, str, Any] | None = None) -> None:
    """A finished local sweep's folder; `replace` = (record, key, value) puts one field of any shape."""
    for name, make in RECORDS.items():
        data = make(run_dir)
        if replace is not None and replace[0] == name:
            data[replace[1]] = replace[2]
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text(json.dumps(data))
    (run_dir / "task-0001").mkdir(exist_ok=True)
    (run_dir / "task-0001" / "failure.json").write_text(json.dumps({"rank": 0, "error": "boom"}))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20)
    | st.sampled_from(["2026-12-01", "7", "", "x" * 300, DEAD[0], "\x1b[2J"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8)
ENORMOUS = st.sampled_from([10**9, 10**12, 2**63, 10**30])
KEYS = {"run.json": [*run_json(Path("r")), "cancelled_at", "failed_rank", "error"],
        "tasks.json": ["tasks"], "task-0000/result.json": [*result_json(Path("r"))]}
MUTATIONS = st.sampled_from(sorted(KEYS)).flatmap(
    lambda record: st.tuples(st.just(record), st.sampled_from(KEYS[record]), JSON_VALUES | ENORMOUS))


@pytest.fixture(autouse=True)
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.chdir(tmp_path)


def answers_or_one_error(code: int, err: str, record: str, key: str) -> None:
    assert code in (0, 1, 2), err
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert record.rsplit("/", 1)[-1] in lines[0] and key in lines[0], lines[0]
        assert "\x1b" not in lines[0]


COMMANDS = [["status"], ["status", "--json"], ["logs", "--task", "1"], ["list"], ["--resume", "--dry-run"],
            ["cancel"], ["diff", "{healthy}"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One runs folder for every example: each rewrites the records, while the sweep's summary
    picture, drawn once, is redrawn only when a record changes the table (that is what costs)."""
    return tmp_path_factory.mktemp("runs")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutation=MUTATIONS)
def test_no_command_gives_a_traceback_on_a_field_of_any_shape(runs: Path, capsys: pytest.CaptureFixture[str],
                                                              mutation: tuple[str, str, Any]) -> None:
    broken, healthy = runs / "20261201-100000-broken", runs / "20261201-090000-healthy"
    make_run(broken, mutation)
    make_run(healthy)
    record, key, _ = mutation
    for command in COMMANDS:
        argv = ([command[0], str(broken), *[c.replace("{healthy}", str(healthy)) for c in command[1:]]]
                if command[0] != "list" else ["list", "--runs-dir", str(runs)])
        started = time.monotonic()
        code, out, err = call(argv, capsys)
        assert time.monotonic() - started < 60, f"{argv} took too long (a record that makes a command loop?)"
        if command[0] == "list":
            assert code == 0, err
            rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
            assert healthy.name in rows and broken.name in rows, out
            assert "unreadable" not in rows[healthy.name]
        else:
            answers_or_one_error(code, err, record, key)


EVENT_LINES = st.lists(st.fixed_dictionaries(
    {"event": st.sampled_from(["started", "resumed", "stopped", "finished"]) | JSON_VALUES},
    optional={"time": JSON_VALUES, "step": JSON_VALUES, "job_id": JSON_VALUES, "requeued": JSON_VALUES,
              "reason": JSON_VALUES, "signal": JSON_VALUES}).map(json.dumps) | st.text(max_size=30), max_size=6)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=EVENT_LINES)
def test_status_reads_an_event_log_of_any_shape(runs: Path, capsys: pytest.CaptureFixture[str],
                                                lines: list[str]) -> None:
    """events.jsonl (restarts, in `status`): a line of another shape is skipped like a torn one."""
    run = runs / "20261201-110000-events"
    make_run(run)
    (run / "task-0000" / "events.jsonl").write_text("\n".join(lines) + "\n")
    for argv in (["status", str(run)], ["status", str(run), "--json"]):
        code, out, err = call(argv, capsys)
        assert code in (0, 1) and "Traceback" not in err, err


def test_an_enormous_task_count_is_one_error_naming_the_field(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    make_run(tmp_path / "run", ("run.json", "tasks", 10**12))
    started = time.monotonic()
    code, _, err = call(["status", str(tmp_path / "run")], capsys)
    assert time.monotonic() - started < 30
    assert code == 2 and err.startswith(f"error: {tmp_path / 'run' / 'run.json'}: field 'tasks' has invalid value "
                                        f"1000000000000; expected an integer in [1, ")


def test_a_date_written_as_text_is_one_error_naming_the_field(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    make_run(tmp_path / "run", ("run.json", "created", "2026-12-01"))
    code, _, err = call(["logs", str(tmp_path / "run"), "--task", "0"], capsys)
    assert code == 2 and "run.json: field 'created' has invalid value '2026-12-01'; expected a finite JSON number" \
        in err, err


DEEP = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"  # json recurses once per level


@pytest.mark.parametrize("name,content", [
    ("run.json", DEEP), ("tasks.json", DEEP), ("task-0000/result.json", DEEP), ("task-0001/failure.json", DEEP),
    ("task-0000/metrics.jsonl", b'\xff\xfe\n5\n"x"\n' + b"[" * 100_000 + b'\n{"epoch": "x", "train_loss": [1], "epoch_time_s": 1}\n')],
    ids=["run.json", "tasks.json", "result.json", "failure.json", "metrics.jsonl"])
def test_a_record_nested_without_end_or_not_utf8_is_one_error_or_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                         name: str, content: bytes) -> None:
    """The hostile-input sweep's records: a RecursionError or UnicodeDecodeError was a traceback in every command."""
    run, healthy = tmp_path / "runs" / "20261201-100000-deep", tmp_path / "runs" / "20261201-090000-healthy"
    make_run(run)
    make_run(healthy)
    (run / name).write_bytes(content)
    for argv in (["status", str(run)], ["logs", str(run), "--task", "1"], ["--resume", str(run), "--dry-run"]):
        code, _, err = call(argv, capsys)
        answers_or_one_error(code, err, name, "nested too deeply" if code == 2 else "")
    code, out, _ = call(["list", "--runs-dir", str(tmp_path / "runs")], capsys)
    assert code == 0 and healthy.name in out and run.name in out


def test_a_remote_record_without_its_fields_is_one_error_naming_the_field(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """remote.json (a run submitted over SSH) relayed with a field missing was a KeyError traceback."""
    (tmp_path / "runs" / "far").mkdir(parents=True)
    (tmp_path / "runs" / "far" / "remote.json").write_text(json.dumps({"login": "x", "job_ids": None}))
    code, _, err = call(["status", "far"], capsys)
    assert code == 2 and err == f"error: {Path('runs/far/remote.json')}: field 'remote_run_dir' is missing " \
                                "(a record written by a submission over SSH has it)\n"
    code, out, _ = call(["list"], capsys)  # listed offline all the same
    assert code == 0 and "far" in out


def test_resume_refuses_a_job_it_would_not_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--resume RUN --job J` resubmitted the recorded jobs and dropped J without a word."""
    make_run(tmp_path / "run")
    code, _, err = call(["--resume", str(tmp_path / "run"), "--job", "cifar10", "--dry-run"], capsys)
    assert code == 2 and err.startswith("error: --job cifar10: --resume resubmits the run's recorded jobs")
    code, out, err = call(["--resume", str(tmp_path / "run"), "--dry-run"], capsys)
    assert code == 0 and "would resubmit task(s) 1" in out, err


# ----- the typed reader of records, directly: the one door every record comes through -------------------

def remote_json(name: str = "far") -> dict[str, Any]:
    """remote.json as a submission over SSH writes it (launcher.remote.ssh_record.write_remote_record)."""
    return {"name": name, "profile": "mylab", "login": "mylab", "remote_dir": "/r", "remote_run_dir": f"/r/runs/{name}",
            "code": "0123abcd", "python": "python3", "job_ids": ["4711"], "job": "digits", "tasks": 1,
            "created": time.time()}


HEALTHY = {"run.json": run_json(Path("r")), "result.json": result_json(Path("r")), "remote.json": remote_json(),
           "failure.json": {"rank": 1, "error": "boom"}}
# (record, field, a value of the wrong shape, the field as the error names it): `true` where a number
# belongs (JSON's true is Python's 1), and a list whose first item is fine but a later one is not.
MISSHAPEN = [
    ("run.json", "created", True, "created"), ("run.json", "tasks", True, "tasks"),
    ("run.json", "world_size", False, "world_size"), ("run.json", "cancelled_at", True, "cancelled_at"),
    ("run.json", "failed_rank", True, "failed_rank"),
    ("run.json", "job_ids", ["12", {"x": 1}], "job_ids[1]"), ("run.json", "job_ids", ["12", True], "job_ids[1]"),
    ("run.json", "task_jobs", [["12"], ["13", ["14"]]], "task_jobs[1][1]"),
    ("run.json", "resumes", [{"job_ids": ["12"], "time": 1.0}, {"job_ids": ["13"], "time": True}], "resumes[1].time"),
    ("run.json", "sweep_overrides", [{}, "lr=1"], "sweep_overrides[1]"),
    ("result.json", "test_accuracy", True, "test_accuracy"), ("result.json", "restarts", True, "restarts"),
    ("result.json", "wall_time_s", float("nan"), "wall_time_s"), ("failure.json", "rank", True, "rank"),
    ("remote.json", "job_ids", "4711", "job_ids"), ("remote.json", "job_ids", ["12", {"x": 1}], "job_ids[1]"),
    ("remote.json", "created", True, "created"), ("remote.json", "tasks", True, "tasks"),
    ("remote.json", "login", ["mylab"], "login"), ("remote.json", "remote_run_dir", 7, "remote_run_dir"),
]


def read(record: str, data: dict[str, Any], folder: Path) -> dict[str, Any] | None:
    """`data` written as `record` in `folder` and read back through the reader every command uses
    (remote.json's: launcher.remote.ssh_record, its fields as the record has them)."""
    from dataclasses import asdict

    from launcher.remote.ssh_record import read_remote_record
    from launcher.rundir import record as records

    (folder / record).write_text(json.dumps(data))
    if record == "remote.json":
        run = read_remote_record(folder)
        return None if run is None else {key: value for key, value in asdict(run).items() if key in data}
    return records.read_json(folder / record)


@pytest.mark.parametrize("record", sorted(HEALTHY))
def test_the_reader_takes_each_record_as_written(tmp_path: Path, record: str) -> None:
    assert read(record, HEALTHY[record], tmp_path) == json.loads(json.dumps(HEALTHY[record]))


@pytest.mark.parametrize("record,key,value,named", MISSHAPEN, ids=[f"{r}-{n}" for r, _, _, n in MISSHAPEN])
def test_the_reader_refuses_a_field_of_the_wrong_shape_naming_it(tmp_path: Path, record: str, key: str, value: Any,
                                                                 named: str) -> None:
    from trainer.config.schema import ConfigError

    with pytest.raises(ConfigError) as refused:
        read(record, {**HEALTHY[record], key: value}, tmp_path)
    assert str(refused.value).startswith(f"{tmp_path / record}: field '{named}' has invalid value "), refused.value


@pytest.mark.parametrize("key,value,named", [("created", True, "created"), ("job_ids", ["12", {"x": 1}], "job_ids[1]"),
                                             ("task_jobs", [["4999998"], ["4999999", {"x": 1}]], "task_jobs[1][1]")])
@pytest.mark.parametrize("command", ["status", "cancel"])
def test_status_and_cancel_refuse_a_misshapen_run_record_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                     command: str, key: str, value: Any,
                                                                     named: str) -> None:
    """As users call them: exit 2 and one `error:` line naming run.json and the field, not an answer
    read from the healthy-looking first item (or from `true` taken for the number 1)."""
    make_run(tmp_path / "run", ("run.json", key, value))
    code, out, err = call([command, str(tmp_path / "run")], capsys)
    assert code == 2 and out == "", out
    assert err.count("\n") == 1 and err.startswith(f"error: {tmp_path / 'run' / 'run.json'}: field '{named}' has "
                                                   "invalid value "), err


@pytest.mark.parametrize("value,named", [("4711", "job_ids"), (["12", {"x": 1}], "job_ids[1]"), (True, "job_ids")])
@pytest.mark.parametrize("command", [["status"], ["cancel"], ["--after"]])
def test_a_misshapen_remote_record_is_one_error_in_status_cancel_and_after(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str],
        value: Any, named: str) -> None:
    """remote.json's `job_ids` as the string "4711" made `--after` depend on jobs 4, 7 and 1 (a string
    read as a list); a list of a good id and an object read as healthy. Each is one `error:` line
    naming the file and the field, exit 2, nothing queued, no connection made."""
    monkeypatch.setenv("DDP_SUBMIT_SSH", "/nonexistent/ssh")  # nothing may connect
    (tmp_path / "mylab.yaml").write_text("extends: slurm-cpu\nlogin: mylab\n")
    far = tmp_path / "runs" / "far"
    far.mkdir(parents=True)
    (far / "remote.json").write_text(json.dumps({**remote_json(), "job_ids": value}))
    argv = (["--profile", "mylab.yaml", "--dry-run", "--after", str(far)] if command == ["--after"]
            else [*command, str(far)])
    code, out, err = call(argv, capsys)
    assert code == 2 and "afterok" not in out, out
    assert err.count("\n") == 1 and err.startswith(f"error: {far / 'remote.json'}: field '{named}' has invalid "
                                                   "value "), err
    code, out, _ = call(["list"], capsys)  # listed offline all the same, as unreadable
    assert code == 0 and "far" in out
