"""The models a job can name. `lenet` is the seed program's network, layer for layer."""

from __future__ import annotations

import torch
from torch import nn

from trainer.config.job import Model


class LeNet(nn.Module):
    model_name: Model = "lenet"
    """The seed's LeNet for 3x32x32 images: Conv2d(3,6,5) … Linear(84,10)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class MLP(nn.Module):
    model_name: Model = "mlp"
    """A small network for the 8x8 digits (1 channel)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _bn(channels: int) -> nn.BatchNorm2d:
    # airbench's BatchNorm momentum 0.6 (PyTorch's convention: 0.4): running statistics that keep up
    # with weights that change fast in a ten-epoch run.
    return nn.BatchNorm2d(channels, momentum=0.4)


def _conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), _bn(c_out), nn.GELU())


class ConvGroup(nn.Module):
    """airbench's block: conv, pool, BN+GELU, conv, BN+GELU."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.pool = nn.MaxPool2d(2)
        self.norm1 = _bn(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.norm2 = _bn(c_out)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.norm1(self.pool(self.conv1(x))))
        return self.act(self.norm2(self.conv2(x)))


class SmallResNet(nn.Module):
    model_name: Model = "resnet-small"
    """A small airbench-style network (about 2M parameters): a 3x3 stem, three conv groups that
    halve the resolution (32 -> 16 -> 8 -> 4), a global max-pool and a linear head whose logits are
    scaled down (airbench: 1/9), which keeps early softmax outputs soft and lets a high learning
    rate work from the first step.

    BatchNorm stays per rank (no SyncBatchNorm): with 256+ images per rank the statistics are good
    and syncing them would add an all-reduce per layer per step. Runs in channels_last and bf16 on
    GPUs; on CPUs it works too, slowly (about 200 images/s on two cores), which is what the tests use.
    """

    def __init__(self, num_classes: int = 10, widths: tuple[int, int, int] = (64, 256, 256),
                 logit_scale: float = 1 / 9) -> None:
        super().__init__()
        self.stem = _conv_bn(3, 24)
        self.layers = nn.Sequential(ConvGroup(24, widths[0]), ConvGroup(widths[0], widths[1]),
                                    ConvGroup(widths[1], widths[2]))
        self.head = nn.Linear(widths[2], num_classes, bias=False)
        self.logit_scale = logit_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        x = torch.amax(x, dim=(2, 3))
        return self.head(x) * self.logit_scale


# By the name a job's `model` takes: each class says which of trainer.config.job.Model's it is (that Literal
# is the one list of names; a test holds every name to a class here).
MODELS: dict[str, type[nn.Module]] = {cls.model_name: cls for cls in (LeNet, MLP, SmallResNet)}


def build_model(name: str, num_classes: int = 10) -> nn.Module:
    return MODELS[name](num_classes)
