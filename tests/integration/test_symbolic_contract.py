"""The contract is the exported program's own: size symbols shared across inputs and outputs, the range asked
(or a failed export that says why), and outputs that keep their names and structure.

Real torch exports, the real runtime (aoti-run, `aoti-toolchain run`, the Python module); each model is
exported once per test run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import BUILD_DIR, REPO_ROOT, file_lock, shared_dir, shared_export

pytestmark = pytest.mark.slow

MODELS = '''
import torch


class MaskedPool(torch.nn.Module):
    """tokens (B, S, 8), a keep-mask (B, S) and per-token weights (B, S): a weighted masked mean over S, then
    a linear head."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(8, 3)

    def forward(self, tokens, keep, weight):
        w = (keep.to(tokens.dtype) * weight).unsqueeze(-1)
        pooled = (tokens * w).sum(1) / w.sum(1).clamp(min=1e-3)
        return self.head(pooled), tokens * w


def pool_factory():
    torch.manual_seed(0)
    return MaskedPool().eval(), (torch.randn(3, 7, 8), torch.rand(3, 7) > 0.3, torch.rand(3, 7) + 0.5)


class Tree(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)

    def forward(self, x):
        y = self.fc(x)
        return {"logits": y, "aux": (y.sum(-1), [x * 2, torch.relu(y)])}


def tree_factory():
    torch.manual_seed(0)
    return Tree().eval(), (torch.randn(3, 6),)
