"""Zydis 4 beside the runtime in dist/lib: the decoder the runtime opens at run time (dlopen, not DT_NEEDED) for
the CPU preflight of packages without a target record (runtime/src/host/isa_scan.cpp, docs/targets.md).

Because nothing links it, auditwheel would not vendor it: the build installs the library itself, so the runtime
tree, its archive and the wheels carry it in lib/ beside libaoti_host.so, where the runtime looks first. It is
looked for as `libZydis.so.4.0` (the soname of Zydis 4.0, Debian/Ubuntu's libzydis4.0 and a CMake build of 4.0;
the runtime reads 4.0's structure layout) in the deps_prefix library folders, then the system's. Zydis is
MIT-licensed: its licence text (Debian's copyright file, where the package has one) goes beside it. Not found:
the build says so and goes on; the runtime then searches the loader's path at run time."""

from __future__ import annotations

import os
import subprocess

import SCons.Script

SONAME = "libZydis.so.4.0"
#: The licence text's name in dist/lib (from Debian's /usr/share/doc/libzydis4.0/copyright).
LICENCE = "libZydis.so.4.0.copyright"


def _system_libdirs(env) -> list[str]:
    multiarch = subprocess.run([env.subst("$CC"), "-print-multiarch"], capture_output=True, text=True).stdout.strip()
    dirs = [f"/usr/lib/{multiarch}", f"/lib/{multiarch}"] if multiarch else []
    return [*dirs, "/usr/local/lib", "/usr/lib64", "/usr/lib"]


def find_zydis(env) -> tuple[str, str | None] | None:
    """(the library file, symlinks resolved; its licence text or None), or None when no libZydis.so.4.0 is found.
    The deps_prefix folders ($LIBPATH) come before the system's, as on the link line."""
    for d in [*env.Flatten(env.get("LIBPATH", [])), *_system_libdirs(env)]:
        d = env.Dir(d).abspath if not os.path.isabs(str(d)) else str(d)
        lib = os.path.join(d, SONAME)
        if not os.path.isfile(lib):
            continue
        real = os.path.realpath(lib)
        # <prefix>/lib[/<multiarch>]/libZydis.so.4.0 -> <prefix>/share/doc/libzydis4.0/copyright (the folder as
        # found, and as resolved: /lib/<multiarch> is /usr/lib/<multiarch> on a merged-/usr system)
        for folder in (d, os.path.dirname(real)):
            prefix = folder
            while os.path.basename(prefix) != "lib" and prefix != os.path.dirname(prefix):
                prefix = os.path.dirname(prefix)
            doc = os.path.join(os.path.dirname(prefix), "share", "doc", "libzydis4.0", "copyright")
            if os.path.isfile(doc):
                return real, doc
        return real, None
    return None


def install_zydis(env, lib_dir, note: bool = True) -> list:
    """Install Zydis 4 (a regular file, named by its soname) and its licence text into `lib_dir`; say so when
    there is none to install (unless `note` is False: said once for several folders). Returns the install nodes
    (none without Zydis)."""
    found = find_zydis(env)
    quiet = (not note or SCons.Script.GetOption("help") or SCons.Script.GetOption("clean")
             or SCons.Script.GetOption("silent"))
    if found is None:
        if not quiet:
            print(f"scons: note: Zydis 4 ({SONAME}) not found in deps_prefix or the system library folders: "
                  f"dist/lib carries no decoder, so the runtime's CPU preflight of torch-written packages needs "
                  f"one on the loader's path at run time (apt-get install libzydis4.0, or deps_prefix=DIR/usr "
                  f"with `dpkg -x libzydis4.0_*.deb DIR`)")
        return []
    lib, licence = found
    nodes = env.InstallAs(lib_dir.File(SONAME), env.File(lib))  # the file itself, not the soname symlink
    if licence is not None:
        nodes += env.InstallAs(lib_dir.File(LICENCE), env.File(licence))
    elif not quiet:
        print(f"scons: note: {lib}: no licence text found beside it (share/doc/libzydis4.0/copyright); "
              "Zydis is MIT-licensed: ship its LICENSE with dist/lib")
    return nodes
