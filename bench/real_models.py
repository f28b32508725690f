"""Real architectures written out with torch.nn only, random init (no weights downloaded, no torchvision, no
transformers): the layer configurations of torchvision's ResNet-18/50, MobileNetV3-Small, LRASPP
(MobileNetV3-Large, dilated), EfficientNet-B0, ShuffleNetV2 x1.0, ConvNeXt-T and ViT-B/16, of Hugging Face's
bert-base-uncased, gpt2, TinyLlama-1.1B (its decoder block), t5-small, whisper-tiny (encoder) and
wav2vec2-base, and an LSTM acoustic model. The transformers follow the Hugging Face modules' computation
(attention through F.scaled_dot_product_attention where they use SDPA; T5's relative position bias and
unscaled attention through explicit matmul + softmax, as T5's eager attention does).

Sizes are the real configurations; batch 1 and short sequences keep a 2-core machine's runs short (each
builder's docstring says what it feeds).

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


def _with_bn_statistics(model: Any, example: Any) -> Any:
    """model in eval mode, its BatchNorm layers given the statistics a trained network has: each layer's
    running mean and variance are those of its own input on a random batch shaped like `example`, and its
    affine weight and bias are random around (1, 0). With the default init (mean 0, variance 1, weight 1,
    bias 0) every BatchNorm passes on the shrinking activations of the random convolutions, and the
    deep CNNs' outputs barely depended on their input (EfficientNet-B0's not at all in float32: the
    classifier's bias came out, whatever the kernels computed, so comparing with eager proved nothing)."""
    import torch

    nn = _nn()
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for bn in norms:
            bn.reset_running_stats()
            bn.momentum = None  # a cumulative average: one batch gives exactly its statistics
            bn.weight.copy_(1 + 0.25 * torch.randn_like(bn.weight))
            bn.bias.copy_(0.25 * torch.randn_like(bn.bias))
        model.train()
        model(torch.randn_like(example))
        for bn in norms:
            bn.momentum = 0.1
    return model.eval()


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

    x = torch.randn(1, 3, 224, 224)
    return _with_bn_statistics(_resnet("basic", [2, 2, 2, 2]), x), (x,)


def resnet50() -> tuple[Any, tuple[Any, ...]]:
    import torch

    x = torch.randn(1, 3, 224, 224)
    return _with_bn_statistics(_resnet("bottleneck", [3, 4, 6, 3]), x), (x,)


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
    x = torch.randn(1, 3, 224, 224)
    return _with_bn_statistics(model, x), (x,)


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

    x = torch.randn(1, 3, 224, 224)
    return _with_bn_statistics(LRASPP(), x), (x,)


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
    x = torch.randn(1, 3, 224, 224)
    return _with_bn_statistics(nn.Sequential(*mods), x), (x,)


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

    x = torch.randn(1, 3, 224, 224)
    return _with_bn_statistics(Net(), x), (x,)


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


# ---- transformers ----

def _sdpa_self_attention(d: int, heads: int, *, bias: bool = True, k_bias: bool = True, kv_heads: int | None = None,
                         causal: bool = False) -> Any:
    """Multi-head self-attention through F.scaled_dot_product_attention: separate q/k/v/out projections
    (Hugging Face's BERT, ViT, Whisper, wav2vec2 layout), grouped-query when kv_heads < heads. rope, when
    given to forward, is (cos, sin) over the sequence (Llama's rotary embedding on q and k)."""
    import torch
    import torch.nn.functional as F

    nn = _nn()
    kv_heads = kv_heads or heads
    hd = d // heads

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = nn.Linear(d, heads * hd, bias=bias)
            self.k = nn.Linear(d, kv_heads * hd, bias=bias and k_bias)
            self.v = nn.Linear(d, kv_heads * hd, bias=bias)
            self.o = nn.Linear(heads * hd, d, bias=bias)

        def forward(self, x, rope=None):
            b, t, _ = x.shape
            q = self.q(x).view(b, t, heads, hd).transpose(1, 2)
            k = self.k(x).view(b, t, kv_heads, hd).transpose(1, 2)
            v = self.v(x).view(b, t, kv_heads, hd).transpose(1, 2)
            if rope is not None:
                cos, sin = rope
                q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            if kv_heads != heads:  # Llama's repeat_kv
                rep = heads // kv_heads
                k = k[:, :, None].expand(b, kv_heads, rep, t, hd).reshape(b, heads, t, hd)
                v = v[:, :, None].expand(b, kv_heads, rep, t, hd).reshape(b, heads, t, hd)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return self.o(y.transpose(1, 2).reshape(b, t, heads * hd))

    return Attention()


