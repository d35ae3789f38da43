"""The config types users write (issue 19), checked in-process as the submitter checks them before queueing
(trainer.runners.entrypoints.prepare on a `config:` mapping read as a job file reads it): nested dataclasses,
Path, Enum, tuples, typed dicts and lists, Optional, Literal and unions arrive as their types; a bad value or
an unknown key at any depth is one error line with the dotted key; cattrs is not loaded for a built-in job;
and a second init_process_group inside the function is a no-op for the job's world."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import pytest
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import ROOT, SUBMIT
from tests.thirdparty.submitit_style import Activation, Model, NestedConfig
from trainer.config import yamlio
from trainer.config.job import JobConfig
from trainer.config.overrides import parse
from trainer.config.schema import ConfigError
from trainer.distributed import usergroup
from trainer.runners import entrypoints, usertypes

SPEC = "tests.thirdparty.submitit_style:main"
SOURCE = "jobs/mine.yaml"

GOOD = """
model: {depth: 2, widths: [8, 4], activation: tanh}
optim: {name: adam, lr: 1e-3, betas: [0.8, 0.9]}
data_dir: data/train
loss_weights: {ce: 2, aux: 0.5}
warm_start: null
"""


def prepared(config: dict) -> NestedConfig:
    function, count, value = entrypoints.prepare(SPEC, config, "", SOURCE)
    assert count == 2
    return value


def error_of(config: dict) -> str:
    with pytest.raises(ConfigError) as err:
        prepared(config)
    line = str(err.value)
    assert "\n" not in line
    return line


def test_every_type_arrives_as_its_type_not_as_text() -> None:
    config = prepared(yamlio.loads(GOOD))  # read as a job file is read (YAML 1.2: 1e-3 is a number)
    assert config.model == Model(depth=2, widths=(8, 4), activation=Activation.TANH)
    assert config.optim.name == "adam" and config.optim.lr == 1e-3 and config.optim.betas == (0.8, 0.9)
    assert config.data_dir == Path("data/train") and config.warm_start is None
    assert config.loss_weights == {"ce": 2.0, "aux": 0.5}
    assert all(type(v) is float for v in config.loss_weights.values())  # were the text "2" and "0.5"


BAD = {
    "unknown nested key": ({"model": {"depht": 1}},
                           "jobs/mine.yaml: unknown key 'config.model.depht' (did you mean 'depth'?); valid keys: "
                           "activation, depth, widths"),
    "unknown top key": ({"modle": {}}, "unknown key 'config.modle' (did you mean 'model'?)"),
    "text for an int": ({"model": {"depth": "2"}},
                        "key 'config.model.depth' has invalid value '2'; expected an integer"),
    "float for an int": ({"model": {"depth": 2.5}}, "key 'config.model.depth' has invalid value 2.5"),
    "list item": ({"model": {"depth": 2, "widths": [8, "x"]}},
                  "key 'config.model.widths[1]' has invalid value 'x'; expected an integer"),
    "text for a list": ({"model": {"widths": "88"}}, "key 'config.model.widths' has invalid value '88'"),
    "fixed tuple length": ({"optim": {"betas": [0.9]}},
                           "key 'config.optim.betas' has invalid value [0.9]; expected a list of 2 items"),
    "enum": ({"model": {"activation": "gelu"}},
             "key 'config.model.activation' has invalid value 'gelu'; expected one of 'relu', 'tanh'"),
    "literal": ({"optim": {"name": "rmsprop"}},
                "key 'config.optim.name' has invalid value 'rmsprop'; expected one of 'sgd', 'adam'"),
    "dict value": ({"loss_weights": {"ce": "high"}},
                   "key 'config.loss_weights.ce' has invalid value 'high'; expected a number"),
    "path": ({"data_dir": 3}, "key 'config.data_dir' has invalid value 3; expected a path"),
    "optional path": ({"warm_start": [1]}, "key 'config.warm_start' has invalid value [1]; expected a path"),
    "scalar for a dataclass": ({"optim": 0.1}, "key 'config.optim' has invalid value 0.1; expected a mapping"),
    "infinite": ({"optim": {"lr": float("inf")}}, "expected a finite number"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_value_or_key_at_any_depth_is_one_line_naming_the_dotted_key(case: str) -> None:
    config, expected = BAD[case]
    assert expected in error_of(config)


def test_a_nested_dataclasses_own_check_is_one_line_naming_its_key() -> None:
    with pytest.raises(ConfigError) as err:
        prepared({"model": {"depth": 3, "widths": [8]}})
    assert str(err.value).startswith("jobs/mine.yaml: key 'config.model' has invalid value {'depth': 3, 'widths': "
                                      "[8]}; Model rejected it: ValueError: widths has 1 entries for depth 3")
    assert "submitit_style.py" in err.value.details and "cattrs" not in err.value.details  # the user's frames only


@dataclass
class Small:
    n: int = 0


@dataclass
class Other:
    m: int = 0


@dataclass
class Unions:
    seed: Union[int, str] = 0
    block: Optional[Small] = None
    either: Union[Small, Other, None] = None
    sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)


def test_unions_take_the_member_the_value_decides_and_refuse_an_ambiguous_mapping() -> None:
    built = usertypes.build(Unions, {"seed": "abc", "block": {"n": 2}, "either": {"m": 1}, "sizes": {"a": [1, 2]}},
                            SOURCE)
    assert built == Unions(seed="abc", block=Small(2), either=Other(1), sizes={"a": (1, 2)})
    with pytest.raises(ConfigError, match=r"unknown key 'config.block.x'; valid keys: n"):
        usertypes.build(Unions, {"block": {"x": 1}}, SOURCE)
    with pytest.raises(ConfigError, match=r"key 'config.either' has invalid value \{\}; expected a mapping that "
                                          r"fits only one of Small, Other"):
        usertypes.build(Unions, {"either": {}}, SOURCE)


NAMES = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)


@settings(max_examples=25, deadline=None)
@given(depth=st.integers(1, 4), bad=st.one_of(st.text(max_size=5), st.floats(allow_nan=False), st.booleans(),
                                              st.lists(st.integers(), max_size=2)))
def test_any_non_integer_depth_is_refused_and_any_integer_is_kept(depth: int, bad: object) -> None:
    assert prepared({"model": {"depth": depth, "widths": [4] * depth}}).model.depth == depth
    assert "key 'config.model.depth' has invalid value" in error_of({"model": {"depth": bad}})


@settings(max_examples=25, deadline=None)
@given(where=st.sampled_from([(), ("model",), ("optim",)]), name=NAMES)
def test_any_unknown_key_at_any_depth_is_refused_by_its_dotted_name(where: tuple[str, ...], name: str) -> None:
    known = {(): NestedConfig, ("model",): Model, ("optim",): type(NestedConfig().optim)}[where]
    if name in known.__dataclass_fields__:
        return
    config: dict = {name: 1}
    for part in reversed(where):
        config = {part: config}
    assert f"unknown key 'config.{'.'.join((*where, name))}'" in error_of(config)


def test_set_reaches_into_nested_configs_with_lists() -> None:
    sets = parse(["job.config.model.depth=2", "job.config.model.widths=[8, 4]", "job.config.optim.name=adam"],
                 {"job": JobConfig})
    assert prepared(sets["job"]["config"]).model == Model(depth=2, widths=(8, 4))


def test_the_submitters_start_up_for_a_built_in_job_does_not_load_cattrs() -> None:
    proc = subprocess.run([sys.executable, "-X", "importtime", SUBMIT, "--dry-run"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| launcher.commands.main" in proc.stderr  # importtime's report is there
    assert "cattrs" not in proc.stderr


@pytest.fixture()
def one_rank_group(tmp_path: Path):  # noqa: ANN201 - the job's process group as the tool forms it (world 1)
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=30))
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_a_second_init_process_group_for_the_same_world_is_a_no_op_with_one_log_line(one_rank_group: None,
                                                                                     monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    original = dist.init_process_group
    lines: list[str] = []
    with usergroup.kept_for_the_tool(lines.append):
        dist.init_process_group(backend="gloo")  # as submitit/torchrun code writes it (env://)
        dist.init_process_group("gloo", init_method="env://", world_size=1, rank=0)
        dist.destroy_process_group()  # deferred: the tool's teardown still has its group
        assert dist.is_initialized() and dist.get_world_size() == 1
        with pytest.raises(usergroup.IncompatibleGroupError, match=r"world_size=2.*world size 1, rank 0"):
            dist.init_process_group("gloo", world_size=2, rank=0)
        with pytest.raises(usergroup.IncompatibleGroupError, match=r"backend='nccl'"):
            dist.init_process_group(backend="nccl")
    assert len(lines) == 3 and "already in the job's process group (world size 1" in lines[0], lines
    assert dist.init_process_group is original and dist.distributed_c10d.init_process_group is original
    with pytest.raises((ValueError, RuntimeError), match="twice"):  # torch's own again, outside the function
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
