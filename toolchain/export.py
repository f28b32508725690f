"""torch module + example inputs -> a `.pt2` built for our host (optional dependency: torch).

What this does that a bare `aoti_compile_and_package` call doesn't:
- `link_libtorch=False`, so the plugin needs no LibTorch; our host supplies every `aoti_torch_*`.
- `always_keep_tensor_constants=True`, so small constants stay swappable weights.
- weights embedded in the .so, or in a `*.wrapper_weights.blob` inside the package.
- TMPDIR and the inductor cache inside the build dir (inductor writes ~500 MB of headers to TMPDIR).
- the input/output contract recorded in the package (`<pkg>/extra/aoti_toolchain_contract.json`), which
  the runtime checks every Run against: plugins don't check their inputs themselves.
- no executable stack: inductor's link leaves one (the weights object lacks .note.GNU-stack) and no
  inductor config passes -Wl,-z,noexecstack, so the flag is cleared in the package (clear_exec_stack).
- a copy of the inductor configs (aoti_compile_and_package modifies the dict it is given) and an
  atomic write: a failed export leaves no half-written package.
- vectorised kernels: with link_libtorch=False inductor's own ISA probe (build a .so calling
  at::vec's exp, dlopen it) fails, because Sleef comes from libtorch, and every kernel is compiled
  scalar; the failed result is cached in the process and the probe .so in the inductor cache. We
  probe instead, in our own directory, with the Sleef the host runtime links (libsleef), and pass
  the result as `cpp.vec_isa_ok=True` + `cpp.simdlen`, leaving inductor's caches as we found them.
- the range asked, or a failed export: torch specialises sizes 0 and 1, so `Dim(min=1)` would compile the
  plugin for >= 2. When a dynamic dimension may be 0 or 1, export traces and compiles with torch's
  size-oblivious reasoning (`torch.fx.experimental._config.backed_size_oblivious`); where the model still
  branches on a size being 1, the compiled plugin's own input check (read from the generated wrapper) is
  narrower than asked, and export fails naming the dimension, that range and the guards torch added, unless
  the caller accepts it (allow_narrower). The contract is built from the program's size symbols
  (toolchain.export_contract), so inputs that share a dimension share its symbol.
- progress on stderr for each long step (toolchain.progress), and torch's known deprecation warnings
  filtered.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from toolchain import progress
from toolchain.atomic import current_umask, replacing, write_text
from toolchain.elf.patcher import rebind_unique_in_package
from toolchain.errors import ExportError, InputError, ToolchainError
from toolchain.export_contract import (
    asked_ranges,
    compiled_input_ranges,
    contract_of,
    narrow_to_compiled,
    narrower_than_asked,
)
from toolchain.spec import load_abi
from toolchain.spec.records import RECORDS

_LAYOUT = load_abi().package  # the package's member names and schema versions (toolchain/spec/abi.toml)
CONTRACT_ENTRY = _LAYOUT.contract_entry
CONSTANTS_ENTRY = _LAYOUT.constants_entry  # blob-mode constant layouts (runtime/src/host/weights.h)
CONTRACT_SCHEMA = _LAYOUT.contract_schema
PLUGIN_DIR = _LAYOUT.plugin_dir
WEIGHTS_MODES = ("embedded", "blob")


def default_build_dir() -> Path:
    """Where exports put torch's compile cache and temporary files when no build dir is given: the user's
    cache dir ($XDG_CACHE_HOME/aoti-toolchain, else ~/.cache/aoti-toolchain), never the current directory."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"  # the XDG spec ignores a relative one
    return root / "aoti-toolchain"


