"""Packages torch wrote itself (torch._inductor.aoti_compile_and_package, no contract of ours), first class:
the plugin's reason for refusing inputs (torch's generated check) reaches Python exceptions, aoti-run and v2
error responses with what it means (the 0/1 specialisation, the dtypes in words); `inspect --json` has typed
inputs derived from the package; `contract add` records a contract into a copy, verified by running it, that
the host then checks; `serve` publishes metadata a tritonclient request can be built from."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO_ROOT

MIN1_REASON = "input_handles[0]: dim value is too small at 0, expected it to be >= 2, but got: 1"
BF16_REASON = "input_handles[0]: unmatched dtype, expected: 15(at::kBFloat16), but got: 6"


class _MLP:
    @staticmethod
    def make(torch, dtype=None):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
        return m.to(dtype) if dtype is not None else m


class _Two:
    @staticmethod
    def make(torch):
        class Two(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(16, 16)

            def forward(self, x, m):
                return self.a(x) * m, (x + 1).sum(1)

        torch.manual_seed(0)
        return Two().eval()


@pytest.fixture(scope="module")
def theirs(torch, tmp_path_factory):
    """Packages written by torch's own aoti_compile_and_package (the plugin without libtorch, so that a host
    without torch can load it): name -> (pt2, module)."""
    from toolchain.export import inductor_configs

    out = tmp_path_factory.mktemp("theirs")
    made = {}

    def package(name, module, args, dynamic=None, weights="embedded"):
        ep = torch.export.export(module, args, dynamic_shapes=dynamic)
        path = out / f"{name}.pt2"
        torch._inductor.aoti_compile_and_package(ep, package_path=str(path), inductor_configs=inductor_configs(weights))
        made[name] = (path, module)

    mlp = _MLP.make(torch)
    package("min1", mlp, (torch.randn(8, 16),), {"input": {0: torch.export.Dim("batch", min=1, max=64)}})
    bf16 = _MLP.make(torch, torch.bfloat16)
    package("bf16", bf16, (torch.randn(8, 16, dtype=torch.bfloat16),))
    b = torch.export.Dim("b", min=2, max=128)
    package("two", _Two.make(torch), (torch.randn(8, 16), torch.randn(8, 16)), {"x": {0: b}, "m": {0: b}},
            weights="blob")
    return made


def _has_contract(pt2: Path) -> bool:
    with zipfile.ZipFile(pt2) as zf:
        return any(n.endswith("aoti_toolchain_contract.json") for n in zf.namelist())


def _cli(*args, **kw):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "toolchain", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO_ROOT, env=env, **kw)


def test_python_errors_carry_the_plugins_reason_and_what_it_means(theirs, host_lib):
    from toolchain import runtime
    from toolchain.errors import InputError

    pt2, _ = theirs["min1"]
    assert not _has_contract(pt2)
    with runtime.load(pt2, library_path=host_lib) as prog, pytest.raises(InputError) as exc:
        prog.run([np.ones((1, 16), np.float32)])
    msg = str(exc.value)
    assert MIN1_REASON in msg and "specialises sizes 0 and 1" in msg and "min=1 is compiled for >= 2" in msg, msg
    pt2, _ = theirs["bf16"]
    with runtime.load(pt2, library_path=host_lib) as prog, pytest.raises(InputError) as exc:
        prog.run([np.ones((8, 16), np.float32)])
    msg = str(exc.value)
    assert BF16_REASON in msg and "compiled for bfloat16 there and was given float32" in msg, msg


def test_aoti_run_prints_the_reason_and_what_it_means(theirs, host_build, tmp_path):
    pt2, _ = theirs["bf16"]
    np.save(tmp_path / "x.npy", np.ones((8, 16), np.float32))
    p = subprocess.run([host_build.aoti_run, pt2, "-i", tmp_path / "x.npy", "-o", tmp_path / "out"],
                       capture_output=True, text=True)
    assert p.returncode != 0 and BF16_REASON in p.stderr, p.stderr
    assert "compiled for bfloat16 there and was given float32" in p.stderr, p.stderr


def test_inspect_json_has_typed_inputs_derived_from_the_package(theirs):
    pt2, _ = theirs["two"]
    p = _cli("inspect", "--json", pt2)
    assert p.returncode == 0, p.stderr
    model = json.loads(p.stdout)["files"][0]["model"]
    assert model["has_contract"] is False and model["contract_source"] == "derived"
    (x, m) = model["inputs"]
    sym = x["shape"][0]["expr"]
    # the two inputs share one size symbol (torch's), with the range the compiled check enforces
    assert x["dtype"] == m["dtype"] == "float32" and x["layout"] == "contiguous"
    assert x["shape"] == m["shape"] == [{"expr": sym, "min": 2, "max": 128}, 16]
    assert model["symbols"] == [{"name": sym, "min": 2, "max": 128, "inputs": [f"{x['name']}:0", f"{m['name']}:0"]}]
    assert [o["shape"] for o in model["outputs"]] == [[{"expr": sym, "min": 2, "max": 128}, 16],
                                                     [{"expr": sym, "min": 2, "max": 128}]]
    text = _cli("inspect", pt2).stdout
    assert "derived from torch's generated input checks" in text and f"float32[{sym}=2..128, 16]" in text


def test_contract_add_records_a_verified_contract_the_host_checks(theirs, host_lib, tmp_path, torch):
    from toolchain import runtime
    from toolchain.errors import InputError

    pt2, module = theirs["min1"]
    before = hashlib.sha256(pt2.read_bytes()).hexdigest()
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "min1.contract.pt2"
    p = _cli("contract", "add", pt2, "--example-inputs", tmp_path / "x.npy", "-o", out)
    assert p.returncode == 0, p.stderr
    assert "verified on the examples" in p.stdout
    assert hashlib.sha256(pt2.read_bytes()).hexdigest() == before  # the input is never modified
    assert _has_contract(out) and not list(tmp_path.glob(".min1.contract.pt2.*"))  # no temporary left over
    again = _cli("contract", "add", out, "--example-inputs", tmp_path / "x.npy", "-o", tmp_path / "x2.pt2")
    assert again.returncode == 3 and "already records a contract" in again.stderr
    with runtime.load(out, library_path=host_lib) as prog:
        assert prog.contract() is not None
        for rows in (2, 64):
            a = np.random.default_rng(rows).standard_normal((rows, 16)).astype(np.float32)
            (y,) = prog.run([a])
            with torch.no_grad():
                np.testing.assert_allclose(y, module(torch.from_numpy(a)).numpy(), rtol=1e-4, atol=1e-5)
        # the host refuses before the plugin runs, with what the 0/1 specialisation means
        with pytest.raises(InputError) as exc:
            prog.run([np.ones((1, 16), np.float32)])
        assert "must be 2..64" in str(exc.value) and "specialises sizes 0 and 1" in str(exc.value)
        with pytest.raises(InputError, match="must be 2..64"):
            prog.run([np.ones((65, 16), np.float32)])
    # examples the plugin wasn't compiled for are refused before anything runs, and nothing is written
    np.save(tmp_path / "bad.npy", np.ones((8, 15), np.float32))
    bad = _cli("contract", "add", pt2, "--example-inputs", tmp_path / "bad.npy", "-o", tmp_path / "bad.pt2")
    assert bad.returncode == 3 and "dimension 1 is 15, the plugin was compiled for 16" in bad.stderr, bad.stderr
    assert not (tmp_path / "bad.pt2").exists()


def test_serve_answers_a_request_built_from_its_metadata(theirs, host_lib):
    th = pytest.importorskip("tritonclient.http", reason="tritonclient is not installed (pip install -e '.[serve]')")
    pytest.importorskip("uvicorn", reason="uvicorn is not installed (pip install -e '.[serve]')")
    import torch

    from tests.integration.test_serve import asgi_server
    from toolchain import runtime
    from toolchain.serve.backend import ProgramBackend
    from toolchain.serve.protocol import V2App

    pt2, module = theirs["two"]
    backend = ProgramBackend(runtime.load(pt2, library_path=host_lib), pt2)
    with asgi_server(V2App(backend)) as url:
        client = th.InferenceServerClient(url)
        meta = client.get_model_metadata("two")
        assert [i["datatype"] for i in meta["inputs"]] == ["FP32", "FP32"]
        assert [i["shape"] for i in meta["inputs"]] == [[-1, 16], [-1, 16]]
        assert [o["shape"] for o in meta["outputs"]] == [[-1, 16], [-1]]
        rng = np.random.default_rng(1)
        arrays, request = [], []
        for spec in meta["inputs"]:  # as a generic client does: -1 becomes a size of its choosing
            a = rng.standard_normal([5 if d == -1 else d for d in spec["shape"]]).astype(np.float32)
            inp = th.InferInput(spec["name"], list(a.shape), spec["datatype"])
            inp.set_data_from_numpy(a)
            arrays.append(a)
            request.append(inp)
        result = client.infer("two", request)
        with torch.no_grad():
            want = module(*(torch.from_numpy(a) for a in arrays))
        for spec, ref in zip(meta["outputs"], want, strict=True):
            np.testing.assert_allclose(result.as_numpy(spec["name"]), ref.numpy(), rtol=1e-4, atol=1e-5)
        # the plugin's own reason reaches the v2 error response (batch 1: torch compiled >= 2)
        one = [th.InferInput(s["name"], [1, 16], "FP32") for s in meta["inputs"]]
        for inp in one:
            inp.set_data_from_numpy(np.ones((1, 16), np.float32))
        with pytest.raises(th.InferenceServerException) as exc:
            client.infer("two", one)
        assert "dimension 0 is 1, the model takes 2..128" in exc.value.message(), exc.value.message()
        assert "specialises sizes 0 and 1" in exc.value.message(), exc.value.message()


def test_serve_refuses_what_it_cannot_describe_with_the_command_that_fixes_it(theirs, host_lib, tmp_path):
    """A package whose wrapper source is gone: nothing can be derived, so serve refuses instead of publishing
    metadata without datatypes, naming `contract add`."""
    from toolchain import runtime
    from toolchain.errors import InputError
    from toolchain.serve.backend import ProgramBackend

    pt2, _ = theirs["min1"]
    stripped = tmp_path / "stripped.pt2"
    with zipfile.ZipFile(pt2) as src, zipfile.ZipFile(stripped, "w") as dst:
        for info in src.infolist():
            if not info.filename.endswith(".wrapper.cpp"):
                dst.writestr(info, src.read(info))
    with runtime.load(stripped, library_path=host_lib) as prog, pytest.raises(InputError) as exc:
        ProgramBackend(prog, stripped)
    assert "contract add" in str(exc.value) and "not served" in str(exc.value), str(exc.value)


def test_triton_config_is_generated_from_the_derived_contract(theirs, tmp_path):
    """Batch sizes from 2 only (torch's 0/1 specialisation): Triton's batcher would send 1 row, so the model is
    not batched and dimension 0 stays in the dims with -1."""
    pt2, _ = theirs["two"]
    p = _cli("triton-repo", pt2, "--repo", tmp_path / "repo")
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "repo" / "two" / "config.pbtxt").read_text()
    assert "max_batch_size: 0" in text, text
    assert text.count("data_type: TYPE_FP32 dims: [ -1, 16 ]") == 3 and "data_type: TYPE_FP32 dims: [ -1 ]" in text, text


def test_a_plugin_without_get_last_error_still_gives_its_reason(theirs, host_lib, tmp_path, capfd):
    """torch < 2.13 plugins have no AOTInductorGetLastError: they print their reason to std::cerr and return a bare
    error code. Test scaffolding stands in for one: torch 2.13's plugin with that export's name changed in its
    dynamic string table (dlsym no longer finds it). The host collects what the plugin writes to std::cerr during
    the run, and the stream still shows it."""
    from toolchain import runtime
    from toolchain.errors import InputError

    pt2, _ = theirs["min1"]
    with zipfile.ZipFile(pt2) as zf:
        data = zf.read(next(n for n in zf.namelist() if n.endswith(".so")))
    name = b"AOTInductorGetLastError\0"
    assert name in data
    old = tmp_path / "old.so"
    old.write_bytes(data.replace(name, b"AOTInductorGetLastErrXr\0"))
    capfd.readouterr()
    with runtime.load(old, library_path=host_lib) as prog, pytest.raises(InputError) as exc:
        prog.run([np.ones((1, 16), np.float32)])
    msg = str(exc.value)
    assert MIN1_REASON in msg and "specialises sizes 0 and 1" in msg and "reason is on stderr" not in msg, msg
    assert MIN1_REASON in capfd.readouterr().err  # what the plugin prints still reaches stderr


def test_a_plugins_refusal_reaches_the_v2_error_and_the_log(theirs, host_lib, caplog):
    """Past the server's own checks (the derived contract says 2..64; the plugin is asked anyway, as a request
    the metadata allows could be), the plugin's reason is the 400 response's message and a log line."""
    import logging

    from toolchain import runtime
    from toolchain.serve.backend import ProgramBackend
    from toolchain.serve.protocol import V2Error

    pt2, _ = theirs["bf16"]
    backend = ProgramBackend(runtime.load(pt2, library_path=host_lib), pt2)
    model = backend.models["bf16"]
    with caplog.at_level(logging.WARNING, logger="toolchain.serve"), pytest.raises(V2Error) as exc:
        backend.run_one(model, [np.ones((8, 16), np.float32)])
    assert exc.value.status == 400 and BF16_REASON in exc.value.message, exc.value.message
    assert "compiled for bfloat16 there and was given float32" in exc.value.message
    assert any(BF16_REASON in r.getMessage() for r in caplog.records), caplog.text
    backend.close()