def _encoder_layer(d: int, heads: int, ffn: int, act: Any, eps: float, pre_norm: bool, k_bias: bool = True) -> Any:
    """A transformer encoder layer: pre-norm (ViT, Whisper) or post-norm (BERT, wav2vec2-base)."""
    nn = _nn()

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = _sdpa_self_attention(d, heads, k_bias=k_bias)
            self.ln1, self.ln2 = nn.LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
            self.ffn = nn.Sequential(nn.Linear(d, ffn), act(), nn.Linear(ffn, d))

        def forward(self, x):
            if pre_norm:
                x = x + self.attn(self.ln1(x))
                return x + self.ffn(self.ln2(x))
            x = self.ln1(x + self.attn(x))
            return self.ln2(x + self.ffn(x))

    return Layer()


def vit_b16() -> tuple[Any, tuple[Any, ...]]:
    """torchvision's vit_b_16: 16x16 patches of a 224x224 image (196 + class token), 12 pre-norm layers,
    d 768, 12 heads, MLP 3072, classifier 1000. Batch 1."""
    import torch

    nn = _nn()

    class ViT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patch = nn.Conv2d(3, 768, 16, 16)
            self.cls = nn.Parameter(torch.randn(1, 1, 768) * 0.02)
            self.pos = nn.Parameter(torch.randn(1, 197, 768) * 0.02)
            self.layers = nn.Sequential(*[_encoder_layer(768, 12, 3072, nn.GELU, 1e-6, True) for _ in range(12)])
            self.ln, self.head = nn.LayerNorm(768, eps=1e-6), nn.Linear(768, 1000)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            return self.head(self.ln(self.layers(x))[:, 0])

    return ViT().eval(), (torch.randn(1, 3, 224, 224),)


def bert_base() -> tuple[Any, tuple[Any, ...]]:
    """bert-base-uncased: vocab 30522, 12 post-norm layers, d 768, 12 heads, FFN 3072 (erf GELU), LayerNorm
    eps 1e-12; outputs the last hidden state and the pooler's tanh(dense(CLS)). Batch 1, 128 tokens, no
    padding mask (all tokens attended, as with an all-ones mask)."""
    import torch

    nn = _nn()

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos, self.typ = nn.Embedding(30522, 768), nn.Embedding(512, 768), nn.Embedding(2, 768)
            self.ln = nn.LayerNorm(768, eps=1e-12)
            self.layers = nn.Sequential(*[_encoder_layer(768, 12, 3072, nn.GELU, 1e-12, False) for _ in range(12)])
            self.pool = nn.Linear(768, 768)

        def forward(self, ids):
            t = ids.shape[1]
            pos = torch.arange(t, device=ids.device)
            x = self.ln(self.tok(ids) + self.pos(pos)[None] + self.typ(torch.zeros_like(ids)))
            h = self.layers(x)
            return h, torch.tanh(self.pool(h[:, 0]))

    return Bert().eval(), (torch.randint(0, 30522, (1, 128)),)


def gpt2_small() -> tuple[Any, tuple[Any, ...]]:
    """gpt2 (small) prefill: vocab 50257, 12 pre-norm layers, d 768, 12 heads, causal attention, MLP 3072
    (tanh GELU), LM head tied to the token embedding; logits of every position. Batch 1, 128 tokens."""
    import torch

    nn = _nn()

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(768), nn.LayerNorm(768)
            self.attn = _sdpa_self_attention(768, 12, causal=True)
            self.mlp = nn.Sequential(nn.Linear(768, 3072), nn.GELU(approximate="tanh"), nn.Linear(3072, 768))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(50257, 768), nn.Embedding(1024, 768)
            self.blocks = nn.Sequential(*[Block() for _ in range(12)])
            self.ln_f = nn.LayerNorm(768)
            self.lm_head = nn.Linear(768, 50257, bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, ids):
            pos = torch.arange(ids.shape[1], device=ids.device)
            return self.lm_head(self.ln_f(self.blocks(self.wte(ids) + self.wpe(pos)[None])))

    return GPT2().eval(), (torch.randint(0, 50257, (1, 128)),)


