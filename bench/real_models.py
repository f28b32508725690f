"""Real architectures written out with torch.nn only, random init (no weights downloaded, no torchvision):
the layer configurations of torchvision's ResNet-18/50, MobileNetV3-Small, LRASPP (MobileNetV3-Large,
dilated), EfficientNet-B0, ShuffleNetV2 x1.0 and ConvNeXt-T, and an LSTM acoustic model.

Each builder returns (module in eval mode, example inputs). bench/bench_models.py exports and runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _nn() -> Any:
    import torch.nn

    return torch.nn


def _divisible(v: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: round to a multiple of divisor, never below 90 % of v."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _cba(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: Any = None, dilation: int = 1) -> Any:
    """Conv (no bias) + BatchNorm + optional activation: torchvision's Conv2dNormActivation."""
    nn = _nn()
    pad = (k - 1) // 2 * dilation
    layers = [nn.Conv2d(cin, cout, k, stride, pad, dilation=dilation, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def _squeeze_excite(ch: int, squeeze: int, act: Any, gate: Any) -> Any:
    nn = _nn()

    class SE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc1, self.fc2 = nn.Conv2d(ch, squeeze, 1), nn.Conv2d(squeeze, ch, 1)
            self.act, self.gate = act(), gate()

        def forward(self, x):
            return x * self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))

    return SE()


def _residual(body: Any, use: bool) -> Any:
    nn = _nn()

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = body

        def forward(self, x):
            y = self.body(x)
            return x + y if use else y

    return Block()


# ---- ResNet ----

def _resnet(block: str, layers: list[int]) -> Any:
    nn = _nn()

    class Basic(nn.Module):
        expansion = 1

        def __init__(self, cin: int, ch: int, stride: int) -> None:
            super().__init__()
            self.c1, self.c2 = _cba(cin, ch, 3, stride, act=nn.ReLU), _cba(ch, ch, 3)
            self.down = _cba(cin, ch, 1, stride) if stride != 1 or cin != ch else nn.Identity()
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.c2(self.c1(x)) + self.down(x))

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin: int, ch: int, stride: int) -> None:
            super().__init__()
            self.body = nn.Sequential(_cba(cin, ch, 1, act=nn.ReLU), _cba(ch, ch, 3, stride, act=nn.ReLU),
                                      _cba(ch, ch * 4, 1))
            self.down = _cba(cin, ch * 4, 1, stride) if stride != 1 or cin != ch * 4 else nn.Identity()
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.body(x) + self.down(x))

    cls = Basic if block == "basic" else Bottleneck
    mods, cin = [_cba(3, 64, 7, 2, act=nn.ReLU), nn.MaxPool2d(3, 2, 1)], 64
    for i, n in enumerate(layers):
        ch = 64 << i
        for j in range(n):
            mods.append(cls(cin, ch, 2 if i > 0 and j == 0 else 1))
            cin = ch * cls.expansion
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    return nn.Sequential(*mods)


def resnet18() -> tuple[Any, tuple[Any, ...]]:
    import torch

    return _resnet("basic", [2, 2, 2, 2]).eval(), (torch.randn(1, 3, 224, 224),)


def resnet50() -> tuple[Any, tuple[Any, ...]]:
    import torch

    return _resnet("bottleneck", [3, 4, 6, 3]).eval(), (torch.randn(1, 3, 224, 224),)


# ---- MobileNetV3 ----

# (in, kernel, expanded, out, squeeze-excite, hardswish, stride, dilation), torchvision's bneck configs
_MNV3_SMALL = [(16, 3, 16, 16, 1, 0, 2, 1), (16, 3, 72, 24, 0, 0, 2, 1), (24, 3, 88, 24, 0, 0, 1, 1),
               (24, 5, 96, 40, 1, 1, 2, 1), (40, 5, 240, 40, 1, 1, 1, 1), (40, 5, 240, 40, 1, 1, 1, 1),
               (40, 5, 120, 48, 1, 1, 1, 1), (48, 5, 144, 48, 1, 1, 1, 1), (48, 5, 288, 96, 1, 1, 2, 1),
               (96, 5, 576, 96, 1, 1, 1, 1), (96, 5, 576, 96, 1, 1, 1, 1)]
