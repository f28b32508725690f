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


def causal_decoder() -> tuple[Any, tuple[Any, ...]]:
    """Decoder block with masked attention through F.scaled_dot_product_attention: a bool mask (causal and
    key padding) and then is_causal. On CUDA float32 both run torch's efficient-attention kernel, which
    the plugin calls as a fallback (aoti_torch_cuda__scaled_dot_product_efficient_attention)."""
    import torch
    from torch import nn
    from torch.nn import functional as F  # noqa: N812

    torch.manual_seed(0)

    class Dec(nn.Module):
        def __init__(self, d: int = 64, heads: int = 4, t: int = 20) -> None:
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv1, self.qkv2 = nn.Linear(d, 3 * d), nn.Linear(d, 3 * d)
            self.proj1, self.proj2 = nn.Linear(d, d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
            keep = torch.ones(2, t, dtype=torch.bool)
            keep[1, 15:] = False  # the second sequence is padded after 15 tokens
            mask = torch.tril(torch.ones(t, t, dtype=torch.bool))[None, None] & keep[:, None, None, :]
            self.register_buffer("mask", mask)

        def attend(self, x, qkv, proj, **kw):
            b, t, d = x.shape
            q, k, v = qkv(x).split(d, dim=-1)
            q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, **kw)
            return proj(y.transpose(1, 2).reshape(b, t, d))

        def forward(self, x):
            x = x + self.attend(self.ln1(x), self.qkv1, self.proj1, attn_mask=self.mask)
            x = x + self.attend(self.ln2(x), self.qkv2, self.proj2, is_causal=True)
            return x + self.mlp(self.ln3(x))

    return Dec().eval(), (torch.randn(2, 20, 64),)


def upsample_decoder() -> tuple[Any, tuple[Any, ...]]:
    """Segmentation-style decoder: a strided encoder conv, then ConvTranspose2d upsampling (output padding,
    groups), which plugins run through aoti_torch_cuda_convolution with transposed=1."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
        nn.ConvTranspose2d(8, 8, 3, stride=2, padding=1, output_padding=1), nn.ReLU(),
        nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1, groups=2), nn.ReLU(),
        nn.Conv2d(4, 2, 1))
    return model.eval(), (torch.randn(2, 3, 16, 12),)


def ranking_head() -> tuple[Any, tuple[Any, ...]]:
    """Scores -> top-k candidates, a stable descending sort and cumulative probabilities."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(32, 300)

        def forward(self, x):
            logits = self.fc(x)
            top = logits.topk(5, dim=-1)
            order = torch.sort(logits, dim=-1, descending=True, stable=True)
            cum = torch.cumsum(torch.softmax(order.values, -1), -1)
            return top.values, top.indices, order.values, order.indices, cum

    return Head().eval(), (torch.randn(4, 32),)


def embedding_bag_rec() -> tuple[Any, tuple[Any, ...]]:
    """Recommender: embedding bags (sum with per-sample weights, mean, max) over index/offset inputs."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Rec(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.EmbeddingBag(100, 16, mode="sum")
            self.b = nn.EmbeddingBag(100, 16, mode="mean")
            self.c = nn.EmbeddingBag(100, 16, mode="max")
            self.fc = nn.Linear(48, 8)

        def forward(self, idx, offsets, weights):
            h = torch.cat([self.a(idx, offsets, per_sample_weights=weights), self.b(idx, offsets),
                           self.c(idx, offsets)], 1)
            return self.fc(h)

    g = torch.Generator().manual_seed(0)
    return Rec().eval(), (torch.randint(0, 100, (20,), generator=g), torch.tensor([0, 4, 9, 9, 15]),
                          torch.rand(20, generator=g))


def scatter_pool() -> tuple[Any, tuple[Any, ...]]:
    """Segment pooling with scatter_reduce (amax without self, mean with self) over a segment-id input."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Pool(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x, seg):
            h = self.fc(x)
            idx = seg[:, None].expand(-1, h.shape[1])
            mx = h.new_zeros(4, 8).scatter_reduce(0, idx, h, "amax", include_self=False)
            mean = h.new_ones(4, 8).scatter_reduce(0, idx, h, "mean", include_self=True)
            return mx, mean

    return Pool().eval(), (torch.randn(10, 8), torch.tensor([0, 2, 1, 0, 2, 2, 3, 1, 0, 2]))


