"""Handing the function itself to launcher.client (issue 30), as a script calls it: what travels by name and
what is pickled by value; every refusal before anything is queued (one SubmitError line, no run folder,
nothing queued, on a local and on a SLURM profile); `when=`/`after=` checked where they enter; and a
debug profile's run in the caller's own process, where `breakpoint()` in the function stops."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from launcher.client import SubmitError, submit, sweep
from launcher.client.shipping import reference
from tests.helpers import ROOT


def by_name(ctx: Any) -> dict[str, Any]:
    """A function at the top of an importable module: it travels by name."""
    return {"rank": ctx.rank}


def three_arguments(a: Any, b: Any, c: Any) -> None:
    """Importable by name, with a signature no rank can call."""


@dataclass
class Hyper:
    lr: float = 0.1


def typed(ctx: Any, config: Hyper, scale: float = 1.0) -> dict[str, Any]:
    return {"lr": config.lr * scale}


def test_what_travels_by_name_and_what_by_value(tmp_path: Path) -> None:
    pythonpath = str(ROOT)
    assert reference(by_name, ROOT, pythonpath) == "tests.test_python_functions:by_name"
    assert reference(by_name, tmp_path, pythonpath) == "tests.test_python_functions:by_name"  # (via PYTHONPATH)

    def closure(ctx: Any) -> None:
        return None

    assert reference(closure, ROOT, pythonpath) is None  # <locals>
    assert reference(lambda ctx: None, ROOT, pythonpath) is None
    assert reference(functools.partial(typed, scale=2.0), ROOT, pythonpath) is None
    # A module found only because this process put its folder on sys.path: the ranks would not find it.
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "outside_mod.py").write_text("def train(ctx):\n    return {}\n")
    sys.path.insert(0, str(tmp_path / "elsewhere"))
    try:
        import outside_mod  # type: ignore[import-not-found]

        assert reference(outside_mod.train, ROOT, pythonpath) is None
        assert reference(outside_mod.train, tmp_path / "elsewhere", pythonpath) == "outside_mod:train"
    finally:
        sys.path.remove(str(tmp_path / "elsewhere"))
        sys.modules.pop("outside_mod", None)


class NotAFunction:
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx


class Callable:
    def __call__(self, ctx: Any) -> dict[str, Any]:
        return {}


def cases() -> list[Any]:
    big = b"x" * 3_000_000

    def too_large(ctx: Any) -> dict[str, Any]:
        return {"n": len(big)}

    def no_ctx() -> None:
        return None

    return [
        pytest.param(three_arguments, {}, "key 'entrypoint' has invalid value 'tests.test_python_functions:three_arguments'; "
                     "the function must take (ctx) or (ctx, config), its signature is (a, b, c)", id="signature, by name"),
        pytest.param(no_ctx, {}, "key 'function' has invalid value 'tests.test_python_functions:cases.<locals>.no_ctx'; "
                     "the function must take (ctx) or (ctx, config), its signature is ()", id="signature, by value"),
        pytest.param(lambda a, b, c: None, {}, "the function must take (ctx) or (ctx, config), its signature is (a, b, c)",
                     id="signature, a lambda"),
        pytest.param(NotAFunction, {}, "names a class, not a function", id="a class"),
        pytest.param(Callable(), {}, "an object of type Callable, not a function", id="a callable object"),
        pytest.param(too_large, {"sets": ["profile.max_pickle_mb=1"]},
                     "pickled by value it is 2.9 MB, over max_pickle_mb (1 MB,", id="captured state too large"),
        pytest.param(typed, {"config": {"lrr": 0.2}}, "unknown key 'config.lrr' (did you mean 'lr'?)",
                     id="config its dataclass refuses"),
        pytest.param(functools.partial(typed, scale=2.0), {"config": {"lr": "high"}},
                     "key 'config.lr' has invalid value 'high'; expected a number", id="a partial's config"),
    ]


@pytest.mark.parametrize("profile", ["local", "dev-cluster"])
@pytest.mark.parametrize("function, extra, message", cases())
def test_a_function_no_rank_could_call_is_refused_before_anything_is_queued(
        tmp_path: Path, profile: str, function: Any, extra: dict[str, Any], message: str) -> None:
    with pytest.raises(SubmitError) as refused:
        submit(function, profile=profile, cwd=tmp_path, **extra)
    said = str(refused.value)
    assert said.startswith("error: ") and "\n" not in said and message in said, said
    assert not (tmp_path / "runs").exists(), "a refused submission left a run folder"


def test_the_size_refusal_names_what_the_function_captured(tmp_path: Path) -> None:
    weights = list(range(400_000))
    labels = b"y" * 200_000

    def train(ctx: Any) -> dict[str, Any]:
        return {"n": len(weights) + len(labels)}

    with pytest.raises(SubmitError) as refused:
        submit(train, cwd=tmp_path, sets=["profile.max_pickle_mb=0.5"])
    said = str(refused.value)
    assert "what it captures, largest first: weights 1.8 MB, labels 0.2 MB" in said, said
    assert "raise profile.max_pickle_mb" in said and not (tmp_path / "runs").exists()


def test_after_and_when_are_checked_where_they_enter(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"when='maybe': expected 'ok' .*'any' .*'notok'"):
        submit(by_name, cwd=tmp_path, after=[tmp_path], when="maybe")
    with pytest.raises(ValueError, match="the condition is one of 'ok', 'any', 'notok'"):
        submit(by_name, cwd=tmp_path, after=[(tmp_path, "failed")])
    with pytest.raises(TypeError, match="after: 5: expected a Run or a run folder"):
        submit(by_name, cwd=tmp_path, after=[5])
    with pytest.raises(SubmitError, match="dependencies need a slurm profile, not 'local'"):
        submit(by_name, cwd=tmp_path, after=[tmp_path])
    with pytest.raises(TypeError, match="give a profile as profile='dev-cluster'"):
        submit("dev-cluster", entrypoint="tests.userpkg.tiny:train")
    with pytest.raises(SubmitError, match=r"the function must take \(ctx\) or \(ctx, config\), its signature is \(\)"):
        submit(entrypoint=lambda: None, cwd=tmp_path)  # the function as entrypoint=, as well
    with pytest.raises(ValueError, match="needs configs=.* and/or grid="):
        sweep(by_name, cwd=tmp_path)
    # A debug run is this process's own: it runs in its working directory, which is not changed for it.
    with pytest.raises(ValueError, match=r"cwd='.*': a debug profile runs in this process .* os.chdir\(\) there first"):
        submit(by_name, profile="debug", cwd=tmp_path)
    assert not (tmp_path / "runs").exists()


DEBUG_SCRIPT = """
import os, sys
from launcher.client import submit