_MNV3_LARGE_DILATED = [(16, 3, 16, 16, 0, 0, 1, 1), (16, 3, 64, 24, 0, 0, 2, 1), (24, 3, 72, 24, 0, 0, 1, 1),
                       (24, 5, 72, 40, 1, 0, 2, 1), (40, 5, 120, 40, 1, 0, 1, 1), (40, 5, 120, 40, 1, 0, 1, 1),
                       (40, 3, 240, 80, 0, 1, 2, 1), (80, 3, 200, 80, 0, 1, 1, 1), (80, 3, 184, 80, 0, 1, 1, 1),
                       (80, 3, 184, 80, 0, 1, 1, 1), (80, 3, 480, 112, 1, 1, 1, 1), (112, 3, 672, 112, 1, 1, 1, 1),
                       (112, 5, 672, 160, 1, 1, 2, 2), (160, 5, 960, 160, 1, 1, 1, 2), (160, 5, 960, 160, 1, 1, 1, 2)]


def _mnv3_features(config: list[tuple[int, ...]], last: int) -> Any:
    nn = _nn()
    mods = [_cba(3, 16, 3, 2, act=nn.Hardswish)]
    for cin, k, exp, cout, se, hs, stride, dil in config:
        act = nn.Hardswish if hs else nn.ReLU
        body = []
        if exp != cin:
            body.append(_cba(cin, exp, 1, act=act))
        body.append(_cba(exp, exp, k, 1 if dil > 1 else stride, groups=exp, act=act, dilation=dil))
        if se:
            body.append(_squeeze_excite(exp, _divisible(exp // 4), nn.ReLU, nn.Hardsigmoid))
        body.append(_cba(exp, cout, 1))
        mods.append(_residual(nn.Sequential(*body), stride == 1 and cin == cout))
    mods.append(_cba(config[-1][3], last, 1, act=nn.Hardswish))
    return nn.Sequential(*mods)


def mobilenet_v3_small() -> tuple[Any, tuple[Any, ...]]:
    import torch

    nn = _nn()
    model = nn.Sequential(_mnv3_features(_MNV3_SMALL, 576), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1024, 1000))
    return model.eval(), (torch.randn(1, 3, 224, 224),)


def lraspp() -> tuple[Any, tuple[Any, ...]]:
    """LRASPP segmentation (21 classes) on a dilated MobileNetV3-Large: low features after block 4 (stride 8,
    40 channels), high after the last conv (stride 16, 960 channels)."""
    import torch
    import torch.nn.functional as F

    nn = _nn()

    class LRASPP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            feats = _mnv3_features(_MNV3_LARGE_DILATED, 960)
            self.low, self.high = feats[:5], feats[5:]
            self.cbr = _cba(960, 128, 1, act=nn.ReLU)
            self.scale = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(960, 128, 1, bias=False), nn.Sigmoid())
            self.low_cls, self.high_cls = nn.Conv2d(40, 21, 1), nn.Conv2d(128, 21, 1)

        def forward(self, x):
            low = self.low(x)
            high = self.high(low)
            y = self.cbr(high) * self.scale(high)
            y = F.interpolate(y, size=low.shape[-2:], mode="bilinear", align_corners=False)
            y = self.low_cls(low) + self.high_cls(y)
            return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)

    return LRASPP().eval(), (torch.randn(1, 3, 224, 224),)


# ---- EfficientNet-B0 ----

