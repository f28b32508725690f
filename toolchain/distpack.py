"""The deployable runtime as a versioned artifact: `aoti-host-<version>-<variant>.tar.gz` holding one top-level
folder `aoti-host-<version>-<variant>/` with lib/, bin/, include/ and manifest.json (`scons dist` makes it; the
wheel build reads the same manifest for `--version`).

manifest.json (schema "aoti-host-dist/1"):
  name, version, variant          what was built (the variant as SCons names its directory)
  build_config                    the one-line configuration `aoti-run --version` and `aoti-toolchain --version` print
  feature_defines                 {"CUDA_AVAILABLE": "0"|"1"}: what every object of the runtime was compiled with
  exported_shims                  the aoti_torch_* functions libaoti_host.so exports (sorted)
  needed                          {file: [DT_NEEDED ...]} for every ELF file: the providers the target must have
  files                           {path: {"sha256", "bytes", "mode"}} for every file except the manifest itself

`check_tree` (what `aoti-toolchain verify` runs on an archive or its unpacked folder) compares a tree with its
manifest: every listed file present with its hash, nothing unlisted, the ELF files' DT_NEEDED as recorded.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

SCHEMA = "aoti-host-dist/1"
MANIFEST = "manifest.json"
#: The folders of a runtime tree; anything else at the top level (besides the manifest) is unexpected.
FOLDERS = ("lib", "bin", "include")
_MAX_MANIFEST = 4 << 20
_MAX_MEMBERS = 10_000


def sha256_file(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def archive_stem(version: str, variant: str) -> str:
    return f"aoti-host-{version}-{variant}"


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def tree_files(root: Path) -> list[str]:
    """The regular files under lib/, bin/, include/ of `root`, as sorted POSIX paths relative to it."""
    out = []
    for top in FOLDERS:
        base = root / top
        if not base.is_dir():
            continue
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                out.append((Path(dirpath) / name).relative_to(root).as_posix())
    return sorted(out)


def _elf_info(path: Path) -> tuple[tuple[str, ...], list[str]]:
    from toolchain.elf.reader import read_elf

    elf = read_elf(path)
    shims = sorted(s.name for s in elf.symbols if s.defined and s.name.startswith("aoti_torch_"))
    return elf.needed, shims


def make_manifest(root: Path, *, version: str, variant: str, build_config: str,
                  feature_defines: dict[str, str]) -> dict:
    """The manifest of the runtime tree at `root` (lib/, bin/, include/ as the build installed them)."""
    files: dict[str, dict] = {}
    needed: dict[str, list[str]] = {}
    shims: list[str] = []
    for rel in tree_files(root):
        path = root / rel
        st = path.stat()
        files[rel] = {"sha256": sha256_file(path), "bytes": st.st_size, "mode": f"{stat.S_IMODE(st.st_mode):04o}"}
        if _is_elf(path):
            deps, exported = _elf_info(path)
            needed[rel] = list(deps)
            if rel == "lib/libaoti_host.so":
                shims = exported
    return {"schema": SCHEMA, "name": "aoti-host", "version": version, "variant": variant,
            "build_config": build_config, "feature_defines": dict(sorted(feature_defines.items())),
            "exported_shims": shims, "needed": needed, "files": files}


def manifest_text(manifest: dict) -> str:
    import json

    return json.dumps(manifest, indent=2, sort_keys=False) + "\n"


def write_archive(root: Path, manifest: dict, out: Path) -> None:
    """Pack `root`'s listed files and the manifest as `out` (.tar.gz), atomically, reproducibly (sorted
    members, mtime 0, owner root, modes 0755/0644), under one top-level folder named like the archive."""
    import io
    import tarfile

    from toolchain.atomic import replacing

    top = archive_stem(manifest["version"], manifest["variant"])

    def info(name: str, size: int, mode: int, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(f"{top}/{name}" if name else top)
        ti.size, ti.mode, ti.type, ti.mtime = size, mode, kind, 0
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = "root"
        return ti

    with replacing(out, suffix=".tmp") as tmp:
        with open(tmp, "wb") as raw:
            import gzip

            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz, \
                    tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tf:
                dirs = sorted({p for rel in manifest["files"] for p in _parents(rel)})
                tf.addfile(info("", 0, 0o755, tarfile.DIRTYPE))
                for d in dirs:
                    tf.addfile(info(d, 0, 0o755, tarfile.DIRTYPE))
                for rel, meta in manifest["files"].items():
                    mode = 0o755 if int(meta["mode"], 8) & 0o111 else 0o644
                    with open(root / rel, "rb") as f:
                        tf.addfile(info(rel, meta["bytes"], mode), f)
                data = manifest_text(manifest).encode()
                tf.addfile(info(MANIFEST, len(data), 0o644), io.BytesIO(data))


def _parents(rel: str) -> list[str]:
    parts = rel.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


@dataclass
class Problem:
    """One defect of a runtime tree against its manifest: `path` (the tree or a file in it), `message`."""

    path: str
    message: str


class ManifestError(Exception):
    """The manifest itself is missing or unreadable (the tree cannot be checked)."""


def load_manifest(data: bytes, where: str) -> dict:
    if len(data) > _MAX_MANIFEST:
        raise ManifestError(f"{where}: {MANIFEST} is {len(data)} bytes, more than a manifest can be")
    import json

    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{where}: {MANIFEST} is not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        got = manifest.get("schema") if isinstance(manifest, dict) else type(manifest).__name__
        raise ManifestError(f"{where}: {MANIFEST} has schema {got!r}, expected {SCHEMA!r}")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("sha256"), str) for k, v in files.items()):
        raise ManifestError(f"{where}: {MANIFEST}: 'files' must map each path to {{'sha256': ..., ...}}")
    if not isinstance(manifest.get("needed", {}), dict):
        raise ManifestError(f"{where}: {MANIFEST}: 'needed' must map each ELF file to its DT_NEEDED list")
    return manifest


def check_tree(root: Path) -> tuple[dict | None, list[Problem]]:
    """Compare the unpacked runtime at `root` with its manifest.json: (manifest or None, problems)."""
    mpath = root / MANIFEST
    if not mpath.is_file():
        return None, [Problem(str(root), f"no {MANIFEST}: not a runtime made by `scons dist`")]
    try:
        manifest = load_manifest(mpath.read_bytes(), str(root))
    except ManifestError as exc:
        return None, [Problem(str(mpath), str(exc))]
    problems = []
    listed = manifest["files"]
    present = set(tree_files(root))
    for rel in sorted(set(listed) - present):
        problems.append(Problem(str(root / rel), "listed in the manifest but missing"))
    for rel in sorted(present - set(listed)):
        problems.append(Problem(str(root / rel), "not listed in the manifest (added after it was made)"))
    for rel in sorted(set(listed) & present):
        path = root / rel
        if path.is_symlink() or not path.is_file():
            problems.append(Problem(str(path), "not a regular file"))
            continue
        digest = sha256_file(path)
        if digest != listed[rel]["sha256"]:
            problems.append(Problem(str(path), f"SHA-256 {digest[:16]}... differs from the manifest's "
                                               f"{str(listed[rel]['sha256'])[:16]}... (changed after packing)"))
            continue
        want = manifest.get("needed", {}).get(rel)
        if want is not None and _is_elf(path):
            got, _ = _elf_info(path)
            if list(got) != list(want):
                problems.append(Problem(str(path), f"DT_NEEDED {list(got)} differs from the manifest's {want}"))
    return manifest, problems


def safe_extract(archive: Path, dest: Path) -> Path:
    """Unpack a runtime archive into `dest` (tarfile's "data" filter: no links out, no devices, no absolute
    paths) and return its one top-level folder. ManifestError when it is not one."""
    import tarfile

    try:
        with tarfile.open(archive, "r:*") as tf:
            members = tf.getmembers()
            if len(members) > _MAX_MEMBERS:
                raise ManifestError(f"{archive}: {len(members)} members, more than a runtime archive has")
            tops = {m.name.split("/", 1)[0] for m in members}
            if len(tops) != 1:
                raise ManifestError(f"{archive}: {len(tops)} top-level entries ({', '.join(sorted(tops)[:4])}); "
                                    "a runtime archive has one folder")
            tf.extractall(dest, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ManifestError(f"{archive}: not a readable .tar.gz: {exc}") from exc
    return dest / tops.pop()


def is_runtime_archive(path: Path) -> bool:
    name = path.name
    return path.is_file() and name.startswith("aoti-host-") and name.endswith((".tar.gz", ".tgz", ".tar"))