def llama_blocks() -> tuple[Any, tuple[Any, ...]]:
    """A stack of 2 Llama decoder blocks of TinyLlama-1.1B's configuration: d 2048, 32 query heads and 4
    key/value heads (grouped-query), head 64, rotary embedding (theta 10000), RMSNorm eps 1e-5, SwiGLU MLP
    5632, no biases, causal. Input: hidden states, batch 1, 128 positions."""
    import torch

    nn = _nn()

    class RMSNorm(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))

        def forward(self, x):
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = RMSNorm(2048), RMSNorm(2048)
            self.attn = _sdpa_self_attention(2048, 32, bias=False, kv_heads=4, causal=True)
            self.gate = nn.Linear(2048, 5632, bias=False)
            self.up = nn.Linear(2048, 5632, bias=False)
            self.down = nn.Linear(5632, 2048, bias=False)

        def forward(self, x, rope):
            x = x + self.attn(self.n1(x), rope)
            h = self.n2(x)
            return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([Block() for _ in range(2)])
            self.register_buffer("inv_freq", 1.0 / 10000.0 ** (torch.arange(0, 64, 2).float() / 64), persistent=False)

        def forward(self, x):
            freqs = torch.arange(x.shape[1], device=x.device).float()[:, None] * self.inv_freq[None]
            emb = torch.cat((freqs, freqs), dim=-1)
            rope = (emb.cos().to(x.dtype), emb.sin().to(x.dtype))  # Llama's rotary embedding casts to x's dtype
            for block in self.blocks:
                x = block(x, rope)
            return x

    return Stack().eval(), (torch.randn(1, 128, 2048),)