def prepare_build_dirs(build_dir: Path | None = None) -> Path:
    """Point TMPDIR and TORCHINDUCTOR_CACHE_DIR inside `build_dir` (default: default_build_dir()), before torch
    compiles anything."""
    if build_dir is None:
        # shared with the runtime's plugin cache, which refuses a group- or world-writable root: 0700, as it makes it
        default_build_dir().mkdir(mode=0o700, parents=True, exist_ok=True)
    root = (Path(build_dir if build_dir is not None else default_build_dir()) / "torch").resolve()
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    (root / "inductor-cache").mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(root / "tmp")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(root / "inductor-cache")
    tempfile.tempdir = None  # tempfile caches the directory it found first
    return root


# Triton-only GEMM/conv backends: the plugin then needs no aoti_torch_cuda_mm_out/addmm_out/convolution
# fallbacks (the upstream CUDA backend does the same). Our runtime implements those fallbacks
# (cuBLAS; cuDNN, else a direct convolution, plain and transposed), so this is optional.
TRITON_ONLY = {
    "max_autotune": True,
    "max_autotune_gemm_backends": "TRITON",
    "max_autotune_conv_backends": "TRITON",
}


def cuda_configs(triton_only: bool = False) -> dict[str, Any]:
    """Configs for a CUDA plugin: kernels embedded in the .so when this torch can (no cubin_dir needed)."""
    cfg: dict[str, Any] = dict(TRITON_ONLY) if triton_only else {}
    try:
        from torch._inductor import config as inductor_config

        if hasattr(inductor_config.aot_inductor, "embed_kernel_binary"):
            cfg["aot_inductor.embed_kernel_binary"] = True
    except ImportError:
        pass
    return cfg


def inductor_configs(weights: str) -> dict[str, Any]:
    if weights not in WEIGHTS_MODES:
        msg = f"weights={weights!r}: must be one of {', '.join(WEIGHTS_MODES)}"
        raise InputError(msg)
    cfg: dict[str, Any] = {
        "aot_inductor.link_libtorch": False,
        "always_keep_tensor_constants": True,
    }
    if weights == "blob":
        cfg["aot_inductor.package_constants_in_so"] = False
        cfg["aot_inductor.package_constants_on_disk_format"] = "binary_blob"
    return cfg


_PROBE_LOAD = "import ctypes, os, sys; ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)"


def probe_vec_isa(build_dir: Path) -> tuple[str, int] | None:
    """The widest vector ISA whose inductor kernels build and load against the host's Sleef.

    Returns (inductor's ISA name, bit width), or None when no ISA works (kernels stay scalar). Candidates
    are inductor's, in its order, that this CPU has; each is compiled from inductor's own probe code with
    that ISA's flags, linked to libsleef and dlopened (RTLD_NOW) in a subprocess. Results are kept in
    `build_dir/torch/isa-probe/` (one file per ISA, torch version and compiler), never in inductor's cache.
    """
    import torch
    from torch._inductor import cpu_vec_isa
    from torch._inductor.cpp_builder import get_cpp_compiler
    from torch.utils.cpp_extension import include_paths

    capability = os.environ.get("ATEN_CPU_CAPABILITY", "").lower()
    if capability == "default":
        return None
    if platform_machine() not in ("x86_64", "AMD64", "aarch64"):
        return None
    have = set(cpu_vec_isa.x86_isa_checker()) if platform_machine() in ("x86_64", "AMD64") else {"asimd"}
    candidates = [isa for isa in cpu_vec_isa.supported_vec_isa_list
                  if all(flag in have for flag in str(isa).split())
                  and (not capability or capability in str(isa))]
    root = (build_dir / "torch" / "isa-probe").resolve()
    root.mkdir(parents=True, exist_ok=True)
    cxx = get_cpp_compiler()
    for isa in candidates:
        tag = f"{str(isa).replace(' ', '-')}-torch{torch.__version__}-{Path(cxx).name}"
        ok, bad = root / f"{tag}.ok", root / f"{tag}.failed"
        if bad.exists():
            continue
        if not ok.exists():
            # Source and library in a private directory, the verdict written atomically: exports running at
            # once (parallel tests, two shells) never compile a file another one is rewriting, so a race
            # can't record a working ISA as failed.
            with tempfile.TemporaryDirectory(prefix="probe-", dir=root) as scratch:
                src, so = Path(scratch) / "probe.cpp", Path(scratch) / f"{tag}.so"
                src.write_text(cpu_vec_isa.VecISA._avx_code)
                cmd = [cxx, "-shared", "-fPIC", "-O1", "-std=c++17", *isa.build_arch_flags().split(),
                       *[f"-D{m}" for m in isa.build_macro()], *[f"-I{p}" for p in include_paths()],
                       str(src), "-o", str(so), "-lsleef"]
                built = subprocess.run(cmd, capture_output=True, text=True)
                loads = built.returncode == 0 and subprocess.run(
                    [sys.executable, "-c", _PROBE_LOAD, str(so)], capture_output=True).returncode == 0
            write_text(ok if loads else bad, " ".join(cmd) + "\n" + built.stderr[-2000:])
            if not loads:
                continue
        return str(isa), isa.bit_width()
    return None


