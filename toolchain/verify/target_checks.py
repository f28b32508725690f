"""What a plugin needs of the target machine, from its code: the CPU extensions its executable sections use
(toolchain.isa) and the GPU images it carries (toolchain.cuda_bin), against the profile's [cpu] and [cuda]
(profiles.TargetProfile). Only plugins are checked: the host runtime dispatches its wide kernels at run time
(it is built for the x86-64 baseline), so its code holds instructions it never runs on a smaller CPU."""

from __future__ import annotations

import os
import re

from toolchain.findings import FileResult
from toolchain.verify.profiles import Profile, vstr

GPU_SUFFIXES = (".cubin", ".fatbin")


def check_cpu(data, label: str, res: FileResult, profile: Profile, scan=None) -> None:
    """cpu-isa-too-new: the highest extension used beyond the profile's level, with its instruction. `scan`:
    the code's IsaScan where it was made already (in a child process: toolchain.verify.scans); None scans
    `data` here."""
    from toolchain.isa import IsaDecodeError, load_isa_spec, scan_elf

    target = profile.target
    if target.cpu_isa is None:
        return
    spec = load_isa_spec()
    if scan is None:
        try:
            scan = scan_elf(data, label)
        except IsaDecodeError:
            return  # not x86-64 ELF64: wrong-arch and the readers report it
    beyond = spec.beyond(list(scan.extensions), target.cpu_isa, target.cpu_extensions)
    if not beyond:
        return
    top = beyond[-1]
    use = scan.extensions[top]
    fitting = next((opt for opt, lv in sorted(spec.exports.items(), key=lambda kv: -spec.rank(kv[1]))
                    if spec.rank(lv) <= spec.rank(target.cpu_isa)), "x86-64")
    others = ", ".join(f"{e} ({scan.extensions[e].count})" for e in beyond)
    res.add("cpu-isa-too-new",
            f"uses {top} ({use.count} instructions, e.g. `{use.example}` in {use.function} at {use.address:#x}); "
            f"its code needs {scan.level}, profile {profile.name} guarantees {target.cpu_isa} "
            f"({target.sources.get('cpu_isa', 'no source')}); beyond it: {others}",
            fix_args={"cpu_isa": fitting})


def check_cuda(data, label: str, res: FileResult, profile: Profile, members: dict[str, bytes],
               needed: tuple[str, ...]) -> None:
    """cuda-arch-missing, cuda-driver-too-old and unreadable-gpu-code for one plugin (and the GPU members of
    its package)."""
    from toolchain.cuda_bin import cuda_of_ptx, driver_for_cuda, member_images, plugin_images

    target = profile.target
    images, problems = plugin_images(data, label)
    for name, blob in members.items():
        found, bad = member_images(blob, name)
        images += found
        problems += bad
    for p in problems:
        res.add("unreadable-gpu-code", p)
    runtime = next((int(n.rsplit(".", 1)[1]) for n in needed if re.match(r"^libcudart\.so\.\d+$", n)), None)
    if not images and runtime is None:
        return
    carries = (f"SASS for {', '.join(sorted({f'sm_{i.sm}' for i in images if i.kind == 'sass'})) or 'none'}, PTX for "
               f"{', '.join(sorted({f'compute_{i.sm}' for i in images if i.kind == 'ptx'})) or 'none'}")
    if target.cuda_arch and images:
        missing = [cc for cc in target.cuda_arch if not any(i.runs_on(cc) for i in images)]
        if missing:
            res.add("cuda-arch-missing",
                    f"carries {carries}: nothing runs on {', '.join(f'sm_{cc}' for cc in missing)} of profile "
                    f"{profile.name} ({target.sources.get('cuda_arch', 'no source')})",
                    fix_args={"archs": ", ".join(f"sm_{cc}" for cc in missing)})
    if target.cuda_driver is None:
        return
    needs: list[tuple[str, tuple[int, int]]] = []
    if runtime is not None:
        needs.append((f"its CUDA runtime libcudart.so.{runtime}", (runtime, 0)))
    for img in images:
        # PTX is JIT-compiled only where no SASS runs; a driver too old for its ISA can't compile it
        if img.kind == "ptx" and img.ptx_version and (cuda := cuda_of_ptx(img.ptx_version)):
            needs.append((f"its PTX ISA {img.ptx_version[0]}.{img.ptx_version[1]} (compute_{img.sm})", cuda))
    too_new = [(what, cuda, drv) for what, cuda in needs
               if (drv := driver_for_cuda(cuda)) is not None and drv > target.cuda_driver]
    if too_new:
        newest = max(cuda for _, cuda in needs)
        need_driver = driver_for_cuda(newest) or (0, 0)
        cuda_max = max((c for c, d in _driver_table() if d <= target.cuda_driver), default=None)
        what = "; ".join(f"{w} needs CUDA {vstr(c)} (driver >= {d[0]}.{d[1]:02d})" for w, c, d in too_new)
        res.add("cuda-driver-too-old",
                f"{what}; profile {profile.name} has driver {vstr(target.cuda_driver)} "
                f"({target.sources.get('cuda_driver', 'no source')})",
                fix_args={"driver": f"{need_driver[0]}.{need_driver[1]:02d}",
                          "cuda_max": vstr(cuda_max) if cuda_max else "an older release"})


def _driver_table():
    from toolchain.cuda_bin import CUDA_DRIVER

    return sorted(CUDA_DRIVER.items())


def check_plugin_target(data, label: str, res: FileResult, profile: Profile, members: dict[str, bytes] | None = None,
                        needed: tuple[str, ...] = (), scan=None) -> None:
    check_cpu(data, label, res, profile, scan)
    check_cuda(data, label, res, profile, members or {}, needed)


def check_file(path: str | os.PathLike[str], label: str, res: FileResult, profile: Profile, needed: tuple[str, ...], scan=None) -> None:
    """A plugin file on disk, mapped (only its code, symbol table and data sections holding GPU code are read)."""
    import mmap

    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            check_plugin_target(m, label, res, profile, {}, needed, scan)
