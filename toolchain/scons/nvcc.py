"""SCons tool: compile `.cu` files with nvcc, as one more suffix of Object/SharedObject.

Learned from NVIDIA/thrust's site_scons/site_tools/nvcc.py: the nvcc command carries $_CPPDEFFLAGS and
$_CPPINCFLAGS (scons-contrib's CUDA tool drops them, so a define silently never reaches `.cu` files), and
`.cu` files get the C scanner, so editing a header rebuilds the `.cu` objects that include it.

- $NVCC: the compiler (found on PATH, then /usr/local/cuda/bin); `exists()` is false without it.
- $CUDA_ARCH: comma-separated compute capabilities ("90", "sm_80,sm_90"); each gets SASS machine code,
  and the newest also PTX so later GPUs can JIT it ($_NVCC_GENCODE).
- Host flags: $CCFLAGS and $CXXFLAGS reach the host compiler through -Xcompiler, except those nvcc
  understands itself (-std=, -include, -O, -g); shared objects add -fPIC.
- $NVCCFLAGS: nvcc's own flags; $CUDA_HOME: the toolkit (include/, lib64/).
"""

from __future__ import annotations

import os
import shutil

import SCons.Action
import SCons.Defaults
import SCons.Scanner.C
import SCons.Tool

CU_SUFFIXES = (".cu",)
DEFAULT_ARCH = "90"
_NATIVE_PREFIXES = ("-std=", "-O", "-g", "-D", "-I")


def find_nvcc(env=None) -> str | None:
    if env is not None and env.get("NVCC") and shutil.which(env.subst("$NVCC")):
        return shutil.which(env.subst("$NVCC"))
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
            return os.path.join(home, "bin", "nvcc")
    return None


def parse_arch(value: str) -> list[str]:
    """'sm_80, 90' -> ['80', '90']; raises ValueError naming a bad entry."""
    out = []
    for item in str(value).replace(" ", "").split(","):
        if not item:
            continue
        num = item.removeprefix("sm_").removeprefix("compute_")
        if not (num[:-1].isdigit() if num.endswith(("a", "f")) else num.isdigit()) or len(num) < 2:
            msg = f"cuda_arch entry {item!r} is not a compute capability (e.g. 90, sm_90, 90a)"
            raise ValueError(msg)
        if num not in out:
            out.append(num)
    if not out:
        msg = "cuda_arch is empty; give at least one compute capability (e.g. 90)"
        raise ValueError(msg)
    return out


def gencode_flags(arch: str) -> list[str]:
    nums = parse_arch(arch)
    flags = [f"-gencode=arch=compute_{n},code=sm_{n}" for n in nums]
    newest = nums[-1]
    return [*flags, f"-gencode=arch=compute_{newest},code=compute_{newest}"]


def host_flags(flags) -> list[str]:
    """CCFLAGS/CXXFLAGS -> nvcc arguments: native ones as they are, the rest through -Xcompiler."""
    out: list[str] = []
    items = [str(f) for f in flags]
    i = 0
    while i < len(items):
        flag = items[i]
        if flag == "-include" and i + 1 < len(items):
            out += ["-include", items[i + 1]]
            i += 2
            continue
        if flag.startswith(_NATIVE_PREFIXES) and flag != "-g1":
            out.append(flag)
        else:
            out.append(f"-Xcompiler={flag}")
        i += 1
    return out


def _gencode(env) -> list[str]:
    return gencode_flags(env.subst("$CUDA_ARCH"))


def _hostflags(env, shared: bool) -> list[str]:
    flags = [*env.Flatten(env.get("CCFLAGS", [])), *env.Flatten(env.get("CXXFLAGS", []))]
    if shared:
        flags.append("-fPIC")
    return host_flags(flags)


_NVCCCOM = ("$NVCC -o $TARGET -c $NVCCFLAGS $_NVCC_GENCODE $_NVCC_HOSTFLAGS $CPPFLAGS $_CPPDEFFLAGS "
            "$_CPPINCFLAGS $SOURCES")


def generate(env):
    env.SetDefault(
        NVCC=find_nvcc(env) or "nvcc",
        CUDA_ARCH=DEFAULT_ARCH,
        NVCCFLAGS=[],
        _NVCC_GENCODE="${_aoti_nvcc_gencode(__env__)}",
        _aoti_nvcc_gencode=_gencode,
        _aoti_nvcc_host=_hostflags,
    )
    env["NVCCCOM"] = _NVCCCOM.replace("$_NVCC_HOSTFLAGS", "${_aoti_nvcc_host(__env__, False)}")
    env["SHNVCCCOM"] = _NVCCCOM.replace("$_NVCC_HOSTFLAGS", "${_aoti_nvcc_host(__env__, True)}")
    env.SetDefault(NVCCCOMSTR="", SHNVCCCOMSTR="")
    static_obj, shared_obj = SCons.Tool.createObjBuilders(env)
    for suffix in CU_SUFFIXES:
        static_obj.add_action(suffix, SCons.Action.Action("$NVCCCOM", "$NVCCCOMSTR"))
        shared_obj.add_action(suffix, SCons.Action.Action("$SHNVCCCOM", "$SHNVCCCOMSTR"))
        static_obj.add_emitter(suffix, SCons.Defaults.StaticObjectEmitter)
        shared_obj.add_emitter(suffix, SCons.Defaults.SharedObjectEmitter)
        # The header scanner: `.cu` files include headers like C++ files do.
        SCons.Tool.SourceFileScanner.add_scanner(suffix, SCons.Scanner.C.CScanner())


def exists(env):
    return find_nvcc(env) is not None


def add_to_compilation_db(env) -> None:
    """Record `.cu` compiles in compile_commands.json (SCons's compilation_db tool knows C/C++ only)."""
    import SCons.Builder
    import SCons.Tool.compilation_db as compdb

    entries = getattr(compdb, "__COMPILATION_DB_ENTRIES")
    static_obj, shared_obj = SCons.Tool.createObjBuilders(env)
    for builder, com in ((static_obj, "$NVCCCOM"), (shared_obj, "$SHNVCCCOM")):
        action = SCons.Action.Action(com)

        def emitter(target, source, env, action=action):
            entries.append((target[0], source[0], env, action))
            return target, source

        for suffix in CU_SUFFIXES:
            old = builder.emitter.get(suffix)
            builder.emitter[suffix] = SCons.Builder.ListEmitter([*env.Flatten(old), emitter])
