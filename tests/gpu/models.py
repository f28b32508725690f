"""The models the GPU checks export with torch on the GPU machine (torch imported lazily)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolchain import examples


def transformer_block() -> tuple[Any, tuple[Any, ...]]:
    """Pre-LN block with hand-written attention (exported with pattern_matcher off, so inductor keeps
    bmm + softmax instead of an SDPA kernel this runtime has no shim for)."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, d: int = 64, heads: int = 4) -> None:
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            att = torch.softmax(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(y)
            return x + self.mlp(self.ln2(x))

    return Block().eval(), (torch.randn(2, 16, 64),)


def small_mlp() -> tuple[Any, tuple[Any, ...]]:
    """FACTS.md's launch-bound reference: 2x Linear(64), batch 8."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).eval(), (torch.randn(8, 64),)


def wide_mlp() -> tuple[Any, tuple[Any, ...]]:
    """FACTS.md's larger reference: 8x Linear(2048), batch 32 (134 MB of float32 weights)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    layers: list[Any] = []
    for _ in range(8):
        layers += [nn.Linear(2048, 2048), nn.ReLU()]
    return nn.Sequential(*layers[:-1]).eval(), (torch.randn(32, 2048),)


# name -> (factory, weights mode, extra inductor configs)
MODELS: dict[str, tuple[Callable[[], tuple[Any, tuple[Any, ...]]], str, dict[str, Any]]] = {
    "mlp": (examples.mlp, "embedded", {}),
    "mlp_blob": (examples.mlp, "blob", {}),
    "convnet": (examples.convnet, "embedded", {}),
    "convnet_channels_last": (examples.convnet_channels_last, "embedded", {}),
    "transformer": (transformer_block, "embedded", {"pattern_matcher": False}),
    "mutated_buffer": (examples.mutated_buffer, "embedded", {}),
    "small_mlp": (small_mlp, "embedded", {}),
    "wide_mlp_blob": (wide_mlp, "blob", {}),
}
CHECKED = ["mlp", "mlp_blob", "convnet", "convnet_channels_last", "transformer", "mutated_buffer"]
MUTATED_CALLS = 4  # calls compared one by one for the stateful model
REPLAY_CALLS = 6  # input variants (each with its eager reference) for checking graph replays call by call