def efficientnet_b0() -> tuple[Any, tuple[Any, ...]]:
    import torch

    nn = _nn()
    # (expand ratio, kernel, stride, in, out, layers)
    stages = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
              (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]
    mods = [_cba(3, 32, 3, 2, act=nn.SiLU)]
    for ratio, k, stride, cin0, cout, n in stages:
        for j in range(n):
            cin, s = (cin0, stride) if j == 0 else (cout, 1)
            exp = cin * ratio
            body = [_cba(cin, exp, 1, act=nn.SiLU)] if exp != cin else []
            body += [_cba(exp, exp, k, s, groups=exp, act=nn.SiLU),
                     _squeeze_excite(exp, max(1, cin // 4), nn.SiLU, nn.Sigmoid), _cba(exp, cout, 1)]
            mods.append(_residual(nn.Sequential(*body), s == 1 and cin == cout))
    mods += [_cba(320, 1280, 1, act=nn.SiLU), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
             nn.Linear(1280, 1000)]
    return nn.Sequential(*mods).eval(), (torch.randn(1, 3, 224, 224),)


# ---- ShuffleNetV2 x1.0 ----

def shufflenet_v2() -> tuple[Any, tuple[Any, ...]]:
    import torch

    nn = _nn()

    class Unit(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            bf = cout // 2
            self.stride = stride
            if stride > 1:
                self.branch1 = nn.Sequential(_cba(cin, cin, 3, stride, groups=cin), _cba(cin, bf, 1, act=nn.ReLU))
            self.branch2 = nn.Sequential(_cba(cin if stride > 1 else bf, bf, 1, act=nn.ReLU),
                                         _cba(bf, bf, 3, stride, groups=bf), _cba(bf, bf, 1, act=nn.ReLU))

        def forward(self, x):
            if self.stride == 1:
                x1, x2 = x.chunk(2, dim=1)
                out = torch.cat((x1, self.branch2(x2)), dim=1)
            else:
                out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
            n, c, h, w = out.shape
            return out.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            mods, cin = [_cba(3, 24, 3, 2, act=nn.ReLU), nn.MaxPool2d(3, 2, 1)], 24
            for repeats, cout in zip([4, 8, 4], [116, 232, 464], strict=True):
                mods += [Unit(cin, cout, 2)] + [Unit(cout, cout, 1) for _ in range(repeats - 1)]
                cin = cout
            mods.append(_cba(464, 1024, 1, act=nn.ReLU))
            self.features, self.fc = nn.Sequential(*mods), nn.Linear(1024, 1000)

        def forward(self, x):
            return self.fc(self.features(x).mean([2, 3]))

    return Net().eval(), (torch.randn(1, 3, 224, 224),)


# ---- ConvNeXt-T ----

def convnext_tiny() -> tuple[Any, tuple[Any, ...]]:
    import torch
    import torch.nn.functional as F

    nn = _nn()

    class LayerNorm2d(nn.LayerNorm):
        def forward(self, x):
            x = x.permute(0, 2, 3, 1)
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps).permute(0, 3, 1, 2)

    class Block(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.fc1, self.act, self.fc2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
            self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * 1e-6)

        def forward(self, x):
            y = self.dw(x).permute(0, 2, 3, 1)
            y = self.fc2(self.act(self.fc1(self.norm(y)))).permute(0, 3, 1, 2)
            return x + self.layer_scale * y

    dims, depths = [96, 192, 384, 768], [3, 3, 9, 3]
    mods = [nn.Conv2d(3, 96, 4, 4), LayerNorm2d(96, eps=1e-6)]
    for i, (dim, depth) in enumerate(zip(dims, depths, strict=True)):
        if i > 0:
            mods += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2)]
        mods += [Block(dim) for _ in range(depth)]
    mods += [nn.AdaptiveAvgPool2d(1), LayerNorm2d(768, eps=1e-6), nn.Flatten(), nn.Linear(768, 1000)]
    return nn.Sequential(*mods).eval(), (torch.randn(1, 3, 224, 224),)


# ---- LSTM acoustic model ----

def lstm_acoustic() -> tuple[Any, tuple[Any, ...]]:
    """3-layer bidirectional LSTM (hidden 320) over 200 frames of 80 log-mel features, 500 output states."""
    import torch

    nn = _nn()

    class Acoustic(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(80, 320, num_layers=3, batch_first=True, bidirectional=True)
            self.out = nn.Linear(640, 500)

        def forward(self, x):
            return self.out(self.rnn(x)[0])

    return Acoustic().eval(), (torch.randn(1, 200, 80),)


MODELS: dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]] = {
    "lstm_acoustic": lstm_acoustic,
    "mobilenet_v3_small": mobilenet_v3_small,
    "efficientnet_b0": efficientnet_b0,
    "lraspp": lraspp,
    "convnext_tiny": convnext_tiny,
    "shufflenet_v2": shufflenet_v2,
    "resnet18": resnet18,
    "resnet50": resnet50,
}
