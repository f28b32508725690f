"""Models for the tests of state and packed weights, importable as `tests.integration.stateful_models:NAME`
(the form `aoti-toolchain export package.module:factory` takes). Each factory returns (module, inputs),
seeded: every call gives the same model in the same state."""

from __future__ import annotations

from typing import Any


def buffer_matmul() -> tuple[Any, tuple[Any, ...]]:
    """A Buffer the model mutates in place and that is the B operand of a GEMM: `mem` feeds `x @ mem`,
    then grows by x^T x / 10. A runtime that packed `mem` like a weight would keep using its first value."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class BufferMatmul(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)
            self.register_buffer("mem", torch.randn(8, 8) * 0.5)

        def forward(self, x):
            y = torch.mm(x, self.mem)
            self.mem.add_(torch.mm(x.t(), x) * 0.1)
            return self.proj(torch.relu(y))

    return BufferMatmul().eval(), (torch.randn(4, 8),)


def folded_weight() -> tuple[Any, tuple[Any, ...]]:
    """A GEMM whose weight is computed from two parameters (`w * gain`): exported with runtime constant
    folding, the plugin computes it into a folded constant of its own."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class FoldedWeight(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(16, 8))
            self.gain = nn.Parameter(torch.rand(16, 1) + 0.5)

        def forward(self, x):
            return torch.relu(torch.mm(x, (self.w * self.gain).t())) + 1.0

    return FoldedWeight().eval(), (torch.randn(4, 8),)
