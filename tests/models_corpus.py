"""A corpus of common model families (small, seeded), exported by plain torch through toolchain.export, to
measure which aoti_torch_cpu_* fallback shims real models make a plugin import.

    python -m tests.models_corpus [--out build/corpus] [--markdown docs/ops-corpus.md] [NAME ...]

exports every model (or the named ones) to OUT/NAME.pt2 and prints the table of fallback shims each plugin
imports; --markdown also writes it into that file, between its table markers (the whole file if it has none). tests/integration/test_models_corpus.py runs every model through aoti-run and the Python
module and compares with eager."""

from __future__ import annotations

import argparse
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def _torch():
    import torch

    torch.manual_seed(0)
    return torch


def cnn_pool() -> tuple[Any, tuple[Any, ...]]:
    """Image classifier: conv stages with max (ceil, dilation), avg (count_include_pad off) and adaptive pools."""
    torch = _torch()
    nn: Any = torch.nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
            self.mp = nn.MaxPool2d(3, stride=2, padding=1, dilation=2, ceil_mode=True)
            self.ap = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
            self.amp = nn.AdaptiveMaxPool2d((3, 5))
            self.aap = nn.AdaptiveAvgPool2d((5, 3))
            self.fc = nn.Linear(8 * 15 * 2, 10)

        def forward(self, x):
            x = torch.relu(self.c1(x))
            x = self.mp(x)
            x = torch.relu(self.c2(x))
            y = self.ap(x)
            a, b = self.amp(y), self.aap(y)
            return self.fc(torch.cat([a.flatten(1), b.flatten(1)], 1))

    return Net().eval(), (torch.randn(2, 3, 29, 27),)


def pool3d() -> tuple[Any, tuple[Any, ...]]:
    """Video/volume classifier: 3-d conv with avg and max pools."""
    torch = _torch()
    nn: Any = torch.nn
    model = nn.Sequential(nn.Conv3d(2, 4, 3, padding=1), nn.ReLU(),
                          nn.AvgPool3d((2, 3, 3), stride=(1, 2, 2), padding=(1, 1, 1), ceil_mode=True),
                          nn.MaxPool3d(2, stride=2), nn.Flatten(), nn.LazyLinear(6))
    x = torch.randn(2, 2, 6, 11, 9)
    model(x)
    return model.eval(), (x,)


