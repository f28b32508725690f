"""Fallback-op coverage: every op torch's fallback list and shim headers declare, per device, against what the
host runtime implements (toolchain/spec/shims.toml).

    python -m toolchain.coverage --markdown docs/ops-coverage.md   re-extract toolchain/torch_ops.json from the
                                                                   installed torch and rewrite the table
    python -m toolchain.coverage --check                           exit 1 when either is not current

Sources, read as text (nothing of torch is imported or executed):
- torchgen/aoti/fallback_ops.py: `inductor_fallback_ops` and `aten_shimified_ops`, parsed with ast and read
  with ast.literal_eval: the ops, their versions (vN) and the "since" key giving the first torch version
  that declares each (top level for v1, inside the vN entry for later variants). No "since" means the op
  predates the versioned shim ABI: the file says such ops are available since torch 2.9.
- torch/include/torch/csrc/inductor/aoti_torch/generated/c_shim_cpu.h, c_shim_cuda.h, c_shim_aten.h: which
  device declares a shim for each op (torchgen emits one only where the op has a kernel for that device).
- torch/include/torch/csrc/inductor/aoti_torch/c/shim_cpu.h: hand-written CPU shims inductor calls for
  mkldnn/onednn ops (e.g. the LSTM layer mkldnn_rnn_layer), absent from fallback_ops.py; their op names
  are the `torch.ops` ops inductor lowers to them (_EXTRA_CPU).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

from toolchain.atomic import write_if_changed
from toolchain.errors import InputError, ToolchainError, exit_code
from toolchain.spec import load_spec
from toolchain.torch_ops import DATA_FILE, TorchOp, TorchOps, load, parse, to_json

REPO_ROOT = Path(__file__).resolve().parent.parent
DOC = REPO_ROOT / "docs" / "ops-coverage.md"
REGENERATE = "python -m toolchain.coverage --markdown docs/ops-coverage.md"
SHIM_DIR = "include/torch/csrc/inductor/aoti_torch"
HEADERS = {"cpu": "generated/c_shim_cpu.h", "cuda": "generated/c_shim_cuda.h", "aten": "generated/c_shim_aten.h"}
EXTRA_CPU_HEADER = "c/shim_cpu.h"
BASELINE = "2.9"  # fallback_ops.py: an op without "since" is available since torch 2.9

# c/shim_cpu.h (hand-written, not in fallback_ops.py): shim suffix -> the torch.ops op inductor lowers to it.
_EXTRA_CPU: dict[str, str] = {
    "mkldnn_rnn_layer": "aten.mkldnn_rnn_layer.default",
    "mkldnn__convolution_pointwise": "mkldnn._convolution_pointwise.default",
    "mkldnn__convolution_pointwise_binary": "mkldnn._convolution_pointwise.binary",
    "mkldnn__convolution_pointwise_binary_": "mkldnn._convolution_pointwise_.binary",
    "mkldnn__convolution_transpose_pointwise": "mkldnn._convolution_transpose_pointwise.default",
    "_linear_pointwise": "mkldnn._linear_pointwise.default",
    "_linear_pointwise_binary": "mkldnn._linear_pointwise.binary",
    "_mkl_linear": "mkl._mkl_linear.default",
    "_qlinear_pointwise_tensor": "onednn.qlinear_pointwise.tensor",
    "_qlinear_pointwise_binary_tensor": "onednn.qlinear_pointwise.binary_tensor",
    "_qconv_pointwise_tensor": "onednn.qconv_pointwise.tensor",
    "_qconv2d_pointwise_binary_tensor": "onednn.qconv2d_pointwise.binary_tensor",
    "_weight_int4pack_mm_cpu_tensor": "quantized.int4mm_packed_weight_cpu.default",
    "_c10d_functional_all_reduce": "_c10d_functional.all_reduce.default",
    "_c10d_functional_all_reduce_": "_c10d_functional.all_reduce_.default",
    "_c10d_functional_wait_tensor": "_c10d_functional.wait_tensor.default",
}

_DECL = re.compile(r"AOTI_TORCH_EXPORT\s+AOTITorchError\s+(aoti_torch_\w+)\s*\(")
_SINCE = re.compile(r"^TORCH_VERSION_(\d+)_(\d+)_\d+$")


class CoverageError(InputError):
    """The installed torch's files are missing or not in the shape this reader knows."""