def platform_machine() -> str:
    import platform

    return platform.machine()


def _package_prefix(path: Path) -> str:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    prefixes = {n.split("/", 1)[0] for n in names if PLUGIN_DIR in n}
    if len(prefixes) != 1:
        msg = f"{path}: expected one model directory in the package, found {sorted(prefixes)}"
        raise ExportError(msg)
    return prefixes.pop()


def add_contract(package: Path, contract: dict[str, Any]) -> None:
    prefix = _package_prefix(package)
    with zipfile.ZipFile(package, "a", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{prefix}/{CONTRACT_ENTRY}", json.dumps(contract, indent=1, sort_keys=True))


_CONSTANT_FIELD = re.compile(r"^\s*constants_info_\[(\d+)\]\.(\w+) = (.*);\s*$")


def constant_layouts(wrapper_cpp: str) -> list[dict[str, Any]] | None:
    """Each constant's layout as the generated wrapper sets it in its constructor (`constants_info_[i].shape
    = {...};` ...), for the host to place blob weights itself (runtime/src/host/weights.h). None when the wrapper
    has no such block or a constant isn't a plain strided tensor: the plugin then loads its blob itself."""
    fields: dict[int, dict[str, str]] = {}
    for line in wrapper_cpp.splitlines():
        m = _CONSTANT_FIELD.match(line)
        if m:
            fields.setdefault(int(m.group(1)), {})[m.group(2)] = m.group(3).strip()
    if not fields or sorted(fields) != list(range(len(fields))):
        return None

    def ints(text: str) -> list[int] | None:
        if not (text.startswith("{") and text.endswith("}")):
            return None
        body = text[1:-1].strip()
        try:
            return [int(v) for v in body.split(",")] if body else []
        except ValueError:
            return None

    out = []
    for i in range(len(fields)):
        f = fields[i]
        name = f.get("name", "")
        shape, stride = ints(f.get("shape", "")), ints(f.get("stride", ""))
        if (not (name.startswith('"') and name.endswith('"')) or shape is None or stride is None
                or len(shape) != len(stride) or "layout_strided" not in f.get("layout", "")
                or not f.get("offset", "").isdigit() or not f.get("data_size", "").isdigit()):
            return None
        device = f.get("device_type", "").rsplit("device_type_", 1)[-1]
        k = RECORDS.constant
        out.append({k.name: name[1:-1], k.shape: shape, k.stride: stride, k.offset: int(f["offset"]),
                    k.data_size: int(f["data_size"]), k.device: device,
                    k.dtype: f.get("dtype", "").rsplit("dtype_", 1)[-1],
                    k.from_folded: f.get("from_folded") == "true"})
    return out


def add_constant_layouts(package: Path) -> bool:
    """Records the constant layouts of a blob-mode package (CONSTANTS_ENTRY); False when there are none."""
    prefix = _package_prefix(package)
    with zipfile.ZipFile(package) as zf:
        wrappers = [n for n in zf.namelist() if n.endswith(".wrapper.cpp") and PLUGIN_DIR in n]
        blobs = [n for n in zf.namelist() if n.endswith("_weights.blob")]
        if len(wrappers) != 1 or not blobs:
            return False
        layouts = constant_layouts(zf.read(wrappers[0]).decode(errors="replace"))
    if layouts is None:
        print(f"aoti-toolchain: note: {package.name}: constant layouts not understood; the plugin will load its "
              "weights blob itself", file=sys.stderr)
        return False
    k = RECORDS.constants
    doc = {k.schema: _LAYOUT.constants_schema, k.source: wrappers[0].rsplit("/", 1)[-1], k.constants: layouts}
    with zipfile.ZipFile(package, "a", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{prefix}/{CONSTANTS_ENTRY}", json.dumps(doc, indent=1))
    return True


def clear_exec_stack(package: Path) -> list[str]:
    """Clears PF_X in the PT_GNU_STACK of every plugin in `package`, in place, and returns their names.

    inductor links the weights object without .note.GNU-stack, so every plugin asks for an executable stack
    (which glibc >= 2.41 refuses to dlopen), and no inductor config passes -Wl,-z,noexecstack to its link;
    clearing the flag is safe (the plugin runs no code from its stack; verified on every exported plugin). The
    package keeps its layout byte for byte (toolchain.elf.patcher.edit_plugins_in_package)."""
    from toolchain.elf.base import ElfError
    from toolchain.elf.patcher import clear_exec_stack_bytes, edit_plugins_in_package

    def clear(data: bytearray, label: str) -> list[tuple[int, int]]:
        try:
            span = clear_exec_stack_bytes(data, label)
        except ElfError:
            return []  # not an ELF image: verify reports it
        return [span] if span else []

    return edit_plugins_in_package(package, clear, "clearing the executable-stack flag", ExportError)


# torch's deprecation warnings every export would print, about torch's own internals (nothing the user can
# change): (category, message regex).
KNOWN_TORCH_WARNINGS = (
    (FutureWarning, r".*LeafSpec.*"),
    (FutureWarning, r".*isinstance\(treespec, LeafSpec\).*"),
    (UserWarning, r".*TypedStorage is deprecated.*"),
)


@contextlib.contextmanager
def quiet_torch_warnings() -> Iterator[None]:
    """Hides KNOWN_TORCH_WARNINGS (and only those) while torch exports and compiles."""
    with warnings.catch_warnings():
        for category, pattern in KNOWN_TORCH_WARNINGS:
            warnings.filterwarnings("ignore", message=pattern, category=category)
        yield


def asks_small_sizes(dynamic_shapes: Any) -> bool:
    """Whether a dynamic dimension in `dynamic_shapes` (torch.export's spec: dicts, lists and tuples of Dims,
    Dim hints or None) may be 0 or 1, the sizes torch specialises."""
    if isinstance(dynamic_shapes, dict):
        return any(asks_small_sizes(v) for v in dynamic_shapes.values())
    if isinstance(dynamic_shapes, (list, tuple)):
        return any(asks_small_sizes(v) for v in dynamic_shapes)
    if dynamic_shapes is None or isinstance(dynamic_shapes, int):
        return False
    low = getattr(dynamic_shapes, "min", None)
    return low is None or (isinstance(low, int) and low <= 1)


def _wrapper_source(package: Path) -> str:
    with zipfile.ZipFile(package) as zf:
        wrappers = [n for n in zf.namelist() if n.endswith(".wrapper.cpp") and PLUGIN_DIR in n]
        return zf.read(wrappers[0]).decode(errors="replace") if len(wrappers) == 1 else ""


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    detail = next((ln.lstrip("- ") for ln in lines if "satisf" in ln or "guard" in ln), lines[0] if lines else "")
    return f"{type(exc).__name__}: {detail}"


_SMALL_SIZE_GUARD = re.compile(r"eval (.*?(?:\b1\)|[<>]=? ?[12]\b|, [01]\)).*?) \[guard added\](?: \(([^)]*)\))?")


class _GuardLog:
    """A logging handler keeping torch's "[guard added]" lines that compare a size with 0, 1 or 2."""

    def __init__(self, sink: list[str]) -> None:
        import logging

        self.sink = sink
        self.handler = logging.Handler(logging.INFO)
        self.handler.emit = self.emit  # type: ignore[method-assign]

    def emit(self, record: Any) -> None:
        try:
            text = record.getMessage()
            m = None if "guard suppressed" in text else _SMALL_SIZE_GUARD.search(text)
        except Exception:  # noqa: BLE001 -- a log line torch formats badly is not worth failing an export for
            return
        if m and len(self.sink) < 8:
            where = f" at {m.group(2)}" if m.group(2) else ""
            line = f"torch added the guard {m.group(1)}{where}"
            if line not in self.sink:
                self.sink.append(line)


@contextlib.contextmanager
def _guards_added(sink: list[str]) -> Iterator[None]:
    """Collects, into `sink`, the size guards torch's shape environment adds in the block: its INFO log lines,
    with torch's own handlers set aside meanwhile so that nothing more is printed."""
    import logging

    log = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    keep = _GuardLog(sink)
    level, propagate, handlers = log.level, log.propagate, log.handlers[:]
    if log.getEffectiveLevel() <= logging.INFO:  # the user asked for torch's logs (TORCH_LOGS): leave them be
        handlers = None
    else:
        log.handlers = [keep.handler]
        log.setLevel(logging.INFO)
        log.propagate = False
    try:
        yield
    finally:
        if handlers is not None:
            log.handlers = handlers
            log.setLevel(level)
            log.propagate = propagate


def _narrower_error(lines: list[str], why: str, guards: list[str]) -> ExportError:
    reasons = ([why] if why else []) + guards[:3]
    msg = ("the plugin torch compiled does not accept every size asked for:\n  " + "\n  ".join(lines) +
           "\n  why: torch specialises sizes 0 and 1 where the model's code branches on them" +
           "".join(f"\n    {r}" for r in reasons))
    return ExportError(msg, fix="ask for the range that holds (--dynamic NAME:DIM=2..MAX, Dim(min=2)), or accept it "
                       "with --allow-narrower (export(..., allow_narrower=True)); docs/cli.md, size ranges")


def _trace(module: Any, example_inputs: Sequence[Any], dynamic_shapes: Any, oblivious: bool) -> Any:
    import torch

    with _oblivious(oblivious):
        return torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic_shapes)


def export(
    module: Any,
    example_inputs: Sequence[Any],
    out: Path,
    *,
    weights: str = "embedded",
    build_dir: Path | None = None,
    dynamic_shapes: Any = None,
    extra_configs: dict[str, Any] | None = None,
    device: str = "cpu",
    triton_only: bool = False,
    vectorize: bool = True,
    size_oblivious: bool | None = None,
    cpu_isa: str | None = None,
    cuda_arch: str | Sequence[int | str] | None = None,
    cuda_ptx: bool = False,
    allow_narrower: bool = False,
) -> Path:
    """Export `module` called on `example_inputs` to `out` (.pt2) for our host; returns `out`.

    dynamic_shapes: as torch.export takes them (e.g. {"x": {0: torch.export.Dim("batch", min=1, max=64)}}).
    device="cuda" (or "cuda:N") moves the module and the inputs there and builds a CUDA plugin.
    vectorize (CPU): compile SIMD kernels for the widest ISA `probe_vec_isa` finds (they import Sleef_*,
    which the host runtime provides); False, or no working ISA, gives scalar kernels.
    size_oblivious: trace and compile with torch's size-oblivious reasoning, so that a dynamic dimension
    whose minimum is 0 or 1 is compiled for that minimum (torch otherwise specialises 0 and 1 and compiles
    for >= 2); None (default): on exactly when some dynamic dimension may be 0 or 1.
    allow_narrower: when the plugin torch compiled accepts a narrower range than `dynamic_shapes` asks for
    (torch specialised a size the model branches on), record that range and say so on stderr; False
    (default): fail with ExportError naming each dimension, the range that holds and torch's reason.

    cpu_isa (toolchain.target.CPU_ISA_CHOICES, default DEFAULT_CPU_ISA): the vector ISA and -march of every
    compile (the host-side code of CUDA plugins too); cuda_arch/cuda_ptx: the GPU architectures and whether
    PTX is embedded (toolchain.target.cuda_arch_configs). What the plugin's code needs is decoded from it
    and recorded in the package (toolchain.target.describe; docs/targets.md)."""
    from toolchain import target

    prepare_build_dirs(build_dir)
    build_dir = Path(build_dir) if build_dir is not None else default_build_dir()
    with progress.step("loading torch and its compiler (inductor)"):
        import torch
        from torch._inductor import cpu_vec_isa

    if device != "cpu" and not device.startswith("cuda"):
        msg = f"device={device!r}: use cpu, cuda or cuda:N"
        raise InputError(msg)
    cpu_isa = cpu_isa or target.DEFAULT_CPU_ISA
    cfg, march = _cpu_configs(weights, cpu_isa, vectorize and device == "cpu", build_dir)
    cfg.update(extra_configs or {})
    if device.startswith("cuda"):
        base, archs = _cuda_configs(device, triton_only, cuda_arch, cuda_ptx)
        cfg = {**base, **cfg, **archs}
        module = module.to(device)
        example_inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in example_inputs]
    out = Path(out)
    if out.suffix != ".pt2":
        msg = f"{out}: the package name must end in .pt2"
        raise InputError(msg)
    out.parent.mkdir(parents=True, exist_ok=True)
    module = module.eval() if hasattr(module, "eval") else module
    with quiet_torch_warnings():
        guards: list[str] = []  # the 0/1 guards torch adds while tracing and compiling: why a range narrows
        traced = _traced(module, example_inputs, dynamic_shapes, size_oblivious, guards)
        contract = _read_contract(traced.ep, example_inputs)
        k = RECORDS.contract_tensor
        asked = asked_ranges(dynamic_shapes, [e[k.name] for e in contract[RECORDS.contract.inputs]])
        # inductor caches its list of working ISAs per process, computed with the configs of the first
        # compile that asked: start from a fresh list and leave one for the next build to compute anew.
        cpu_vec_isa.valid_vec_isa_list.cache_clear()
        try:
            with _package_beside(out) as tmp:
                with progress.step("compiling with AOTInductor"), _oblivious(traced.oblivious), _guards_added(guards):
                    torch._inductor.aoti_compile_and_package(traced.ep, package_path=str(tmp),
                                                             inductor_configs=dict(cfg))
                with progress.step("packaging (contract, target record, constants, executable-stack flag)"):
                    narrower = _fill_package(tmp, contract, asked)
                    if narrower and not allow_narrower:
                        raise _narrower_error(narrower, traced.why, guards)
                    for line in narrower:
                        progress.note(f"note: {line} (accepted: allow_narrower)")
                    add_contract(tmp, contract)
                    bits = int(cfg.get("cpp.simdlen") or 0) if cfg.get("cpp.vec_isa_ok") is not False else 0
                    target.add_record(tmp, target.describe(tmp, cpu_isa, march, bits))
                    if weights == "blob":
                        add_constant_layouts(tmp)
        except ToolchainError:
            raise
        except Exception as exc:
            msg = f"AOTInductor compilation failed: {type(exc).__name__}: {exc}"
            raise ExportError(msg) from exc
        finally:
            cpu_vec_isa.valid_vec_isa_list.cache_clear()
    return out