def detection_post() -> tuple[Any, tuple[Any, ...]]:
    """Detection head post-processing: top-k scores, sorted boxes, boxes above a threshold."""
    torch = _torch()
    nn: Any = torch.nn

    class Post(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(16, 5)

        def forward(self, feats):
            out = self.head(feats)  # [N, 5]: 4 box coordinates and a score
            scores, boxes = out[:, 4].sigmoid(), out[:, :4]
            top, idx = scores.topk(8)
            order = torch.sort(boxes[idx, 0], descending=True, stable=True)
            keep = torch.nonzero(scores > 0.5)
            picked = torch.masked_select(boxes, (scores > 0.5)[:, None])
            return top, idx, order.values, order.indices, keep, picked

    return Post().eval(), (torch.randn(40, 16),)


def transformer_decoder() -> tuple[Any, tuple[Any, ...]]:
    """Transformer decoder layer: causal self-attention with a key-padding mask and cross-attention."""
    torch = _torch()
    nn: Any = torch.nn

    class Dec(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.TransformerDecoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)

        def forward(self, tgt, memory, pad):
            t = tgt.shape[1]
            causal = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
            return self.layer(tgt, memory, tgt_mask=causal, tgt_key_padding_mask=pad, tgt_is_causal=True)

    pad = torch.zeros(2, 10, dtype=torch.bool)
    pad[1, 7:] = True
    return Dec().eval(), (torch.randn(2, 10, 32), torch.randn(2, 12, 32), pad)


def lstm() -> tuple[Any, tuple[Any, ...]]:
    """Two-layer bidirectional LSTM tagger."""
    torch = _torch()
    nn: Any = torch.nn

    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(12, 16, num_layers=2, batch_first=True, bidirectional=True)
            self.out = nn.Linear(32, 5)

        def forward(self, x):
            y, (h, c) = self.rnn(x)
            return self.out(y), h, c

    return Tagger().eval(), (torch.randn(3, 7, 12),)


def gru() -> tuple[Any, tuple[Any, ...]]:
    """Two-layer GRU encoder with an initial state."""
    torch = _torch()
    nn: Any = torch.nn

    class Enc(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.GRU(10, 16, num_layers=2)

        def forward(self, x, h0):
            y, h = self.rnn(x, h0)
            return y, h

    return Enc().eval(), (torch.randn(6, 3, 10), torch.randn(2, 3, 16))


def recommender() -> tuple[Any, tuple[Any, ...]]:
    """Recommender: embedding bags (sum and mean, with offsets, per-sample weights), scatter/index updates."""
    torch = _torch()
    nn: Any = torch.nn

    class Rec(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.users = nn.EmbeddingBag(30, 8, mode="sum")
            self.items = nn.EmbeddingBag(40, 8, mode="mean")
            self.fc = nn.Linear(16, 4)

        def forward(self, uidx, uoff, iidx, ioff, w, seg):
            u = self.users(uidx, uoff, per_sample_weights=w)
            i = self.items(iidx, ioff)
            h = self.fc(torch.cat([u, i], 1))  # [B, 4]
            pooled = torch.zeros(3, 4).scatter_reduce(0, seg[:, None].expand(-1, 4), h, "amax", include_self=False)
            summed = torch.zeros(3, 4).index_put((seg,), h, accumulate=True)
            mean = torch.ones(3, 4).index_reduce(0, seg, h, "mean", include_self=True)
            placed = torch.zeros(3, 4).scatter(0, seg[:, None].expand(-1, 4), h)
            return h, pooled, summed, mean, placed

    uidx = torch.randint(0, 30, (11,))
    iidx = torch.randint(0, 40, (9,))
    return Rec().eval(), (uidx, torch.tensor([0, 3, 3, 7, 9]), iidx, torch.tensor([0, 2, 5, 6, 8]),
                          torch.rand(11), torch.tensor([0, 2, 0, 1, 2]))


def audio_frontend() -> tuple[Any, tuple[Any, ...]]:
    """Audio front-end: cumulative energy, mel-bin lookup, histogram, running max/min, frame repeats."""
    torch = _torch()
    nn: Any = torch.nn

    class Front(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("edges", torch.linspace(-2.0, 2.0, 9))

        def forward(self, wav, reps):
            energy = torch.cumsum(wav * wav, dim=-1)
            decay = torch.cumprod(torch.sigmoid(wav), dim=-1)
            bins = torch.bucketize(wav, self.edges)
            pos = torch.searchsorted(self.edges, wav.contiguous(), right=True)
            hist = torch.histc(wav, bins=12, min=-3.0, max=3.0)
            runmax, argmax = torch.cummax(wav, dim=1)
            runmin, argmin = torch.cummin(wav, dim=1)
            frames = torch.repeat_interleave(reps)
            return energy, decay, bins, pos, hist, runmax, argmax, runmin, argmin, frames

    return Front().eval(), (torch.randn(2, 50), torch.tensor([1, 0, 3, 2]))


def segmentation() -> tuple[Any, tuple[Any, ...]]:
    """Segmentation decoder: bilinear and nearest upsampling, a transposed convolution, grid_sample warping."""
    torch = _torch()
    nn: Any = torch.nn
    F: Any = torch.nn.functional  # noqa: N806

    class Seg(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.up = nn.ConvTranspose2d(8, 8, 2, stride=2)
            self.head = nn.Conv2d(8, 4, 1)

        def forward(self, x, grid):
            f = torch.relu(self.enc(x))
            a = F.interpolate(f, scale_factor=2, mode="bilinear", align_corners=False)
            b = F.interpolate(f, size=(x.shape[2], x.shape[3]), mode="nearest")
            y = self.head(a + b + self.up(f))
            return y, F.grid_sample(y, grid, mode="bilinear", padding_mode="border", align_corners=False)

    return Seg().eval(), (torch.randn(2, 3, 16, 12), torch.rand(2, 5, 7, 2) * 2.2 - 1.1)


def spectrogram() -> tuple[Any, tuple[Any, ...]]:
    """Spectral front-end: STFT magnitude and phase to log-mel features, and a 2-d FFT token mixer (FNet)."""
    torch = _torch()
    nn: Any = torch.nn

    class Spec(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("window", torch.hann_window(100))
            self.register_buffer("mel", torch.rand(51, 12))
            self.mix = nn.Linear(12, 12)

        def forward(self, wav):
            spec = torch.stft(wav, 100, 40, window=self.window, return_complex=True)  # [B, 51, frames]
            logmel = torch.log(spec.abs().pow(2).transpose(1, 2) @ self.mel + 1e-6)
            mixed = torch.fft.fftn(logmel, dim=(-2, -1)).real  # FNet's token mixing
            # The phase goes out as cos/sin: at bins whose imaginary part is 0 in exact arithmetic (the
            # reflect-padded first frame is symmetric) its sign, so angle's +-pi, is rounding noise that no
            # two FFT implementations share.
            phase = spec.angle()
            return self.mix(logmel + mixed), torch.cos(phase), torch.sin(phase)

    return Spec().eval(), (torch.randn(2, 600),)


def int8_linear() -> tuple[Any, tuple[Any, ...]]:
    """Weight-only int8 linear (per-channel scales), as weight-only quantization libraries emit it."""
    torch = _torch()
    nn: Any = torch.nn

    class Q(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            w = torch.randn(24, 32)
            scales = w.abs().amax(1) / 127.0
            self.register_buffer("w", torch.round(w / scales[:, None]).clamp(-128, 127).to(torch.int8))
            self.register_buffer("scales", scales)

        def forward(self, x):
            return torch.ops.aten._weight_int8pack_mm(x, self.w, self.scales)

    return Q().eval(), (torch.randn(5, 32),)


MODELS: dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]] = {
    "cnn_pool": cnn_pool,
    "pool3d": pool3d,
    "detection_post": detection_post,
    "transformer_decoder": transformer_decoder,
    "lstm": lstm,
    "gru": gru,
    "recommender": recommender,
    "audio_frontend": audio_frontend,
    "segmentation": segmentation,
    "spectrogram": spectrogram,
    "int8_linear": int8_linear,
}


def half_conv_mlp(dtype: str) -> tuple[Any, tuple[Any, ...]]:
    """A small conv + MLP in `dtype` (bfloat16, float16): the plugin calls the convolution and addmm fallbacks
    in that dtype (the half-precision tests on CPU and GPU; not in MODELS, which is float)."""
    torch = _torch()
    nn: Any = torch.nn

    class ConvMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.fc1 = nn.Linear(8 * 6 * 6, 32)
            self.fc2 = nn.Linear(32, 10)

        def forward(self, x):
            y = torch.relu(self.conv(x)).flatten(1)
            return self.fc2(torch.relu(self.fc1(y)))

    dt = getattr(torch, dtype)
    return ConvMLP().to(dt).eval(), (torch.randn(2, 3, 6, 6).to(dt),)


def imported_shims(pt2: Path, prefix: str = "aoti_torch_") -> list[str]:
    """The symbols starting with `prefix` that the package's plugin(s) import (undefined dynamic symbols), sorted."""
    from toolchain.elf.reader import parse_elf

    names: set[str] = set()
    with zipfile.ZipFile(pt2) as zf:
        for member in zf.namelist():
            if member.endswith(".so"):
                elf = parse_elf(zf.read(member), f"{pt2}!{member}")
                names.update(s.name for s in elf.symbols if not s.defined and s.name.startswith(prefix))
    return sorted(names)


def fallback_shims(pt2: Path) -> list[str]:
    """The aoti_torch_cpu_* fallback shims the package's plugin(s) import."""
    return imported_shims(pt2, "aoti_torch_cpu_")


def implemented_shims() -> set[str]:
    from toolchain.spec import load_spec

    return {s.name for s in load_spec().shims}


def export_model(name: str, out_dir: Path, build_dir: Path) -> Path:
    from toolchain.export import export

    module, inputs = MODELS[name]()
    return export(module, inputs, out_dir / f"{name}.pt2", build_dir=build_dir)


TABLE_BEGIN, TABLE_END = "<!-- corpus-table:begin -->", "<!-- corpus-table:end -->"


def markdown(rows: list[tuple[str, str, list[str]]], have: set[str]) -> str:
    lines = ["| model | family | CPU fallback shims imported (**bold**: not implemented by the host) |",
             "|---|---|---|"]
    for name, doc, shims in rows:
        cells = ", ".join(f"`{s}`" if s in have else f"**`{s}`**" for s in shims) or "(none)"
        lines.append(f"| {name} | {doc} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"models to export (default: all of {', '.join(MODELS)})")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "corpus")
    ap.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        print(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    rows = []
    for name in args.names or list(MODELS):
        pt2 = export_model(name, args.out, REPO_ROOT / "build")
        doc = (MODELS[name].__doc__ or "").strip().split(":")[0].rstrip(".")
        rows.append((name, doc, fallback_shims(pt2)))
    table = markdown(rows, implemented_shims())
    print(table)
    if args.markdown:
        text = args.markdown.read_text() if args.markdown.exists() else ""
        if TABLE_BEGIN in text and TABLE_END in text:
            head, rest = text.split(TABLE_BEGIN, 1)
            text = head + TABLE_BEGIN + "\n" + table + TABLE_END + rest.split(TABLE_END, 1)[1]
        else:
            text = table
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