def torch_root() -> Path:
    """The installed torch package directory, found without importing torch."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        msg = "torch is not installed: the fallback-op list and the shim headers come from it"
        from toolchain.hostlib import pip_install

        raise CoverageError(msg, fix=f"{pip_install('torch')}, or run only --check of the markdown")
    return Path(next(iter(spec.submodule_search_locations)))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"{path}: cannot be read: {exc.strerror}"
        raise CoverageError(msg, fix="reinstall torch (pip install --force-reinstall torch)") from None


def _since(value: object, where: str) -> str:
    if value is None:
        return BASELINE
    m = _SINCE.match(value) if isinstance(value, str) else None
    if m is None:
        msg = f"{where}: since {value!r} is not TORCH_VERSION_X_Y_Z"
        raise CoverageError(msg, fix="update toolchain/coverage.py for this torch's fallback_ops.py format")
    return f"{m.group(1)}.{m.group(2)}"


def read_fallback_ops(path: Path) -> list[tuple[str, str, int, str]]:
    """(list name, op, variant, since) for every op and variant of fallback_ops.py, parsed with ast."""
    tree = ast.parse(_read(path), str(path))
    lists: dict[str, object] = {}
    for node in tree.body:
        target: ast.expr
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("inductor_fallback_ops", "aten_shimified_ops"):
            try:
                lists[target.id] = ast.literal_eval(value)
            except ValueError:
                msg = f"{path}: {target.id} is not a literal dict"
                raise CoverageError(msg, fix="update toolchain/coverage.py for this torch") from None
    if "inductor_fallback_ops" not in lists:
        msg = f"{path}: no inductor_fallback_ops dict"
        raise CoverageError(msg, fix="update toolchain/coverage.py for this torch")
    out = []
    for name, ops in lists.items():
        if not isinstance(ops, dict):
            msg = f"{path}: {name} is not a dict"
            raise CoverageError(msg, fix="update toolchain/coverage.py for this torch")
        for op, info in ops.items():
            where = f"{path}: {name}[{op!r}]"
            if not isinstance(op, str) or op.count(".") != 2 or not isinstance(info, dict):
                msg = f"{where}: not 'namespace.op.overload': {{...}}"
                raise CoverageError(msg, fix="update toolchain/coverage.py for this torch")
            out.append((name, op, 1, _since(info.get("since"), where)))
            for key, sub in info.items():
                m = re.fullmatch(r"v(\d+)", str(key))
                if m and int(m.group(1)) > 1:
                    out.append((name, op, int(m.group(1)), _since(sub.get("since") if isinstance(sub, dict)
                                                                  else None, f"{where}[{key!r}]")))
    return out


def header_shims(path: Path) -> list[str]:
    return _DECL.findall(_read(path))


def shim_suffix(op: str, variant: int) -> str:
    """torchgen's C name of an op: aten.sort.stable -> sort_stable, aten.topk.default -> topk, v2 -> _v2."""
    _, name, overload = op.split(".")
    return name + ("" if overload == "default" else f"_{overload}") + ("" if variant == 1 else f"_v{variant}")


