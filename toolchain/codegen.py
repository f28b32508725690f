"""Spec + jinja2 templates -> generated sources and linker lists.

Every list of shims (the declarations header, the dynamic list, the version scripts, the link test)
comes from the spec through here, and so does every ABI fact both languages share: the status enum, the
dtype table, the package member names, the preload providers, the constant-getter shims (C++ headers in
build/<variant>/gen) and the ctypes module toolchain/runtime/_abi.py (committed: `--abi-py` refreshes it). Files are written atomically and only when their content changes,
so a spec edit that doesn't change a file doesn't rebuild what depends on it.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolchain.atomic import write_if_changed
from toolchain.errors import (
    EXIT_CODES,
    EXIT_CODES_FILE,
    ExitCode,
    SpecError,
    ToolchainError,
    exit_code,
    load_exit_codes,
)
from toolchain.shim_wrappers import WRAPPER_INCLUDES, wrappers
from toolchain.spec import Abi, CApi, Shim, Spec, load_abi, load_c_api, load_spec
from toolchain.spec.cpu_isa import load_isa_spec
from toolchain.spec.records import load_records
from toolchain.torch_ops import DATA_FILE as TORCH_OPS_FILE
from toolchain.torch_ops import load as load_torch_ops

REPO_ROOT = Path(__file__).resolve().parent.parent
# A checkout's templates/, or the copy an installed wheel carries as package data.
_INSTALLED_TEMPLATES = Path(__file__).resolve().parent / "_data" / "templates"
TEMPLATE_DIR = _INSTALLED_TEMPLATES if _INSTALLED_TEMPLATES.is_dir() else REPO_ROOT / "templates"

#: template -> path of the generated file, relative to the output directory.
OUTPUTS: dict[str, str] = {
    "shims.h.j2": "include/aoti_host/shims.h",
    "entry_points.h.j2": "include/aoti_host/entry_points.h",
    "exit_codes.h.j2": "include/aoti_host/exit_codes.h",
    "status.h.j2": "include/aoti_host/status.h",
    "c_api.h.j2": "include/aoti_host/c_api.h",
    "c_api_types.h.j2": "include/aoti_host/c_api_types.h",
    "c_api_table.inc.j2": "include/aoti_host/c_api_table.inc",
    "dtypes.h.j2": "include/aoti_host/dtypes.h",
    "package_layout.h.j2": "include/aoti_host/package_layout.h",
    "cpu_isa.h.j2": "include/aoti_host/cpu_isa.h",
    "package_records.h.j2": "include/aoti_host/package_records.h",
    "providers.h.j2": "include/aoti_host/providers.h",
    "fallback_ops.h.j2": "include/aoti_host/fallback_ops.h",
    "shims_constants.inc.j2": "include/aoti_host/shims_constants.inc",
    "host.dynlist.j2": "link/host.dynlist",
    "runtime.version.j2": "link/runtime.version",
    "plugin.version.j2": "link/plugin.version",
    "link_test.c.j2": "src/link_test.c",
    "link_test_plugin.c.j2": "src/link_test_plugin.c",
    "shims_cpu_ops.cpp.j2": "src/shims/cpu_ops.cpp",
    "shims_cuda_ops.cpp.j2": "src/shims/cuda_ops.cpp",
}

GROUPS_BY_CONFIG = {False: ("core", "cpu"), True: ("core", "cpu", "cuda")}

#: The ctypes module generated from c_api.toml (committed: Python imports it from the source tree).
ABI_PY = REPO_ROOT / "toolchain" / "runtime" / "_abi.py"
ABI_PY_TEMPLATE = "_abi.py.j2"

#: The spec files each template reads (for its banner); the rest read entry points, shims and providers.
_TEMPLATE_SPECS: dict[str, tuple[str, ...]] = {
    "exit_codes.h.j2": ("exit_codes.toml",),
    "status.h.j2": ("c_api.toml",),
    "c_api.h.j2": ("c_api.toml", "shims.toml"),
    "c_api_types.h.j2": ("c_api.toml",),
    "c_api_table.inc.j2": ("c_api.toml", "shims.toml"),
    "dtypes.h.j2": ("abi.toml",),
    "package_layout.h.j2": ("abi.toml",),
    "cpu_isa.h.j2": ("cpu_isa.toml",),
    "package_records.h.j2": ("records.toml",),
    "providers.h.j2": ("providers.toml", "abi.toml"),
    "shims_constants.inc.j2": ("shims.toml", "abi.toml"),
    "shims_cpu_ops.cpp.j2": ("shims.toml",),
    "shims_cuda_ops.cpp.j2": ("shims.toml",),
    ABI_PY_TEMPLATE: ("c_api.toml", "shims.toml"),
}

#: Reads toolchain/torch_ops.json (torch's fallback ops), not the spec.
FALLBACK_OPS_TEMPLATE = "fallback_ops.h.j2"

#: The provider that is the C++ runtime itself (providers.toml); the loader treats it specially.
CXX_PROVIDER = "libstdc++"


class CodegenError(SpecError):
    """A template does not render (a spec problem in the wide sense: the generated sources can't be made)."""


@dataclass(frozen=True)
class Written:
    path: Path
    changed: bool


def template_files(template_dir: Path = TEMPLATE_DIR) -> list[Path]:
    """Every template a generated file depends on (includes too), for build-system dependencies."""
    return sorted(template_dir.glob("*.j2"))


def _environment(template_dir: Path):  # -> jinja2.Environment; jinja2 imported lazily (SCons startup)
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


#: Tools whose --help text the exit-code header carries (k<ident>ExitHelp), by their name in the table.
HELP_TOOLS: tuple[dict[str, str], ...] = ({"name": "aoti-run", "ident": "AotiRun"},)


@dataclass(frozen=True)
class ScalarShim:
    """aoti_torch_scalar_to_tensor_<dtype>: the shim, its dtype and the C++ expression stored."""

    shim: Shim
    dtype: Any
    value_expr: str


def _constant_values(spec: Spec, abi: Abi, shims: tuple[Shim, ...]) -> dict[str, int]:
    values: dict[str, int] = {}
    for s in shims:
        if s.is_constant:
            v = abi.constant_value(s.name)
            if v is None:
                msg = f"{abi.source}: no value for the constant getter {s.name} (shims.toml)"
                raise CodegenError(msg, fix="add its code to [[dtype]], [device_type], [layout] or [memory_format]")
            values[s.name] = v
    return values


def _scalar_shims(abi: Abi, shims: tuple[Shim, ...]) -> list[ScalarShim]:
    out: list[ScalarShim] = []
    for s in shims:
        if not s.name.startswith("aoti_torch_scalar_to_tensor_"):
            continue
        d = next((d for d in abi.dtypes if d.name == s.name.removeprefix("aoti_torch_scalar_to_tensor_")), None)
        if d is None or len(s.params) != 2 or s.params[1].type != "AtenTensorHandle*":
            msg = f"{s.name} (shims.toml): not '<scalar> value, AtenTensorHandle* ret' of a dtype in abi.toml"
            raise CodegenError(msg, fix="name the shim after a [[dtype]] and give it torch's prototype")
        # bool's representation is not pinned by C++: store the byte torch stores
        expr = "static_cast<uint8_t>(value ? 1 : 0)" if s.params[0].type == "bool" else s.params[0].name
        out.append(ScalarShim(s, d, expr))
    return out


def _item_shims(abi: Abi, shims: tuple[Shim, ...]) -> list[ScalarShim]:
    """aoti_torch_item_<dtype> (the value of a one-element tensor, converted to the dtype), but item_bool: a C++
    bool is not the byte torch stores, so that one is written by hand."""
    out: list[ScalarShim] = []
    for s in shims:
        if not s.name.startswith("aoti_torch_item_") or s.name == "aoti_torch_item_bool":
            continue
        d = next((d for d in abi.dtypes if d.name == s.name.removeprefix("aoti_torch_item_")), None)
        if d is None or len(s.params) != 2 or s.params[0].type != "AtenTensorHandle" or \
                not s.params[1].type.endswith("*"):
            msg = f"{s.name} (shims.toml): not 'AtenTensorHandle tensor, <scalar>* ret_value' of a dtype in abi.toml"
            raise CodegenError(msg, fix="name the shim after a [[dtype]] and give it torch's prototype")
        out.append(ScalarShim(s, d, s.params[1].name))
    return out


_CTYPES: dict[str, str] = {
    "void": "None", "bool": "ctypes.c_bool", "int": "ctypes.c_int", "int32_t": "ctypes.c_int32",
    "int64_t": "ctypes.c_int64", "uint32_t": "ctypes.c_uint32", "uint64_t": "ctypes.c_uint64",
    "size_t": "ctypes.c_size_t",
    "double": "ctypes.c_double", "AOTITorchError": "ctypes.c_int32", "AtenTensorHandle": "ctypes.c_void_p",
}
#: Types the API hands out only by pointer: a pointer to one is an opaque handle (c_void_p).
_OPAQUE = ("aoti_host_program", "aoti_host_session", "aoti_host_api", "AtenTensorOpaque", "void")


def py_name(c_name: str) -> str:
    """aoti_host_tensor_view -> TensorView: the ctypes class of a C API struct."""
    return "".join(part.capitalize() for part in c_name.removeprefix("aoti_host_").split("_"))


def ctype(c_type: str, structs: tuple[str, ...] = ()) -> str:
    """The ctypes expression for a (normalised) C type of the API: `const int64_t*` -> POINTER(c_int64)."""
    base = c_type.replace("const ", "").replace("struct ", "").replace(" const", "").strip()
    stars = len(base) - len(base.rstrip("*"))
    base = base.rstrip("*").strip()
    if base == "char" and stars:
        expr, stars = "ctypes.c_char_p", stars - 1
    elif base in _OPAQUE and stars:
        expr, stars = "ctypes.c_void_p", stars - 1
    elif base in structs:
        expr = py_name(base)
    elif base in _CTYPES:
        expr = _CTYPES[base]
    else:
        msg = f"C type {c_type!r} has no ctypes mapping"
        raise CodegenError(msg, fix="use a type of the C API (or add its mapping to toolchain/codegen.py _CTYPES)")
    for _ in range(stars):
        expr = f"ctypes.POINTER({expr})"
    return expr


def render_abi_py(spec: Spec, c_api: CApi, template_dir: Path = TEMPLATE_DIR) -> str:
    """The text of toolchain/runtime/_abi.py."""
    import jinja2

    structs = tuple(st.name for st in c_api.structs)
    env = _environment(template_dir)
    env.filters["ctype"] = lambda t: ctype(t, structs)
    functions = [*c_api.functions, *(spec.shim(n) for n in c_api.shims)]
    try:
        return env.get_template(ABI_PY_TEMPLATE).render(
            template=f"templates/{ABI_PY_TEMPLATE}",
            spec_files=[f"toolchain/spec/{n}" for n in _TEMPLATE_SPECS[ABI_PY_TEMPLATE]],
            c_api=c_api, functions=functions, py_name=py_name, ctype=lambda t: ctype(t, structs))
    except jinja2.TemplateError as exc:
        msg = f"templates/{ABI_PY_TEMPLATE}: template error: {exc}"
        raise CodegenError(msg) from exc


# The public header c_api.h: its declarations wrapped as the hand-written headers are, and the function table's
# entries (the shims among them with the plain C types their handles are).
_C_API_TYPES = {"AtenTensorHandle": "struct AtenTensorOpaque*", "AOTITorchError": "int32_t"}


def c_wrap(decl: str, width: int = 118) -> str:
    """`RET NAME(A, B, ...)` broken after commas into lines of at most `width`, continued under the '('."""
    if len(decl) <= width or "(" not in decl:
        return decl
    head, _, rest = decl.rpartition("(")
    pieces = [p.strip() for p in rest.split(",")]
    lines, line = [], head + "(" + pieces[0]
    for p in pieces[1:]:
        if len(line) + 2 + len(p) > width:
            lines.append(line + ",")
            line = " " * (len(head) + 1) + p
        else:
            line += ", " + p
    return "\n".join([*lines, line])


def _c_api_table(spec: Spec, c_api: CApi) -> list[tuple[int, list[tuple[str, str, str]]]]:
    """[(version, [(return type, name, parameter list)])]: the members of aoti_host_api, in order."""
    functions = {f.name: f for f in c_api.functions}
    rows = []
    for version, names in enumerate(c_api.table, start=1):
        entries = []
        for name in names:
            fn = functions[name] if name in functions else spec.shim(name)
            c = lambda t: _C_API_TYPES.get(t, t)  # noqa: E731
            params = ", ".join(f"{c(p.type)} {p.name}" for p in fn.params) or "void"
            entries.append((c(fn.returns), name, params))
        rows.append((version, entries))
    return rows


def render(spec: Spec, groups: tuple[str, ...], template_dir: Path = TEMPLATE_DIR,
           exit_codes: tuple[ExitCode, ...] = EXIT_CODES, abi: Abi | None = None,
           c_api: CApi | None = None) -> dict[str, str]:
    """Render every output; returns {relative output path: text}."""
    import jinja2

    abi = load_abi() if abi is None else abi
    c_api = load_c_api() if c_api is None else c_api
    env = _environment(template_dir)
    env.filters["c_wrap"] = c_wrap
    shims = spec.shims_in(*groups)
    torch_ops = load_torch_ops()
    spec_files = [f"toolchain/spec/{os.path.basename(p)}" for p in spec.sources]
    context = {
        "groups": groups, "shims": shims, "entry_points": spec.entry_points, "exit_codes": exit_codes,
        "help_tools": HELP_TOOLS, "abi": abi, "c_api": c_api, "c_api_table": _c_api_table(spec, c_api),
        "providers": spec.providers,
        "cxx_provider": CXX_PROVIDER, "constant_values": _constant_values(spec, abi, shims),
        "scalar_shims": _scalar_shims(abi, shims), "item_shims": _item_shims(abi, shims), "cpu_isa": load_isa_spec(), "records": load_records(),
        "wrappers": wrappers(shims), "wrapper_includes": WRAPPER_INCLUDES,
        "torch_ops": torch_ops, "fallback_ops": sorted((name, op.label) for name, (op, _) in torch_ops.by_shim().items()),
    }
    if not any(p.name == CXX_PROVIDER and p.preload for p in spec.providers):
        msg = f"providers.toml: no preloadable provider named {CXX_PROVIDER!r} (the C++ runtime)"
        raise CodegenError(msg, fix=f"keep the {CXX_PROVIDER} row with preload = true")
    out: dict[str, str] = {}
    for template, rel in OUTPUTS.items():
        files = ([f"toolchain/spec/{n}" for n in _TEMPLATE_SPECS[template]] if template in _TEMPLATE_SPECS
                 else [str(TORCH_OPS_FILE.relative_to(REPO_ROOT))] if template == FALLBACK_OPS_TEMPLATE
                 else spec_files)
        try:
            text = env.get_template(template).render(template=f"templates/{template}", spec_files=files, **context)
        except jinja2.TemplateError as exc:
            where = getattr(exc, "filename", None) or template
            line = getattr(exc, "lineno", None)
            msg = f"{where}{f':{line}' if line else ''}: template error: {exc}"
            raise CodegenError(msg) from exc
        out[rel] = text
    return out


def generate(
    out_dir: Path,
    *,
    cuda: bool = False,
    spec_dir: Path | None = None,
    template_dir: Path = TEMPLATE_DIR,
    exit_codes_file: Path = EXIT_CODES_FILE,
) -> list[Written]:
    spec = load_spec(spec_dir)
    d = Path(spec_dir) if spec_dir is not None else None
    rendered = render(spec, GROUPS_BY_CONFIG[cuda], template_dir, load_exit_codes(exit_codes_file),
                      load_abi(d / "abi.toml" if d else None), load_c_api(d / "c_api.toml" if d else None))
    return [Written(out_dir / rel, write_if_changed(out_dir / rel, text)) for rel, text in rendered.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m toolchain.codegen", description=__doc__)
    parser.add_argument("--out", type=Path, help="output directory (e.g. build/cpu-gcc-release/gen)")
    parser.add_argument("--abi-py", action="store_true", help=f"refresh {ABI_PY.relative_to(REPO_ROOT)}")
    parser.add_argument("--cuda", action="store_true", help="include the cuda shim group")
    parser.add_argument("--spec-dir", type=Path, default=None, help="spec directory (default: toolchain/spec)")
    args = parser.parse_args(argv)
    if args.out is None and not args.abi_py:
        parser.error("give --out DIR, --abi-py or both")
    try:
        written: list[Written] = []
        if args.out is not None:
            written += generate(args.out, cuda=args.cuda, spec_dir=args.spec_dir)
        if args.abi_py:
            d = args.spec_dir
            text = render_abi_py(load_spec(d), load_c_api(Path(d) / "c_api.toml" if d else None))
            written.append(Written(ABI_PY, write_if_changed(ABI_PY, text)))
        for w in written:
            print(f"{'wrote' if w.changed else 'unchanged'} {w.path}")
    except ToolchainError as exc:
        print(f"error: {exc}")
        return exc.exit_code
    return exit_code("ok")


if __name__ == "__main__":
    raise SystemExit(main())
