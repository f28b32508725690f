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
    nn: Any = torch.nn
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    return model.eval(), (torch.randn(4, 16),)


def convnet(channels_last: bool = False) -> tuple[Any, tuple[Any, ...]]:
    torch = _torch()
    nn: Any = torch.nn
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
    nn: Any = torch.nn

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
    nn: Any = torch.nn

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
    nn: Any = torch.nn

    class Counter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("state", torch.zeros(4))

        def forward(self, x):
            self.state.add_(x.sum(dim=0))
            return self.lin(x) + self.state

    return Counter().eval(), (torch.randn(2, 4),)


def attention() -> tuple[Any, tuple[Any, ...]]:
    """A pre-norm transformer block (dim 64, 4 heads, sequence 32): inductor fuses its hand-written
    matmul-softmax-matmul into the flash-attention op, which a link_libtorch=False plugin imports."""
    torch = _torch()
    nn: Any = torch.nn

    class Block(nn.Module):
        def __init__(self, dim: int = 64, heads: int = 4) -> None:
            super().__init__()
            self.heads = heads
            self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
            y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
            x = x + self.proj(y)
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x))))

    return Block().eval(), (torch.randn(2, 32, 64),)


def convnet_bench() -> tuple[Any, tuple[Any, ...]]:
    """A small image classifier (3x32x32, conv-bn-relu x3, pooling, linear), channels-last as torch
    recommends on CPU: the benchmark's conv net."""
    torch = _torch()
    nn: Any = torch.nn

    def block(cin: int, cout: int, stride: int) -> list[Any]:
        return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]

    model = nn.Sequential(*block(3, 16, 1), *block(16, 32, 2), *block(32, 64, 2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).eval()
    model = model.to(memory_format=torch.channels_last)
    return model, (torch.randn(4, 3, 32, 32).to(memory_format=torch.channels_last),)


def mlp_bench() -> tuple[Any, tuple[Any, ...]]:
    """The benchmark's MLP: 256 -> 512 -> 512 -> 10 with GELU, batch 32."""
    torch = _torch()
    nn: Any = torch.nn
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))
    return model.eval(), (torch.randn(32, 256),)


EXAMPLES: dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]] = {
    "mlp": mlp,
    "convnet": convnet,
    "convnet_channels_last": convnet_channels_last,
    "embedding": embedding,
    "two_outputs": two_outputs,
    "mutated_buffer": mutated_buffer,
    "attention": attention,
    "convnet_bench": convnet_bench,
    "mlp_bench": mlp_bench,
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
    nn: Any = torch.nn

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
    nn: Any = torch.nn

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