def resnet18_batch8() -> tuple[Any, tuple[Any, ...]]:
    """ResNet-18 (torchvision's layer configuration written out in bench/real_models.py, random init, seed 0),
    batch 8, 224x224, float32: the real-architecture row of bench/bench_gpu.py (convolutions on cuDNN)."""
    import importlib.util
    from pathlib import Path

    import torch

    path = Path(__file__).resolve().parents[2] / "bench" / "real_models.py"
    spec = importlib.util.spec_from_file_location("real_models", path)
    assert spec is not None and spec.loader is not None, path
    real_models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(real_models)
    torch.manual_seed(0)
    model, _ = real_models.resnet18()
    return model, (torch.randn(8, 3, 224, 224, generator=torch.Generator().manual_seed(1)),)


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
    "causal_decoder": (causal_decoder, "embedded", {}),
    "upsample_decoder": (upsample_decoder, "embedded", {}),
    "ranking_head": (ranking_head, "embedded", {}),
    "embedding_bag_rec": (embedding_bag_rec, "embedded", {}),
    "scatter_pool": (scatter_pool, "embedded", {}),
}
# Models only the benchmark runs (bench/bench_gpu.py; tests/gpu/prepare.py exports them like MODELS, without
# the replay variants): name -> (factory, weights mode, extra inductor configs).
BENCH_MODELS: dict[str, tuple[Callable[[], tuple[Any, tuple[Any, ...]]], str, dict[str, Any]]] = {
    "resnet18": (resnet18_batch8, "embedded", {}),
}
# Models whose plugins call the CUDA fallback ops of runtime/src/shims/cuda/ops/ (and transposed
# convolution): checked like the others.
FALLBACK_OPS = ["causal_decoder", "upsample_decoder", "ranking_head", "embedding_bag_rec", "scatter_pool"]
# Models whose CUDA results vary in the last bits between runs (float atomics in scatter_reduce's sum/mean,
# in ATen too): graph replays are compared with eager within rounding instead of bit for bit.
NONDETERMINISTIC = {"scatter_pool"}
CHECKED = ["mlp", "mlp_blob", "convnet", "convnet_channels_last", "transformer", "mutated_buffer", *FALLBACK_OPS]
MUTATED_CALLS = 4  # calls compared one by one for the stateful model
REPLAY_CALLS = 6  # input variants (each with its eager reference) for checking graph replays call by call

# tests/gpu/test_cuda_state.py: the stateful model ("mutated_buffer") run in sessions, step by step. A step
# is (op, session[, source]): "new" a session, "clone" source into a new one, "reset" one to the state as
# loaded, "run" in one (None: the program's own state). prepare.py replays the steps on eager torch (each
# session a copy of the module) and writes sessions/step<i>.in0.npy / .ref0.npy for each run step i, beside the
# model's plugin sessions/mutated_buffer.pt2.
SESSION_STEPS: list[tuple[str | None, ...]] = [
    ("new", "a"), ("run", "a"), ("run", "a"),
    ("new", "b"), ("run", "b"),                   # b sees the state as loaded, not a's
    ("run", "a"),                                 # a's state survived b's runs
    ("clone", "c", "a"), ("run", "c"), ("run", "a"), ("run", "c"),  # c starts from a's state, then diverges
    ("run", None),                                # the program's own state: untouched by the sessions
    ("reset", "a"), ("run", "a"),                 # a from the state as loaded again (it was current)
    ("reset", "c"), ("run", "b"), ("run", "c"),   # c reset while not current
    ("run", None),
]
# Two-method CUDA programs (prepare.py: OUT_DIR/<name>/methods.json, forward.pt2, embed.pt2, x.npy and each
# method's eager <method>.ref0.npy; OUT_DIR/method_programs.json lists them): name -> (weights mode,
# whether embed comes from a second module whose fc2.weight has other values: same FQN and layout).
METHOD_PROGRAMS: dict[str, tuple[str, bool]] = {
    "methods_shared": ("embedded", False),
    "methods_shared_blob": ("blob", False),
    "methods_mismatch": ("embedded", True),
}


def state_copies(steps: list[tuple[str | None, ...]]) -> int:
    """How many state tensors a one-method program with one Buffer copies for SESSION_STEPS-like `steps`
    (c_api.h, aoti_host_weight_stats): one at load, one per new/clone/reset, and two for a run in another
    session than the last one's (that one's state saved, this one's loaded; the program's own state holds
    the working tensors after load)."""
    copies = 1
    current: str | None = None
    for op, session, *_ in steps:
        if op in ("new", "clone", "reset"):
            copies += 1
        elif session != current:
            copies += 2
            current = session
    return copies


def replay_session_steps(prog, run_step, loaded=None, steps=SESSION_STEPS) -> dict:
    """Replays `steps` on `prog` (toolchain.runtime): "new"/"clone"/"reset" on its sessions and, when `loaded`
    (the eager module as loaded) is given, the same on deep copies of it; each "run" step calls
    run_step(i, label, session, module): session None for the program's own state, module the eager copy that
    step runs in (a private copy for the program's own state; None without `loaded`). Returns the sessions by
    name, still open: the caller closes them after reading its statistics."""
    import copy

    sessions: dict = {}
    eager: dict = {}
    own = copy.deepcopy(loaded)
    for i, (op, name, *source) in enumerate(steps):
        if op == "new":
            sessions[str(name)] = prog.session()
            eager[str(name)] = copy.deepcopy(loaded)
        elif op == "clone":
            sessions[str(name)] = sessions[str(source[0])].clone()
            eager[str(name)] = copy.deepcopy(eager[str(source[0])])
        elif op == "reset":
            sessions[str(name)].reset()
            eager[str(name)] = copy.deepcopy(loaded)
        else:
            label = f"step {i} ({op} in {name or 'the program state'})"
            module = own if name is None else eager[str(name)]
            run_step(i, label, None if name is None else sessions[str(name)], module)
    return sessions


# A two-method stateful CUDA program (examples.stateful_methods: `forward` adds to the Buffer `total`, `peek`
# reads it; each method runs on its own stream): (session, method) runs, None the program's own state.
# prepare.py writes OUT_DIR/stateful_methods/{methods.json,forward.pt2,peek.pt2} and step<i>.in0/.ref0.npy.
STATEFUL_METHOD_STEPS: list[tuple[str | None, str]] = [
    ("a", "forward"), ("a", "peek"), ("a", "forward"), ("a", "peek"),  # peek sees forward's update at once
    ("b", "peek"), ("b", "forward"), ("a", "peek"), ("b", "peek"),
    (None, "peek"), (None, "forward"), ("a", "forward"), (None, "peek"),
]