def t5_small() -> tuple[Any, tuple[Any, ...]]:
    """t5-small: vocab 32128, d 512, 6 encoder and 6 decoder layers, 8 heads of 64, FFN 2048 (ReLU), RMS
    LayerNorm eps 1e-6, relative position bias (32 buckets, max distance 128, bidirectional in the
    encoder, causal in the decoder), unscaled attention, LM head tied and scaled by d^-0.5. Batch 1, 64
    input and 64 decoder tokens; outputs the logits."""
    import math

    import torch

    nn = _nn()
    d, heads, hd = 512, 8, 64

    def bucket(rel, bidirectional: bool):
        buckets, out = 32, 0
        if bidirectional:
            buckets //= 2
            out = (rel > 0).to(torch.long) * buckets
            rel = rel.abs()
        else:
            rel = -torch.clamp(rel, max=0)
        exact = buckets // 2
        large = exact + (torch.log(rel.float().clamp(min=1) / exact) / math.log(128 / exact) *
                         (buckets - exact)).to(torch.long)
        large = torch.clamp(large, max=buckets - 1)
        return out + torch.where(rel < exact, rel, large)

    class Norm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))

        def forward(self, x):
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    class Attention(nn.Module):
        def __init__(self, relative: bool, bidirectional: bool) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(d, heads * hd, bias=False) for _ in range(4))
            self.rel = nn.Embedding(32, heads) if relative else None
            self.bidirectional = bidirectional

        def bias(self, tq: int, tk: int, device):
            rel = torch.arange(tk, device=device)[None, :] - torch.arange(tq, device=device)[:, None]
            return self.rel(bucket(rel, self.bidirectional)).permute(2, 0, 1)[None]

        def forward(self, x, kv, bias):
            b, tq, tk = x.shape[0], x.shape[1], kv.shape[1]
            q = self.q(x).view(b, tq, heads, hd).transpose(1, 2)
            k = self.k(kv).view(b, tk, heads, hd).transpose(1, 2)
            v = self.v(kv).view(b, tk, heads, hd).transpose(1, 2)
            scores = q @ k.transpose(-1, -2) + bias
            w = torch.softmax(scores.float(), dim=-1).type_as(v)  # T5's softmax in float32, back to the model's dtype
            return self.o((w @ v).transpose(1, 2).reshape(b, tq, heads * hd))

    class Layer(nn.Module):
        def __init__(self, decoder: bool, relative: bool) -> None:
            super().__init__()
            self.self_attn, self.n1 = Attention(relative, not decoder), Norm()
            self.cross, self.nc = (Attention(False, False), Norm()) if decoder else (None, None)
            self.wi, self.wo, self.n2 = nn.Linear(d, 2048, bias=False), nn.Linear(2048, d, bias=False), Norm()

        def forward(self, x, bias, enc=None):
            h = self.n1(x)
            x = x + self.self_attn(h, h, bias)
            if self.cross is not None:
                x = x + self.cross(self.nc(x), enc, 0.0)
            return x + self.wo(torch.relu(self.wi(self.n2(x))))

    class T5(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.shared = nn.Embedding(32128, d)
            self.enc = nn.ModuleList([Layer(False, i == 0) for i in range(6)])
            self.dec = nn.ModuleList([Layer(True, i == 0) for i in range(6)])
            self.enc_norm, self.dec_norm = Norm(), Norm()

        def forward(self, ids, dec_ids):
            x = self.shared(ids)
            bias = self.enc[0].self_attn.bias(ids.shape[1], ids.shape[1], ids.device)
            for layer in self.enc:
                x = layer(x, bias)
            enc = self.enc_norm(x)
            y, t = self.shared(dec_ids), dec_ids.shape[1]
            causal = torch.triu(torch.full((t, t), float("-inf"), device=ids.device), diagonal=1)
            bias = self.dec[0].self_attn.bias(t, t, ids.device) + causal
            for layer in self.dec:
                y = layer(y, bias, enc)
            return self.dec_norm(y) * d ** -0.5 @ self.shared.weight.t()

    return T5().eval(), (torch.randint(0, 32128, (1, 64)), torch.randint(0, 32128, (1, 64)))


def whisper_tiny_encoder() -> tuple[Any, tuple[Any, ...]]:
    """whisper-tiny's encoder: 80 log-mel bins, two GELU convolutions (the second stride 2), sinusoidal
    positions, 4 pre-norm layers of d 384, 6 heads (no key bias), FFN 1536, final LayerNorm. Batch 1, 10 s
    of audio (1000 frames, 500 positions; Whisper pads to 30 s, 3000 frames)."""
    import torch

    nn = _nn()

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv1d(80, 384, 3, padding=1)
            self.conv2 = nn.Conv1d(384, 384, 3, stride=2, padding=1)
            scale = torch.exp(-torch.arange(192) * (torch.log(torch.tensor(10000.0)) / 191))
            t = torch.arange(1500)[:, None] * scale[None]
            self.register_buffer("pos", torch.cat([t.sin(), t.cos()], dim=1))
            self.layers = nn.Sequential(*[_encoder_layer(384, 6, 1536, nn.GELU, 1e-5, True, k_bias=False)
                                          for _ in range(4)])
            self.ln = nn.LayerNorm(384)

        def forward(self, mel):
            x = nn.functional.gelu(self.conv2(nn.functional.gelu(self.conv1(mel)))).transpose(1, 2)
            return self.ln(self.layers(x + self.pos[: x.shape[1]]))

    return Encoder().eval(), (torch.randn(1, 80, 1000),)


def wav2vec2_base() -> tuple[Any, tuple[Any, ...]]:
    """wav2vec2-base: the convolutional feature encoder (7 convolutions of 512 channels, kernels 10,3,3,3,3,2,2,
    strides 5,2,2,2,2,2,2, GroupNorm on the first, GELU), feature projection (LayerNorm, 512 -> 768), the
    convolutional position embedding (kernel 128, 16 groups; its weight norm folded into the weight, as at
    inference), 12 post-norm layers of d 768, 12 heads, FFN 3072. Batch 1, 1 s of 16 kHz audio (49 frames)."""
    import torch

    nn = _nn()

    class W2V(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            kernels, strides = (10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2)
            convs, cin = [], 1
            for i, (k, s) in enumerate(zip(kernels, strides, strict=True)):
                convs.append(nn.Conv1d(cin, 512, k, s, bias=False))
                if i == 0:
                    convs.append(nn.GroupNorm(512, 512))
                convs.append(nn.GELU())
                cin = 512
            self.features = nn.Sequential(*convs)
            self.proj_ln, self.proj = nn.LayerNorm(512), nn.Linear(512, 768)
            self.pos_conv = nn.Conv1d(768, 768, 128, padding=64, groups=16)
            self.ln = nn.LayerNorm(768)
            self.layers = nn.Sequential(*[_encoder_layer(768, 12, 3072, nn.GELU, 1e-5, False) for _ in range(12)])

        def forward(self, wave):
            x = self.proj(self.proj_ln(self.features(wave[:, None]).transpose(1, 2)))
            pos = nn.functional.gelu(self.pos_conv(x.transpose(1, 2))[:, :, :-1]).transpose(1, 2)
            return self.layers(self.ln(x + pos))

    return W2V().eval(), (torch.randn(1, 16000),)


MODELS: dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]] = {
    "lstm_acoustic": lstm_acoustic,
    "mobilenet_v3_small": mobilenet_v3_small,
    "efficientnet_b0": efficientnet_b0,
    "lraspp": lraspp,
    "convnext_tiny": convnext_tiny,
    "shufflenet_v2": shufflenet_v2,
    "resnet18": resnet18,
    "resnet50": resnet50,
    "vit_b16": vit_b16,
    "bert_base": bert_base,
    "gpt2_small": gpt2_small,
    "llama_blocks": llama_blocks,
    "t5_small": t5_small,
    "whisper_tiny_encoder": whisper_tiny_encoder,
    "wav2vec2_base": wav2vec2_base,
}