def _cpu_configs(weights: str, cpu_isa: str, vector: bool, build_dir: Path) -> tuple[dict[str, Any], str]:
    """Inductor's configs for `weights` and the CPU code (`--cpu-isa`, vector kernels when the probe finds an
    ISA that builds here) and the -march they compile with."""
    import torch

    from toolchain import target

    cfg = inductor_configs(weights)
    isa = None
    if vector:
        with progress.step("probing the vector ISA kernels can use"):
            isa = probe_vec_isa(build_dir)
    if vector and isa is None:
        print("aoti-toolchain: warning: no vector ISA builds against libsleef here; kernels will be scalar "
              "(install libsleef-dev)", file=sys.stderr)
        vector = False
    isa_cfg, march = target.cpu_isa_configs(cpu_isa, isa, vector=vector)
    if "cpp.march" in isa_cfg and not hasattr(torch._inductor.config.cpp, "march"):
        # torch before 2.13 has no cpp.march: its compiles always use -march=native. Say so; the target
        # record is decoded from the code, so it (and the runtime's preflight) still states what it needs.
        progress.note(f"note: torch {torch.__version__} cannot set -march (no inductor cpp.march): compiled "
                      f"for this machine's CPU instead of {cpu_isa}; the package records what its code needs")
        isa_cfg.pop("cpp.march")
        march = "native"
    cfg.update(isa_cfg)
    return cfg, march