def extract(root: Path | None = None) -> TorchOps:
    """toolchain/torch_ops.json's content from the installed torch."""
    root = torch_root() if root is None else root
    version_file = root / "version.py"
    m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", _read(version_file), re.M)
    version = m.group(1) if m else "unknown"
    fallback = root.parent / "torchgen" / "aoti" / "fallback_ops.py"
    declared: dict[str, set[str]] = {}
    for dev, rel in HEADERS.items():
        path = root / SHIM_DIR / rel
        if not path.is_file():
            msg = f"{path}: missing from the installed torch {version}, so its {dev} column has no source"
            raise CoverageError(msg, fix="install a torch wheel that ships the AOTInductor shim headers")
        declared[dev] = set(header_shims(path))
    ops: list[TorchOp] = []
    claimed: set[str] = set()
    for list_name, op, variant, since in read_fallback_ops(fallback):
        suffix = shim_suffix(op, variant)
        devs = ("aten",) if list_name == "aten_shimified_ops" else ("cpu", "cuda")
        shims = {d: f"aoti_torch_{d}_{suffix}" for d in devs if f"aoti_torch_{d}_{suffix}" in declared[d]}
        claimed.update(shims.values())
        ops.append(TorchOp(op, variant, since, list_name, shims))
    for dev, names in declared.items():
        stray = sorted(names - claimed)
        if stray:
            msg = (f"{root / SHIM_DIR / HEADERS[dev]} declares {len(stray)} shim(s) no op of fallback_ops.py names "
                   f"({', '.join(stray[:4])}): the name rule (toolchain.coverage.shim_suffix) does not hold")
            raise CoverageError(msg, fix="update toolchain/coverage.py for this torch")
    extra = root / SHIM_DIR / EXTRA_CPU_HEADER
    for name in sorted(set(header_shims(extra))):
        suffix = name.removeprefix("aoti_torch_cpu_")
        if suffix not in _EXTRA_CPU:
            msg = f"{extra}: declares {name}, which toolchain/coverage.py does not map to an op"
            raise CoverageError(msg, fix="add it to _EXTRA_CPU in toolchain/coverage.py (the op inductor lowers to it)")
        ops.append(TorchOp(_EXTRA_CPU[suffix], 1, "-", EXTRA_CPU_HEADER, {"cpu": name}))
    ops.sort(key=lambda o: (o.op.split(".")[0] != "aten", o.op, o.variant))
    sources = {"ops and since": "torchgen/aoti/fallback_ops.py (inductor_fallback_ops, aten_shimified_ops)",
               **{dev: f"torch/{SHIM_DIR}/{rel}" for dev, rel in HEADERS.items()},
               "cpu extras": f"torch/{SHIM_DIR}/{EXTRA_CPU_HEADER}"}
    return TorchOps(version, sources, tuple(ops))


# -- the markdown ----------------------------------------------------------------------------------------

def totals(data: TorchOps, implemented: set[str]) -> dict[str, tuple[int, int]]:
    """device -> (shims implemented, shims torch declares)."""
    out = {}
    for dev in ("cpu", "cuda", "aten"):
        names = [o.shims[dev] for o in data.ops if dev in o.shims]
        out[dev] = (sum(1 for n in names if n in implemented), len(names))
    return out


def _cell(op: TorchOp, dev: str, implemented: set[str]) -> tuple[str, str]:
    name = op.shims.get(dev)
    if name is None:
        return "-", ""
    return f"`{name}`", "yes" if name in implemented else "**no**"


