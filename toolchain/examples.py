"""Built-in example models (torch), used by `aoti-toolchain demo`, `export example:NAME`, tests and
benchmarks. Each factory returns (module, example_inputs); seeded, so every call gives the same model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolchain.errors import InputError


def _torch():
    import torch

    torch.manual_seed(0)
    return torch


def mlp() -> tuple[Any, tuple[Any, ...]]:
    torch = _torch()
    nn = torch.nn
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    return model.eval(), (torch.randn(4, 16),)


def convnet(channels_last: bool = False) -> tuple[Any, tuple[Any, ...]]:
    torch = _torch()
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 4, 3, stride=2, groups=2), nn.ReLU(),
    ).eval()
    with torch.no_grad():  # non-trivial BatchNorm statistics
        bn = model[1]
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 12, 12)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    return model, (x,)


def convnet_channels_last() -> tuple[Any, tuple[Any, ...]]:
    return convnet(channels_last=True)


def embedding() -> tuple[Any, tuple[Any, ...]]:
    torch = _torch()
    nn = torch.nn

    class EmbedBag(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(50, 8)
            self.proj = nn.Linear(8, 4)

        def forward(self, idx):
            return self.proj(self.emb(idx).mean(dim=1))

    return EmbedBag().eval(), (torch.randint(0, 50, (3, 5), dtype=torch.int64),)


def two_outputs() -> tuple[Any, tuple[Any, ...]]:
    torch = _torch()
    nn = torch.nn

    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.trunk = nn.Linear(10, 16)
            self.a = nn.Linear(16, 3)
            self.b = nn.Linear(16, 5)

        def forward(self, x, y):
            h = torch.tanh(self.trunk(x)) + y
            return self.a(h), torch.sigmoid(self.b(h))

    return TwoHeads().eval(), (torch.randn(6, 10), torch.randn(6, 16))


def mutated_buffer() -> tuple[Any, tuple[Any, ...]]:
    torch = _torch()
    nn = torch.nn

    class Counter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("state", torch.zeros(4))

        def forward(self, x):
            self.state.add_(x.sum(dim=0))
            return self.lin(x) + self.state

    return Counter().eval(), (torch.randn(2, 4),)


EXAMPLES: dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]] = {
    "mlp": mlp,
    "convnet": convnet,
    "convnet_channels_last": convnet_channels_last,
    "embedding": embedding,
    "two_outputs": two_outputs,
    "mutated_buffer": mutated_buffer,
}


def get(name: str) -> tuple[Any, tuple[Any, ...]]:
    try:
        factory = EXAMPLES[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, EXAMPLES, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        msg = f"no built-in example {name!r}{hint}; choose one of {', '.join(EXAMPLES)}"
        raise InputError(msg) from None
    return factory()


def two_methods(width: int = 32) -> tuple[Any, tuple[Any, ...]]:
    """A module with `forward` and `embed` sharing `fc1`/`fc2` (export both with export.export_methods)."""
    torch = _torch()
    nn = torch.nn

    class TwoMethods(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(width, width)
            self.fc2 = nn.Linear(width, width)
            self.head = nn.Linear(width, 8)

        def embed(self, x):
            return torch.relu(self.fc2(torch.relu(self.fc1(x))))

        def forward(self, x):
            return self.head(self.embed(x))

    return TwoMethods().eval(), (torch.randn(4, width),)


METHODS: dict[str, tuple[str, ...]] = {"two_methods": ("forward", "embed")}


def stateful_methods() -> tuple[Any, tuple[Any, ...]]:
    """`forward` accumulates into the buffer `total`; `peek` reads it: one state seen by both methods."""
    torch = _torch()
    nn = torch.nn

    class Accumulator(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("total", torch.zeros(4))

        def forward(self, x):
            self.total.add_(x.sum(dim=0))
            return self.lin(x) + self.total

        def peek(self, x):
            return self.lin(x) - self.total

    return Accumulator().eval(), (torch.randn(2, 4),)


METHODS["stateful_methods"] = ("forward", "peek")