def _cuda_configs(device: str, triton_only: bool, cuda_arch: Any, cuda_ptx: bool
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Inductor's configs for a CUDA plugin on `device`, and those of the architectures asked for
    (toolchain.target.cuda_arch_configs; they override the caller's extra configs)."""
    import torch

    from toolchain import target

    if not torch.cuda.is_available():
        msg = f"device={device!r}: this torch ({torch.__version__}) sees no CUDA device; export on a GPU machine"
        raise InputError(msg)
    major, minor = torch.cuda.get_device_capability(torch.device(device))
    if cuda_arch is None and not cuda_ptx:  # torch's default: SASS for this GPU only
        return cuda_configs(triton_only), {}
    archs = target.parse_cuda_arch(cuda_arch) or [major * 10 + minor]
    return cuda_configs(triton_only), target.cuda_arch_configs(archs, major * 10 + minor, cuda_ptx)


class _Traced(NamedTuple):
    ep: Any  # torch.export.ExportedProgram
    oblivious: bool  # traced (and to be compiled) with size-oblivious reasoning
    why: str  # why size-oblivious tracing was given up, "" when it was not


def _traced(module: Any, example_inputs: Sequence[Any], dynamic_shapes: Any, size_oblivious: bool | None,
            guards: list[str]) -> _Traced:
    """torch.export of the module; `guards` collects the 0/1 guards torch adds."""
    oblivious = dynamic_shapes is not None and (
        asks_small_sizes(dynamic_shapes) if size_oblivious is None else size_oblivious)
    why = ""
    try:
        with progress.step("tracing the module (torch.export)"), _guards_added(guards):
            try:
                ep = _trace(module, example_inputs, dynamic_shapes, oblivious)
            except Exception as exc:
                if not oblivious or size_oblivious:
                    raise
                # the model branches on a size being 0 or 1 where size-oblivious reasoning can't decide:
                # trace with torch's specialisation; the range check after the compile says what that costs
                oblivious = False
                why = _first_line(exc)
                ep = _trace(module, example_inputs, dynamic_shapes, False)
    except Exception as exc:  # torch raises many types; the message is what the user needs
        msg = f"torch.export failed: {type(exc).__name__}: {exc}"
        raise ExportError(msg) from exc
    return _Traced(ep, oblivious, why)


def _read_contract(ep: Any, example_inputs: Sequence[Any]) -> dict[str, Any]:
    """The exported program's contract, read before compiling: inductor may specialise symbols of the
    program's shape environment."""
    import torch

    try:
        return contract_of(ep, example_inputs, torch.__version__, CONTRACT_SCHEMA)
    except ToolchainError:
        raise
    except Exception as exc:  # an exported program of a shape this reader does not know
        msg = f"reading the exported program's inputs and outputs failed: {type(exc).__name__}: {exc}"
        raise ExportError(msg) from exc


def _fill_package(tmp: Path, contract: dict[str, Any], asked: dict) -> list[str]:
    """The compiled package's plugin made loadable and unloadable (no executable stack, no GNU_UNIQUE
    symbols), `contract` narrowed to the sizes it was compiled for; the lines of each range narrower than
    asked for."""
    clear_exec_stack(tmp)
    rebind_unique_in_package(tmp)  # unloadable: docs/verify.md, "Unloading"
    narrow_to_compiled(contract, compiled_input_ranges(_wrapper_source(tmp)))
    return narrower_than_asked(contract, asked)


def _oblivious(on: bool) -> Any:
    if not on:
        return contextlib.nullcontext()
    from torch.fx.experimental import _config as fx_config

    if not hasattr(fx_config, "backed_size_oblivious"):  # an older torch: its specialisation stays, and the
        return contextlib.nullcontext()                  # contract records the range the compiled code checks
    return fx_config.patch(backed_size_oblivious=True)  # type: ignore[attr-defined]


@contextlib.contextmanager
def _package_beside(out: Path) -> Iterator[Path]:
    """A path named like `out` in a private temporary folder beside it: torch names the package's top-level
    folder after the file's stem, so the package says `<model>/...`, not a temporary name. On success the
    file gets the umask's mode (0644 under 022) and replaces `out` atomically; on failure nothing stays."""
    with replacing(out, suffix=".pt2") as slot:  # the atomic rename and fsync of the toolchain's writes
        folder = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        try:
            tmp = folder / out.name
            yield tmp
            os.chmod(tmp, 0o666 & ~current_umask())
            os.replace(tmp, slot)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


MANIFEST_NAME = _LAYOUT.methods_manifest
MANIFEST_SCHEMA = _LAYOUT.methods_schema


def method_as_forward(module: Any, method: str) -> Any:
    """A shallow copy of `module` whose `forward` is `module.<method>`.

    The copy holds the very same parameter and buffer objects under the same attribute names, so the
    exported plugin names its constants with the same original FQNs as `forward`'s: that is what the
    runtime shares weights across methods by.
    """
    import copy

    if method == "forward":
        return module
    fn = getattr(type(module), method, None)
    if not callable(fn):
        msg = f"{type(module).__name__} has no method {method!r} to export"
        raise InputError(msg)
    twin = copy.copy(module)
    twin.__class__ = type(f"{type(module).__name__}_{method}", (type(module),), {"forward": fn})
    return twin


def export_methods(
    module: Any,
    methods: dict[str, Sequence[Any]],
    out_dir: Path,
    *,
    weights: str = "embedded",
    build_dir: Path | None = None,
    extra_configs: dict[str, Any] | None = None,
) -> Path:
    """Export several methods of one module (name -> example inputs) as one multi-method program.

    Writes `out_dir/<name>.pt2` per method and then `out_dir/methods.json` (the manifest the runtime,
    `aoti-run` and `aoti-toolchain run` load); returns the manifest's path. Each file is written atomically
    and the manifest last, so a failed export never leaves a manifest naming a missing package.
    """
    if not methods:
        msg = "export_methods: no methods given"
        raise InputError(msg)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, example_inputs in methods.items():
        if not name.isidentifier():
            msg = f"method name {name!r} is not an identifier"
            raise InputError(msg)
        pkg = out_dir / f"{name}.pt2"
        export(method_as_forward(module, name), example_inputs, pkg, weights=weights, build_dir=build_dir,
               extra_configs=extra_configs)
        entries.append({RECORDS.method.name: name, RECORDS.method.package: pkg.name})
    manifest = out_dir / MANIFEST_NAME
    write_text(manifest, json.dumps({RECORDS.methods.schema: MANIFEST_SCHEMA, RECORDS.methods.methods: entries},
                                    indent=1))
    return manifest