def render(data: TorchOps, implemented: set[str]) -> str:
    t = totals(data, implemented)
    extra = sum(1 for o in data.ops if o.source == EXTRA_CPU_HEADER)
    lines = [
        f"<!-- GENERATED FILE: do not edit. Regenerate with `{REGENERATE}`. -->",
        "# Fallback-op coverage",
        "",
        "Every op for which torch declares an AOTInductor fallback shim, per device, and whether the host",
        "runtime implements it (its shim is in `toolchain/spec/shims.toml`). A plugin that imports a shim the",
        "host lacks is refused at load; `aoti-toolchain verify` reports it beforehand as `missing-shim` and",
        "`aoti-toolchain inspect` lists the ops a package calls.",
        "",
        f"Generated by `{REGENERATE}` from torch {data.torch}: it extracts `toolchain/torch_ops.json` from the",
        "installed torch (read as text, nothing imported) and renders this table from it and `shims.toml`;",
        "`tests/unit/test_coverage.py` fails when either is stale.",
        "",
        "| device | implemented | torch declares |",
        "|---|---|---|",
        f"| CPU | {t['cpu'][0]} | {t['cpu'][1]} ({t['cpu'][1] - extra} in `c_shim_cpu.h`, {extra} in `c/shim_cpu.h`) |",
        f"| CUDA | {t['cuda'][0]} | {t['cuda'][1]} (`c_shim_cuda.h`) |",
        f"| device-agnostic | {t['aten'][0]} | {t['aten'][1]} (`c_shim_aten.h`) |",
        "",
        "Columns and their sources:",
        "",
    ]
    lines += [f"- {k}: `{v}`" for k, v in data.sources.items()]
    lines += [
        "- op: `namespace.name.overload` as `torch.ops` spells it; `(vN)` is a later version of the op's shim",
        "  (its name ends in `_vN`). The shim name is `aoti_torch_<device>_<name>[_<overload>][_vN]`, the",
        "  overload left out when it is `default`.",
        "- since: the `since` key of `fallback_ops.py` (`TORCH_VERSION_X_Y_Z`, of the vN entry for a later",
        "  variant). Without one the op predates the versioned shim ABI: `fallback_ops.py` says such ops are",
        f"  available since torch {BASELINE}, shown as {BASELINE}. `-`: hand-written in `c/shim_cpu.h`, not versioned.",
        "- a device column is `-` where torch declares no shim for that device (torchgen emits one only",
        "  where the op has a kernel for it).",
        "",
        "| op | since | CPU shim | CPU | CUDA shim | CUDA |",
        "|---|---|---|---|---|---|",
    ]
    for o in data.ops:
        if o.source == "aten_shimified_ops":
            continue
        cs, cst = _cell(o, "cpu", implemented)
        gs, gst = _cell(o, "cuda", implemented)
        lines.append(f"| `{o.label}` | {o.since} | {cs} | {cst} | {gs} | {gst} |")
    lines += ["", "Device-agnostic shims (`c_shim_aten.h`, torch's `aten_shimified_ops`: they go through the "
              "dispatcher, for the stable ABI; inductor does not emit them as fallbacks):", "",
              "| op | since | shim | implemented |", "|---|---|---|---|"]
    for o in data.ops:
        if o.source == "aten_shimified_ops":
            s, st = _cell(o, "aten", implemented)
            lines.append(f"| `{o.label}` | {o.since} | {s} | {st} |")
    return "\n".join(lines) + "\n"


def implemented_shims() -> set[str]:
    return {s.name for s in load_spec().shims}


def check(doc: Path = DOC, with_torch: bool = True) -> list[str]:
    """What is stale: toolchain/torch_ops.json against the installed torch (when `with_torch`), the
    markdown against the data and shims.toml. Empty when both are current."""
    stale = []
    data = load(DATA_FILE)
    if with_torch:
        fresh = extract()
        if to_json(fresh) != to_json(data):
            stale.append(f"{DATA_FILE.relative_to(REPO_ROOT)} does not match the installed torch {fresh.torch}")
            data = fresh
    text = doc.read_text(encoding="utf-8") if doc.is_file() else None
    if text != render(data, implemented_shims()):
        stale.append(f"{doc} is not current" if text is not None else f"{doc} is missing")
    return stale


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m toolchain.coverage", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--markdown", type=Path, metavar="FILE", help=f"write the table (default {DOC.relative_to(REPO_ROOT)})")
    p.add_argument("--check", action="store_true", help="exit 1 when the data or the table is not current")
    p.add_argument("--no-torch", action="store_true", help="use the committed toolchain/torch_ops.json as is")
    args = p.parse_args(argv)
    doc = args.markdown or DOC
    try:
        if args.check:
            stale = check(doc, with_torch=not args.no_torch)
            for s in stale:
                print(f"stale: {s}", file=sys.stderr)
            if stale:
                print(f"regenerate with: {REGENERATE}", file=sys.stderr)
                return exit_code("failed")
            return exit_code("ok")
        data = load(DATA_FILE) if args.no_torch else extract()
        parse_check = parse(json.loads(to_json(data)))  # what is written reads back
        for path, text in ((DATA_FILE, to_json(parse_check)), (doc, render(parse_check, implemented_shims()))):
            print(f"{'wrote' if write_if_changed(path, text) else 'unchanged'} {path}")
    except ToolchainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return exit_code("ok")


if __name__ == "__main__":
    raise SystemExit(main())