'''


def _contract(pt2: Path) -> dict:
    with zipfile.ZipFile(pt2) as zf:
        return json.loads(zf.read(next(n for n in zf.namelist() if n.endswith("aoti_toolchain_contract.json"))))


def _cli(*args, cwd: Path):
    return subprocess.run([sys.executable, "-m", "toolchain", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory) -> Path:
    d = shared_dir(tmp_path_factory, "symbolic-models")
    with file_lock(d / "models.lock"):
        if not (d / "symmodels.py").is_file():
            (d / "symmodels.py").write_text(MODELS)
    return d


def _cli_export(models_dir: Path, name: str, *dynamic: str) -> Path:
    """symmodels:<name>_factory exported once per test run by the CLI with `--dynamic` for each of `dynamic`,
    its examples saved in models_dir/<name>."""
    pt2 = models_dir / f"{name}.pt2"
    with file_lock(models_dir / f"{name}.lock"):
        if not pt2.is_file():
            r = _cli("export", f"symmodels:{name}_factory", "-o", pt2, "--build-dir", BUILD_DIR, "-q",
                     *(a for d in dynamic for a in ("--dynamic", d)), "--save-inputs", models_dir / name,
                     cwd=models_dir)
            assert r.returncode == 0, r.stderr
    return pt2


@pytest.fixture(scope="module")
def pool_pt2(torch, models_dir) -> Path:
    """MaskedPool exported through the CLI, --dynamic on the three inputs' B and S (2..16, 2..32), with examples."""
    return _cli_export(models_dir, "pool", "tokens:0=2..16", "tokens:1=2..32", "keep:0=2..16", "keep:1=2..32",
                       "weight:0=2..16", "weight:1=2..32")


def _pool_eager(torch, models_dir, tokens, keep, weight):
    sys.path.insert(0, str(models_dir))
    try:
        import symmodels
    finally:
        sys.path.remove(str(models_dir))
    model, _ = symmodels.pool_factory()
    with torch.no_grad():
        return [t.numpy() for t in model(torch.from_numpy(tokens), torch.from_numpy(keep), torch.from_numpy(weight))]


def test_cli_dims_shared_across_inputs_are_one_symbol(pool_pt2):
    c = _contract(pool_pt2)
    assert c["schema"] == 2
    tokens, keep, weight = c["inputs"]
    b, s = tokens["shape"][0]["expr"], tokens["shape"][1]["expr"]
    assert b != s and [d["expr"] for d in keep["shape"]] == [b, s] == [d["expr"] for d in weight["shape"]]
    assert {x["name"]: (x["min"], x.get("max")) for x in c["symbols"]} == {b: (2, 16), s: (2, 32)}
    assert c["outputs"][1]["shape"][:2] == [{"expr": b, "min": 2, "max": 16}, {"expr": s, "min": 2, "max": 32}]


def test_shared_dims_bound_once_and_mismatches_refused_everywhere(torch, host_build, pool_pt2, models_dir, tmp_path):
    from toolchain import runtime
    from toolchain.errors import InputError

    rng = np.random.default_rng(1)
    tokens = rng.standard_normal((5, 19, 8)).astype(np.float32)
    keep = rng.random((5, 19)) > 0.4
    weight = (rng.random((5, 19)) + 0.5).astype(np.float32)
    want = _pool_eager(torch, models_dir, tokens, keep, weight)
    with runtime.load(pool_pt2, library_path=host_build.lib) as prog:
        got = prog.run([tokens, keep, weight])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        for bad, dim, other in ((keep[:, :11], 1, 19), (keep[:4], 0, 5)):
            with pytest.raises(InputError) as exc:
                prog.run([tokens, np.ascontiguousarray(bad), weight])
            msg = str(exc.value)
            assert f"input 1 (keep): dimension {dim} is {bad.shape[dim]}" in msg, msg
            assert f"input 0 (tokens) dimension {dim} is {other}" in msg and "requires them equal" in msg, msg
        with pytest.raises(InputError, match=r"input 2 \(weight\): dimension 1 is 20, but input 0 \(tokens\)"):
            prog.run([tokens, keep, np.ones((5, 20), np.float32)])
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "k.npy", np.ascontiguousarray(keep[:, :11]))
    np.save(tmp_path / "w.npy", weight)
    r = subprocess.run([str(host_build.aoti_run), str(pool_pt2), "-i", str(tmp_path / "t.npy"), "-i",
                        str(tmp_path / "k.npy"), "-i", str(tmp_path / "w.npy"), "-o", str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert r.returncode == 3 and "input 1 (keep): dimension 1 is 11, but input 0 (tokens) dimension 1 is 19" in \
        r.stderr, r.stderr
    assert not (tmp_path / "out").exists()  # nothing written for a refused run


def test_refused_inputs_never_reach_the_plugin(torch, host_lib, tmp_path_factory):
    """A model that counts its runs in a buffer: a refused call leaves the count where it was. (The buffer has
    several elements: torch 2.13's inductor folds a 1-element buffer's update into a constant store,
    `calls = 1.0`, so such a count never passes 1.)"""
    from toolchain import runtime
    from toolchain.errors import InputError

    class Counted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros(4))

        def forward(self, a, b):
            out = a * b.sum(-1, keepdim=True) + self.calls
            self.calls.add_(1)
            return out

    n = torch.export.Dim("n", min=2, max=64)
    pt2 = shared_export(shared_dir(tmp_path_factory, "symbolic-models") / "counted.pt2", Counted().eval(),
                        (torch.ones(3, 4), torch.ones(3, 5)), dynamic_shapes={"a": {0: n}, "b": {0: n}})
    a, b = np.ones((6, 4), np.float32), np.ones((6, 5), np.float32)
    with runtime.load(pt2, library_path=host_lib) as prog:
        first = prog.run([a, b])[0]
        for _ in range(3):
            with pytest.raises(InputError, match="requires them equal"):
                prog.run([a, np.ones((7, 5), np.float32)])
        second = prog.run([a, b])[0]
    np.testing.assert_array_equal(second - first, np.ones_like(first))  # one run between them, not four


def test_three_inputs_and_a_derived_dimension_through_python(torch, host_lib, tmp_path_factory):
    """x (B, S, 4), y (B, S, 4), z (B, 2*S): two symbols bound from x, y and z checked against them (z's rows
    by its expression); an output sized s + s' keeps its expression."""
    from toolchain import runtime, symdims
    from toolchain.errors import InputError

    class Three(torch.nn.Module):
        def forward(self, x, y, z):
            pairs = z.reshape(z.shape[0], -1, 2).sum(-1)
            return (x * y).sum(-1) + pairs, torch.cat([x, y], dim=1)

    B, S = torch.export.Dim("batch", min=2, max=8), torch.export.Dim("seq", min=2, max=20)
    pt2 = shared_export(shared_dir(tmp_path_factory, "symbolic-models") / "three.pt2", Three(),
                        (torch.randn(3, 5, 4), torch.randn(3, 5, 4), torch.randn(3, 10)),
                        dynamic_shapes={"x": {0: B, 1: S}, "y": {0: B, 1: S}, "z": {0: B, 1: 2 * S}})
    c = _contract(pt2)
    names = {s["name"] for s in c["symbols"]}
    x_dims, z_dims = c["inputs"][0]["shape"], c["inputs"][2]["shape"]
    assert [d["expr"] for d in c["inputs"][1]["shape"][:2]] == [x_dims[0]["expr"], x_dims[1]["expr"]]
    assert symdims.symbols(symdims.parse(z_dims[1]["expr"])) <= names and z_dims[1]["min"] == 4
    rng = np.random.default_rng(2)
    x, y, z = (rng.standard_normal(s).astype(np.float32) for s in ((4, 9, 4), (4, 9, 4), (4, 18)))
    cat_expr = symdims.parse(c["outputs"][1]["shape"][1]["expr"])
    with runtime.load(pt2, library_path=host_lib) as prog:
        out, cat = prog.run([x, y, z])
        with torch.no_grad():
            want = Three()(*(torch.from_numpy(v) for v in (x, y, z)))
        np.testing.assert_allclose(out, want[0].numpy(), rtol=1e-5, atol=1e-5)
        assert cat.shape[1] == symdims.evaluate(cat_expr, {x_dims[1]["expr"]: 9})
        with pytest.raises(InputError) as exc:
            prog.run([x, y, z[:, :16]])
        assert "input 2 (z): dimension 1 is 16, but the model requires" in str(exc.value), exc.value
        with pytest.raises(InputError, match=r"input 2 \(z\): dimension 0 is 3, but input 0 \(x\) dimension 0 is 4"):
            prog.run([x, y, z[:3]])
        with pytest.raises(InputError, match=r"input 1 \(y\): dimension 1 is 8"):
            prog.run([x, y[:, :8], z])


def test_channels_last_conv_from_batch_1_fails_the_export_with_the_reason(torch, tmp_path):
    from toolchain.errors import ExportError
    from toolchain.export import export

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(6, 4, 3))
    net = net.eval().to(memory_format=torch.channels_last)
    x = torch.randn(4, 3, 12, 12).to(memory_format=torch.channels_last)
    out = tmp_path / "cl.pt2"
    with pytest.raises(ExportError) as exc:
        export(net, (x,), out, build_dir=BUILD_DIR, dynamic_shapes={"input": {0: torch.export.Dim("b", min=1, max=8)}})
    msg = str(exc.value)
    assert "dimension 0" in msg and "asked 1..8" in msg and "accepts 2..8" in msg, msg
    assert "torch added the guard" in msg and "--allow-narrower" in msg, msg
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_padded_transformer_encoder_narrower_only_when_allowed(torch, host_lib, tmp_path_factory, capfd):
    """A TransformerEncoderLayer with a key-padding mask, B 1..8 and S 2..24 shared by both inputs: torch
    compiles B >= 2 (linear's contiguity check branches on B == 1); allow_narrower records that, says so, and
    the runtime refuses batch 1 and mismatched masks, and matches eager at batch 2 and at the maximum."""
    from toolchain import runtime
    from toolchain.errors import InputError

    torch.manual_seed(0)

    class Enc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)

        def forward(self, x, pad):
            return self.layer(x, src_key_padding_mask=pad)

    model = Enc().eval()
    B, S = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("seq", min=2, max=24)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[:, -2:] = True
    pt2 = shared_export(shared_dir(tmp_path_factory, "symbolic-models") / "enc.pt2", model, (torch.randn(3, 6, 16), pad),
                        dynamic_shapes={"x": {0: B, 1: S}, "pad": {0: B, 1: S}}, allow_narrower=True)
    c = _contract(pt2)
    assert [(d["min"], d["max"]) for d in c["inputs"][1]["shape"]] == [(2, 8), (2, 24)]
    err = capfd.readouterr().err
    assert not err or "asked 1..8" in err  # said once, by whichever worker exported it
    with runtime.load(pt2, library_path=host_lib) as prog:
        for b, s in ((2, 5), (8, 24)):
            x = torch.randn(b, s, 16)
            p = torch.zeros(b, s, dtype=torch.bool)
            p[:, s // 2:] = True
            (got,) = prog.run([x.numpy(), p.numpy()])
            with torch.no_grad():
                np.testing.assert_allclose(got, model(x, p).numpy(), rtol=1e-4, atol=1e-5)
        with pytest.raises(InputError, match="must be 2..8"):
            prog.run([np.zeros((1, 5, 16), np.float32), np.zeros((1, 5), bool)])
        with pytest.raises(InputError, match="requires them equal"):
            prog.run([np.zeros((2, 20, 16), np.float32), np.zeros((2, 10), bool)])


# ---------------------------------------------------------------------------------------- nested outputs

@pytest.fixture(scope="module")
def tree_pt2(torch, models_dir) -> Path:
    return _cli_export(models_dir, "tree", "x:0=2..32")


LEAVES = ["logits", "aux.0", "aux.1.0", "aux.1.1"]


def test_nested_outputs_keep_their_names_in_the_package_and_inspect(tree_pt2, models_dir):
    c = _contract(tree_pt2)
    assert [o["name"] for o in c["outputs"]] == LEAVES
    assert [o["path"] for o in c["outputs"]] == [["logits"], ["aux", 0], ["aux", 1, 0], ["aux", 1, 1]]
    assert c["output_tree"]["kind"] == "dict" and c["output_tree"]["keys"] == ["logits", "aux"]
    assert sorted(p.name for p in (models_dir / "tree").iterdir()) == sorted(
        ["input_0.npy"] + [f"expected_{n}.npy" for n in LEAVES])
    r = _cli("inspect", tree_pt2, cwd=models_dir)
    assert r.returncode == 0 and all(f"output {n}: float32[" in r.stdout for n in LEAVES), r.stdout


def test_nested_outputs_through_aoti_run_and_run_compare(host_build, tree_pt2, models_dir, tmp_path):
    ex = models_dir / "tree"
    r = subprocess.run([str(host_build.aoti_run), str(tree_pt2), "-i", str(ex / "input_0.npy"), "-o",
                        str(tmp_path / "a")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for n in LEAVES:
        np.testing.assert_allclose(np.load(tmp_path / "a" / f"output_{n}.npy"), np.load(ex / f"expected_{n}.npy"),
                                   rtol=1e-5, atol=1e-6)
    r = _cli("run", tree_pt2, "--library", host_build.lib, "-i", ex / "input_0.npy", "-o", tmp_path / "b",
             "--compare", ex, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert all(f"output_{n}: max abs error" in r.stdout for n in LEAVES), r.stdout
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == sorted(f"output_{n}.npy" for n in LEAVES)


def test_nested_outputs_flat_and_structured_in_python(torch, host_lib, tree_pt2, models_dir):
    from toolchain import runtime

    sys.path.insert(0, str(models_dir))
    try:
        import symmodels
    finally:
        sys.path.remove(str(models_dir))
    model, _ = symmodels.tree_factory()
    x = torch.randn(5, 6)
    with torch.no_grad():
        want = model(x)
    with runtime.load(tree_pt2, library_path=host_lib) as prog:
        assert [o.name for o in prog.outputs] == LEAVES
        flat = prog.run([x.numpy()])
        got = prog.run([x.numpy()], structured=True)
        as_torch = prog.run([x.numpy()], structured=True, output_type="torch")
        with prog.session() as session:
            in_session = session.run([x.numpy()], structured=True)
    assert len(flat) == 4 and isinstance(got, dict) and list(got) == ["logits", "aux"]
    assert isinstance(got["aux"], tuple) and isinstance(got["aux"][1], list) and len(got["aux"][1]) == 2
    np.testing.assert_allclose(got["logits"], want["logits"].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["aux"][1][1], want["aux"][1][1].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(flat[1], got["aux"][0])
    assert isinstance(as_torch["aux"][0], torch.Tensor)
    np.testing.assert_array_equal(in_session["aux"][1][0], got["aux"][1][0])


def test_nested_outputs_served_by_leaf_name(torch, tree_pt2, models_dir):
    th = pytest.importorskip("tritonclient.http", reason="tritonclient is not installed (pip install -e '.[serve]')")
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e '.[serve]')")
    from tests.integration.test_serve import asgi_server
    from toolchain import runtime
    from toolchain.serve.backend import ProgramBackend
    from toolchain.serve.protocol import V2App

    x = np.load(models_dir / "tree" / "input_0.npy")
    backend = ProgramBackend(runtime.load(tree_pt2), tree_pt2)
    with asgi_server(V2App(backend)) as url:
        client = th.InferenceServerClient(url)
        meta = client.get_model_metadata("tree")
        assert [o["name"] for o in meta["outputs"]] == LEAVES
        inp = th.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        res = client.infer("tree", [inp], outputs=[th.InferRequestedOutput(n) for n in LEAVES])
        for n in LEAVES:
            np.testing.assert_allclose(res.as_numpy(n), np.load(models_dir / "tree" / f"expected_{n}.npy"),
                                       rtol=1e-5, atol=1e-6)
