"""`aoti-toolchain triton-repo`: Triton model configurations derived from packages' contracts (toolchain.serve's
ModelMeta.config, completed for the aoti_toolchain backend) and written as config.pbtxt that Triton's own
protobuf schema parses; the repository layout and its atomic, repeatable writes. Packages here carry only a
contract (no plugin): what triton-repo reads. The real server runs them in tests/integration/test_triton_server.py."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from toolchain.errors import InputError, UsageError, exit_code
from toolchain.serve import triton


def _package(path: Path, inputs: list, outputs: list, symbols: list | None = None) -> Path:
    """A .pt2 holding only a contract (schema 2)."""
    doc = {"schema": 2, "inputs": inputs, "outputs": outputs,
           "symbols": symbols or [{"name": "s0", "min": 1, "max": 32}]}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{path.stem}/extra/aoti_toolchain_contract.json", json.dumps(doc))
    return path


def _t(name: str, dtype: str, *shape) -> dict:
    return {"name": name, "dtype": dtype, "shape": list(shape)}


S0 = {"expr": "s0", "min": 1, "max": 32}
S1 = {"expr": "s1", "min": 1, "max": 32}


def _config(tmp_path: Path, inputs, outputs, symbols: list | None = None, **options) -> dict:
    (model,) = triton.models_of(_package(tmp_path / "m.pt2", inputs, outputs, symbols),
                                options=triton.Options(**options))
    return model.config


def test_batched_when_dimension_0_is_one_symbol_everywhere(tmp_path):
    cfg = _config(tmp_path, [_t("x", "float32", S0, 16), _t("mask", "bool", S0)],
                  [_t("logits", "float32", S0, 8), _t("aux.0", "int64", S0, 2)])
    assert cfg["max_batch_size"] == 32 and cfg["dynamic_batching"] == {}
    assert cfg["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [16]},
                            {"name": "mask", "data_type": "TYPE_BOOL", "dims": []}]
    assert cfg["output"] == [{"name": "logits", "data_type": "TYPE_FP32", "dims": [8]},
                             {"name": "aux.0", "data_type": "TYPE_INT64", "dims": [2]}]
    assert cfg["backend"] == "aoti_toolchain" and "platform" not in cfg
    assert cfg["instance_group"] == [{"kind": "KIND_CPU", "count": 1}]
    assert cfg["parameters"] == {"method": {"string_value": "forward"}}
    # --max-batch caps it, 0 turns batching off (dimension 0 is then part of dims)
    assert _config(tmp_path, [_t("x", "float32", S0, 16)], [_t("y", "float32", S0, 8)], max_batch=8)["max_batch_size"] == 8
    off = _config(tmp_path, [_t("x", "float32", S0, 16)], [_t("y", "float32", S0, 8)], max_batch=0)
    assert off["max_batch_size"] == 0 and "dynamic_batching" not in off and off["input"][0]["dims"] == [-1, 16]


@pytest.mark.parametrize("inputs, outputs", [
    ([_t("x", "float32", S0, 4), _t("y", "float32", S1, 4)], [_t("z", "float32", S0, 4)]),  # two sizes
    ([_t("x", "float32", S0, 4)], [_t("z", "float32", {"expr": "2*s0", "min": 2, "max": 64}, 4)]),  # derived
    ([_t("x", "float32", S0, 4)], [_t("z", "float32", 4, 4)]),  # a static output
    ([_t("x", "float32", 3, S0)], [_t("z", "float32", 3, S0)]),  # dynamic, but not dimension 0
])
def test_not_batched_unless_dimension_0_is_the_same_symbol(tmp_path, inputs, outputs):
    cfg = _config(tmp_path, inputs, outputs)
    assert cfg["max_batch_size"] == 0 and "dynamic_batching" not in cfg
    assert cfg["input"][0]["dims"] == [-1 if isinstance(d, dict) else d for d in inputs[0]["shape"]]


def test_unbounded_batch_dimension_and_options(tmp_path):
    free = {"expr": "s0", "min": 1}
    cfg = _config(tmp_path, [_t("x", "float16", free, 3)], [_t("y", "bfloat16", free, 3)], symbols=[{"name": "s0", "min": 1}],
                  instances=2, kind="gpu", gpus=(0, 1), cuda_graphs=True, batch_delay_us=500)
    assert cfg["max_batch_size"] == triton.UNBOUNDED_BATCH
    assert cfg["dynamic_batching"] == {"max_queue_delay_microseconds": 500}
    assert [t["data_type"] for t in (*cfg["input"], *cfg["output"])] == ["TYPE_FP16", "TYPE_BF16"]
    assert cfg["instance_group"] == [{"kind": "KIND_GPU", "count": 2, "gpus": [0, 1]}]
    assert cfg["parameters"]["cuda_graphs"] == {"string_value": "true"}


def test_config_pbtxt_is_what_tritons_schema_parses(tmp_path):
    """config.pbtxt through Triton's own ModelConfig message (tritonclient's model_config_pb2) and back to
    JSON: the same configuration (as the server reports it at /v2/models/<m>/config)."""
    pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2", reason="tritonclient[grpc] is not installed")
    from google.protobuf import json_format, text_format

    for options in ({}, {"instances": 2, "kind": "gpu", "gpus": (1,), "cuda_graphs": True, "batch_delay_us": 100},
                    {"max_batch": 0}):
        cfg = _config(tmp_path, [_t("x", "float32", S0, 16), _t('we"ird', "int32", S0)],
                      [_t("out", "float32", S0, 8)], **options)
        parsed = json_format.MessageToDict(text_format.Parse(triton.to_pbtxt(cfg), pb2.ModelConfig()),
                                           preserving_proto_field_name=True)
        assert parsed["name"] == cfg["name"] and parsed["backend"] == "aoti_toolchain"
        assert parsed.get("max_batch_size", 0) == cfg["max_batch_size"]
        for key in ("input", "output"):
            assert [(t["name"], t["data_type"], [int(d) for d in t.get("dims", [])]) for t in parsed[key]] == \
                   [(t["name"], t["data_type"], t["dims"]) for t in cfg[key]]
        assert ("dynamic_batching" in parsed) == ("dynamic_batching" in cfg)
        if cfg.get("dynamic_batching"):
            assert int(parsed["dynamic_batching"]["max_queue_delay_microseconds"]) == 100
        group = parsed["instance_group"][0]
        assert group["kind"] == cfg["instance_group"][0]["kind"] and group["count"] == cfg["instance_group"][0]["count"]
        assert group.get("gpus", []) == cfg["instance_group"][0].get("gpus", [])
        assert parsed["parameters"] == cfg["parameters"]


def test_repository_layout_programs_and_rewrites(tmp_path):
    one = _package(tmp_path / "mlp.pt2", [_t("x", "float32", S0, 4)], [_t("y", "float32", S0, 2)])
    prog = tmp_path / "prog"
    prog.mkdir()
    _package(prog / "f.pt2", [_t("x", "float32", 4, 4)], [_t("y", "float32", 4, 2)])
    _package(prog / "e.pt2", [_t("x", "float32", 4, 4)], [_t("h", "float32", 4, 4)])
    (prog / "methods.json").write_text(json.dumps({"schema": 1, "methods": [{"name": "forward", "package": "f.pt2"},
                                                                          {"name": "embed", "package": "e.pt2"}]}))
    repo = tmp_path / "repo"
    models = triton.repository([one, prog], repo)
    assert [(m.name, m.method) for m in models] == [("mlp", "forward"), ("prog.forward", "forward"),
                                                    ("prog.embed", "embed")]
    assert sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file()) == [
        "mlp/1/model.pt2", "mlp/config.pbtxt",
        "prog.embed/1/embed.pt2", "prog.embed/1/forward.pt2", "prog.embed/1/methods.json", "prog.embed/config.pbtxt",
        "prog.forward/1/embed.pt2", "prog.forward/1/forward.pt2", "prog.forward/1/methods.json",
        "prog.forward/config.pbtxt"]
    assert (repo / "mlp" / "1" / "model.pt2").read_bytes() == one.read_bytes()
    manifest = json.loads((repo / "prog.embed" / "1" / "methods.json").read_text())
    assert manifest["methods"] == [{"name": "forward", "package": "forward.pt2"}, {"name": "embed", "package": "embed.pt2"}]
    # the program's bytes are stored once: the second model's files are hard links to the first's
    assert (repo / "prog.embed" / "1" / "embed.pt2").stat().st_ino == (repo / "prog.forward" / "1" / "embed.pt2").stat().st_ino
    assert 'string_value: "embed"' in (repo / "prog.embed" / "config.pbtxt").read_text()
    assert not [p for p in repo.rglob(".*")]  # no temporary file left behind
    # written again as a program (of one method) under the name mlp: the stale model.pt2 goes (the backend
    # would take it before methods.json)
    solo = tmp_path / "solo"
    solo.mkdir()
    _package(solo / "f.pt2", [_t("x", "float32", 4, 4)], [_t("y", "float32", 4, 2)])
    (solo / "methods.json").write_text(json.dumps({"schema": 1, "methods": [{"name": "forward", "package": "f.pt2"}]}))
    triton.repository([solo / "methods.json"], repo, name="mlp")
    assert sorted(p.name for p in (repo / "mlp" / "1").iterdir()) == ["forward.pt2", "methods.json"]
    with pytest.raises(UsageError, match="two models would be named 'mlp'"):
        triton.repository([one, tmp_path / "repo" / "mlp" / ".." / ".." / "mlp.pt2"], tmp_path / "other")
    with pytest.raises(UsageError, match="--name names one program"):
        triton.repository([one, prog], repo, name="x")
    with pytest.raises(InputError, match="neither a .pt2 package nor a program"):
        triton.repository([tmp_path], repo)


def test_command_line(tmp_path):
    one = _package(tmp_path / "mlp.pt2", [_t("x", "float32", S0, 4)], [_t("y", "float32", S0, 2)])

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "toolchain", *map(str, args)], capture_output=True, text=True,
                              cwd=REPO_ROOT, timeout=120)

    proc = cli("triton-repo", one, "--repo", tmp_path / "repo", "--instances", "2", "--max-batch", "8")
    assert proc.returncode == 0, proc.stderr
    assert f"{tmp_path / 'repo' / 'mlp'}: method forward, max_batch_size 8, dynamic batching, 2 x KIND_CPU" in proc.stdout
    assert "tritonserver --model-repository=" in proc.stdout and "aoti-toolchain triton-backend-dir" in proc.stdout
    assert "count: 2" in (tmp_path / "repo" / "mlp" / "config.pbtxt").read_text()
    for args, text in [(["--instances", "0"], "at least 1"), (["--gpus", "0"], "--gpus needs --kind gpu"),
                       (["--max-batch", "-1"], "0 (never batch) or more")]:
        bad = cli("triton-repo", one, "--repo", tmp_path / "r", *args)
        assert bad.returncode == UsageError.exit_code and text in bad.stderr, (args, bad.stderr)
    missing = cli("triton-repo", tmp_path / "nope.pt2", "--repo", tmp_path / "r")
    assert missing.returncode == UsageError.exit_code and "no such file" in missing.stderr
    assert cli("triton-repo", one).returncode == UsageError.exit_code  # --repo is required
    where = cli("triton-backend-dir")
    if where.returncode == 0:  # a built checkout: its default build's backend directory
        path = Path(where.stdout.strip())
        assert (path / "aoti_toolchain" / "libtriton_aoti_toolchain.so").is_file(), where.stdout
    else:
        assert where.returncode == exit_code("load_failed") and "no Triton backend found" in where.stderr