sys.replaced_by = []  # who emptied this process's environment (to put another in place), by module
clear = os.environ.clear  # (on sys: the function below is pickled by value, its globals copied)
def watched_clear():
    sys.replaced_by.append(sys._getframe(1).f_globals["__name__"].split(".")[0])
    clear()
os.environ.clear = watched_clear

def train(ctx, config):
    x = config["x"] + ctx.rank
    print("argv", sys.argv, "stdin is mine", sys.stdin is sys.__stdin__, flush=True)
    print("run's environment", os.environ.get("PYTHONSAFEPATH"), "replaced by", sys.replaced_by, flush=True)
    breakpoint()
    return {"x": x}

run = submit(train, profile="debug", config={"x": 41})
print("result", run.result()["x"], "state", run.state())
print("after", os.environ.get("PYTHONSAFEPATH"), flush=True)
"""


def test_a_debug_profile_runs_the_function_here_where_breakpoint_stops(tmp_path: Path) -> None:
    """The debug profile's point: pdb, at the function's breakpoint(), reads this process's standard input."""
    (tmp_path / "debugging.py").write_text(DEBUG_SCRIPT)
    (tmp_path / "tmp").mkdir()
    done = subprocess.run([sys.executable, "debugging.py"], cwd=tmp_path, input="p x + 1\nx = 7\nc\n", text=True,
                          capture_output=True, timeout=300,
                          env={**{k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}, "PYTHONPATH": str(ROOT),
                               "TMPDIR": str(tmp_path / "tmp")})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "(Pdb) 42" in done.stdout and '-> return {"x": x}' in done.stdout  # stopped at the line, in the function
    assert "result 7 state completed" in done.stdout  # what was changed at the prompt is what it returned
    # Nothing of this process was swapped to run the command line in it: its arguments and standard input are its own.
    assert "argv ['debugging.py'] stdin is mine True" in done.stdout, done.stdout[-3000:]
    # The run's environment was given to submitit's debug job as data, which put it in place for the run only:
    # nothing of ours replaced this process's environment around the submission.
    assert "run's environment 1 replaced by ['submitit']" in done.stdout, done.stdout[-3000:]
    assert "after None" in done.stdout
    # The job and the pickle went through pipes: nothing is left in the temp folder (torch's own caches aside).
    assert [p.name for p in (tmp_path / "tmp").iterdir() if not p.name.startswith("torchinductor_")] == []


def test_a_pickled_function_travels_inside_the_submission_shipped_over_ssh(tmp_path: Path) -> None:
    """Plan once (launcher.request.wire): the pickle's bytes go inside the submission's JSON and come back
    the same bytes; text there that is not base64 is one error naming the key, as any other field."""
    from launcher.config.profile import Profile
    from launcher.config.resolve import point
    from launcher.request import wire
    from launcher.request.submission import build
    from trainer.config.job import JobConfig
    from trainer.config.schema import ConfigError

    blob = bytes(range(256)) * 3  # every byte value, none of it text
    profile = Profile(runs_dir=str(tmp_path / "runs"))
    job = JobConfig(name="fn", function="__main__:train", project_root=str(tmp_path))
    sub = build(profile, [point(profile, 0, job)], tmp_path / "runs" / "r", False, function=blob)
    text = wire.dumps(sub, ["--job", "-"], "profile 'local'")
    back, argv, source = wire.loads(text, "sub.json")
    assert back.function == blob and back.tasks[0].job.function == "__main__:train" and argv == ["--job", "-"]
    assert wire.loads(wire.dumps(build(profile, [point(profile, 0, job)], tmp_path / "r", False), [], ""),
                      "sub.json")[0].function is None
    data = json.loads(text)
    data["submission"]["function"] = "not base64!"
    with pytest.raises(ConfigError, match=r"sub.json: key 'submission.function' has invalid value .*base64 text"):
        wire.loads(json.dumps(data), "sub.json")
