"""Property tests of the config loader and the `--set` parser (hypothesis).

Whatever a job file, a profile file or a `--set` string holds, the submitter ends in one of two
ways: a valid configuration (here: a dry run, exit 0), or exit 2 with exactly one `error:` line.
Never a traceback, another exit status, or a second line. The command line is called in-process
(`launcher.commands.main.main`, what submit.py runs) so that hundreds of documents take seconds.
"""

from __future__ import annotations

import contextlib
import io
import math
import tempfile
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from launcher.commands.main import main
from launcher.config.profile import Profile
from trainer.config.job import JobConfig

JOB_KEYS = [f.name for f in fields(JobConfig)]
PROFILE_KEYS = [f.name for f in fields(Profile)]
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70), st.integers(min_value=-3, max_value=70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "sgd", "adamw", "lenet", "mlp", "digits", "cifar10", "local", "debug", "slurm", "USR2",
                     "1:30:00", "1e-3", ".inf", ".nan", "0x1f", "~", "null", "yes", "on", "*a", "&a", "{", "[",
                     "0:0", "12,40", "a\nb", "$(touch x)", "--nodes=3"]),
    st.text(max_size=12),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


def typed(cls: type, name: str) -> st.SearchStrategy[Any]:
    """A value of the field's own type (often valid), so that examples also reach the later checks."""
    hint = typing.get_type_hints(cls)[name]
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Literal:
        return st.sampled_from(args)
    if hint is bool:
        return st.booleans()
    if hint is int or int in args:
        small = st.integers(min_value=1, max_value=3)
        return small | small | st.integers(min_value=-1, max_value=2**40)
    if hint is float or float in args:
        usual = st.floats(min_value=0.001, max_value=0.9)
        return usual | usual | st.floats()
    if typing.get_origin(hint) is dict:
        return st.dictionaries(st.sampled_from(["A", "B_2", "mail-type", "nodes", "bad key"]), scalars, max_size=2)
    if typing.get_origin(hint) is list:
        return st.lists(st.sampled_from(["echo hi", "echo 'x", "module load a"]), max_size=2)
    return scalars


def documents(cls: type, parents: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Mappings of the class's keys, mostly with values of the right type, sometimes anything (or an
    unknown key), sometimes extending a shipped file."""
    keys = [f.name for f in fields(cls)]
    item = st.sampled_from(keys).flatmap(
        lambda k: st.tuples(st.just(k), typed(cls, k) | typed(cls, k) | typed(cls, k) | values))
    odd = st.tuples(st.text(max_size=8), values)
    extends = st.one_of(st.just({}), st.sampled_from(parents).map(lambda p: {"extends": p}))
    return st.tuples(extends, st.lists(item | item | item | odd, max_size=4)).map(lambda t: {**t[0], **dict(t[1])})


# Raw text that looks like YAML: keys, colons, flow collections, anchors, tags, tabs, odd bytes.
raw_yaml = st.lists(st.sampled_from(list("abepochslrn_:-{}[],&*!|>#'\"\t\n .019ex\\%@`~?\u00e9\x1e")
                                    + ["extends: digits\n", "epochs: ", "lr: ", "executor: ", "<<: ", "!!binary ",
                                       "&a ", "*a", "\n  - "]), max_size=40).map("".join)

override = st.builds(
    lambda scope, dot, name, sep, value: f"{scope}{dot}{name}{sep}{value}",
    st.sampled_from(["job", "profile", "jobs", ""]), st.sampled_from([".", "", ".."]),
    st.one_of(st.sampled_from(JOB_KEYS + PROFILE_KEYS + ["env.A", "sbatch_extra.nodes", "sbatch_extra.comment",
                                                         "extra.k", "env", "lr.x", "name.x"]),
              st.text(max_size=10)),
    st.sampled_from(["=", "", "=="]),
    st.one_of(scalars.map(lambda v: v if isinstance(v, str) else yaml.safe_dump(v).strip().removesuffix("...")),
              st.text(max_size=15)),
)


def run(argv: list[str]) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse
            code = int(exit_.code or 0)
    return code, err.getvalue()


def assert_valid_or_one_error(code: int, stderr: str) -> None:
    event(f"exit {code}")  # --hypothesis-show-statistics: how many examples were valid configs
    assert "Traceback" not in stderr
    if code == 0:
        return
    assert code == 2, stderr
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("note: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr


def dump(data: Any) -> str:
    try:
        return yaml.safe_dump(data, allow_unicode=True)
    except (ValueError, yaml.YAMLError):  # e.g. a float PyYAML cannot write: try its repr
        return repr(data)


@SETTINGS
@given(job=documents(JobConfig, ["digits", "digits", "digits-lr-sweep", "nope"]),
       profile=documents(Profile, ["local", "local", "debug", "nope"]))
def test_random_job_and_profile_documents(job: dict[str, Any], profile: dict[str, Any]) -> None:
    # A profile that asks for the SLURM executor would query the controller on every example.
    if profile.get("executor") == "slurm":
        profile["executor"] = "local"
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "j.yaml").write_text(dump(job))
        Path(tmp, "p.yaml").write_text(dump(profile))
        code, stderr = run(["--dry-run", "--job", str(Path(tmp, "j.yaml")), "--profile", str(Path(tmp, "p.yaml")),
                            "--set", f"profile.runs_dir={tmp}/runs"])
        assert_valid_or_one_error(code, stderr)
        assert not Path(tmp, "runs").exists()


@SETTINGS
@given(job=raw_yaml, profile=raw_yaml)
def test_random_yaml_text(job: str, profile: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "j.yaml").write_text(job)
        Path(tmp, "p.yaml").write_text(profile.replace("slurm", "local"))
        code, stderr = run(["--dry-run", "--job", str(Path(tmp, "j.yaml")), "--profile", str(Path(tmp, "p.yaml")),
                            "--set", f"profile.runs_dir={tmp}/runs"])
        assert_valid_or_one_error(code, stderr)


@SETTINGS
@given(sets=st.lists(override, min_size=1, max_size=4))
def test_random_overrides(sets: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["--dry-run", "--set", f"profile.runs_dir={tmp}/runs"]
        for item in sets:
            argv += ["--set", item.replace("slurm", "local")]
        code, stderr = run(argv)
        assert_valid_or_one_error(code, stderr)
        assert not Path(tmp, "runs").exists()


@SETTINGS
@given(value=st.floats(allow_nan=True, allow_infinity=True), key=st.sampled_from(
    ["job.lr", "job.weight_decay", "job.momentum", "job.label_smoothing", "profile.mem_per_task_gb"]))
def test_accepted_floats_are_finite(value: float, key: str) -> None:
    """A float either loads as a finite number or is refused: .inf and .nan never reach a run."""
    text = {math.inf: ".inf", -math.inf: "-.inf"}.get(value, ".nan" if math.isnan(value) else repr(value))
    code, stderr = run(["--dry-run", "--json", "--set", f"{key}={text}"])
    assert_valid_or_one_error(code, stderr)
    if not math.isfinite(value):
        assert code == 2 and "a finite number" in stderr
