"""Your function and its config from Python, with clumsy and hostile values (issue 43): what cannot run on the
ranks, or would arrive there changed, is refused before anything is queued, by an error naming the argument
(TypeError or ValueError in this process; SubmitError for what the engine refuses, its one `error:` line)."""

from __future__ import annotations

import datetime
import functools
import math
import threading
from pathlib import Path
from typing import Any

import pytest

from launcher.client import SubmitError, submit, sweep

LOCK = threading.Lock()


def train(ctx: Any, config: dict[str, Any]) -> dict[str, Any]:
    return {"ok": 1}


def generator(ctx: Any) -> Any:
    yield 1


async def coroutine(ctx: Any) -> dict[str, Any]:
    return {"ok": 1}


async def async_generator(ctx: Any) -> Any:
    yield 1


def three(ctx: Any, config: dict[str, Any], extra: int) -> dict[str, Any]:
    return {}


def keyword_only(ctx: Any, *, config: dict[str, Any]) -> dict[str, Any]:
    return {}


def reading_a_lock() -> Any:
    """A function of a notebook or a script's __main__ (pickled by value, not found by name) reading a global."""
    namespace = {"__name__": "__main__", "LOCK": LOCK}
    exec("def reads_a_lock(ctx):\n    with LOCK:\n        return {}\n", namespace)  # noqa: S102
    return namespace["reads_a_lock"]


def closing_over_a_lock() -> Any:
    held = threading.Lock()

    def inner(ctx: Any) -> dict[str, Any]:
        with held:
            return {}
    return inner


# (config, the exception, words of its message): refused in this process, before the engine starts.
CONFIGS = [
    ({1: 2}, TypeError, ["config: key 1", "non-empty strings"]),
    ({"a.b": 1}, ValueError, ["config: key 'a.b'", "'.' names a nested key"]),
    ({"a": {"b.c": 1}}, ValueError, ["config['a']: key 'b.c'"]),
    ({"": 1}, ValueError, ["config: key ''"]),
    ({"a": {1, 2}}, TypeError, ["config['a']={1, 2}", "set does not arrive"]),
    ({"x": b"raw"}, TypeError, ["config['x']=b'raw'", "bytes"]),
    ({"d": datetime.date(2026, 1, 1)}, TypeError, ["config['d']", "date does not arrive"]),
    ({"lr": math.nan}, ValueError, ["config['lr']=nan", "not a finite number"]),
    ({"lr": -math.inf}, ValueError, ["config['lr']=-inf"]),
    ({"betas": (0.9, 0.99)}, TypeError, ["config['betas']=(0.9, 0.99)", "a list arrives: give one"]),
    ({"layers": [1, {"w": object()}]}, TypeError, ["config['layers'][1]['w']", "object does not arrive"]),
]


@pytest.mark.parametrize("config, error, words", CONFIGS, ids=[repr(c[0])[:30] for c in CONFIGS])
def test_a_config_that_would_not_arrive_as_given_is_refused_naming_where(tmp_path: Path, config: Any, error: type,
                                                                          words: list[str]) -> None:
    with pytest.raises(error) as raised:
        submit(train, config=config, cwd=tmp_path)
    for word in words:
        assert word in str(raised.value), str(raised.value)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("kwargs, error, words", [
    ({"grid": {1: [0.1]}}, TypeError, ["grid: key 1"]),
    ({"grid": {"a..b": [1]}}, TypeError, ["grid: key 'a..b'"]),
    ({"grid": {"lr": [0.1, math.nan]}}, ValueError, ["grid['lr'][1]=nan"]),
    ({"configs": [{"lr": 0.1}, {"opt": {"betas": (1, 2)}}]}, TypeError, ["configs[1]['opt']['betas']"]),
    ({"configs": [{"a.b": 1}]}, ValueError, ["configs[0]: key 'a.b'"]),
])
def test_a_sweep_whose_points_would_not_arrive_as_given_is_refused(tmp_path: Path, kwargs: dict[str, Any],
                                                                  error: type, words: list[str]) -> None:
    with pytest.raises(error) as raised:
        sweep(train, cwd=tmp_path, **kwargs)
    for word in words:
        assert word in str(raised.value), str(raised.value)
    assert not (tmp_path / "runs").exists()


def test_values_that_arrive_as_given_are_taken(tmp_path: Path) -> None:
    """The other side: every JSON-shaped value, huge integers and unicode included, is not refused here."""
    from launcher.client.verbs import _carried

    _carried("config", {"lr": 1e20, "n": 2**70, "name": "café\n", "flags": [True, None, 0.5], "m": {"k": []}})


@pytest.mark.parametrize("function, words", [
    (closing_over_a_lock(), ["closing_over_a_lock.<locals>.inner", "the captured variable 'held'", "lock"]),
    (reading_a_lock(), ["function=__main__:reads_a_lock", "the global 'LOCK'"]),
    (functools.partial(three, extra=LOCK), ["partial(", "argument extra= of the partial"]),
])
def test_a_function_that_cannot_be_pickled_names_itself_and_what_it_carries(tmp_path: Path, function: Any,
                                                                            words: list[str]) -> None:
    with pytest.raises(TypeError) as raised:
        submit(function, cwd=tmp_path)
    for word in words:
        assert word in str(raised.value), str(raised.value)
    assert "make it inside the function" in str(raised.value)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("function, words", [
    (generator, ["a generator function (a def with yield)", "make it a plain `def`"]),
    (coroutine, ["a coroutine function (async def)"]),
    (async_generator, ["an async generator function"]),
    (three, ["must take (ctx) or (ctx, config)", "its signature is (ctx, config, extra)"]),
    (keyword_only, ["its signature is (ctx, *, config)"]),
])
def test_a_function_the_ranks_cannot_call_for_a_result_is_refused_before_queueing(tmp_path: Path, function: Any,
                                                                                 words: list[str]) -> None:
    """Defined at the top of this module, these travel by name: the engine itself checks them (in its child
    process) and refuses with one line; queued, they would fail on every rank (on SLURM after the queue wait)."""
    with pytest.raises(SubmitError) as raised:
        submit(function, cwd=tmp_path)
    said = str(raised.value)
    assert said.startswith("error: ") and "\n" not in said.strip(), said
    for word in words:
        assert word in said, said
    assert not (tmp_path / "runs").exists()
