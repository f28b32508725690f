"""The torch releases this runtime is measured against (toolchain/torch_versions.json, written by
`nox -s torch_versions`): the supported window, which release could have written a plugin, and whether the spec
covers what a plugin imports. inspect reads it; docs/torch-versions.md is rendered from it.

torch writes no version into a package or plugin, so "which torch wrote it" is an inference from what each
measured release's plugins have in common: the AOTInductor entry points they export (exactly), the shims that tell
it apart from releases exporting the same ones (Record.markers), and the shims other releases' headers declare but
this release's do not (never imported). Releases the corpus cannot tell apart are all named."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORD_PATH = Path(__file__).with_name("torch_versions.json")
_MODEL_DEPENDENT = re.compile(r"aoti_torch_(dtype_|cpu_|cuda_|aten_)")


@dataclass(frozen=True)
class Release:
    version: str
    status: str  # "pass", "fail", "export failed", "not installable here"
    raw: dict[str, Any]

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def entry_points(self) -> frozenset[str]:
        return frozenset(self.raw.get("entry_points") or ())

    @property
    def imports(self) -> frozenset[str]:
        return frozenset(self.raw.get("imports") or ())

    @property
    def always_imported(self) -> frozenset[str]:
        """The shims every package of this release imports (the stateless one included)."""
        sets = [frozenset(p.get("imports") or ()) for p in (self.raw.get("packages") or {}).values() if p["exported"]]
        return frozenset.intersection(*sets) if sets else frozenset()

    @property
    def declares_not(self) -> frozenset[str]:
        return frozenset(self.raw.get("declares_not") or ())


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])


@dataclass(frozen=True)
class Record:
    releases: tuple[Release, ...]
    tolerance: dict[str, float]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        rows = sorted(data.get("releases") or [], key=lambda r: _vkey(r["version"]))
        return cls(tuple(Release(r["version"], r["status"], r) for r in rows), dict(data.get("tolerance") or {}))

    @classmethod
    def load(cls, path: Path = RECORD_PATH) -> Record | None:
        """The record, or None when there is none (a checkout where the matrix never ran)."""
        try:
            return cls.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def passing(self) -> list[Release]:
        return [r for r in self.releases if r.passed]

    def window(self) -> str:
        """"2.11-2.15" from the oldest to the newest passing release (MAJOR.MINOR), or "none"."""
        ok = self.passing()
        if not ok:
            return "none"
        lo, hi = (".".join(map(str, _vkey(r.version)[:2])) for r in (ok[0], ok[-1]))
        return lo if lo == hi else f"{lo}-{hi}"

    def markers(self, release: Release) -> frozenset[str]:
        """The shims that tell `release` apart from the measured releases exporting the same entry points: every
        one of its plugins imports them, none of theirs does. Dtype getters and op shims never count (they
        follow the model, not the release)."""
        others = [r for r in self.releases if r is not release and r.entry_points == release.entry_points]
        if not others:
            return frozenset()  # its entry points alone tell it apart
        seen = frozenset().union(*(r.imports for r in others))
        return frozenset(s for s in release.always_imported - seen if not _MODEL_DEPENDENT.match(s))

    def writers(self, exports: Iterable[str], imports: Iterable[str]) -> list[str]:
        """The measured releases that could have written a plugin exporting `exports` (its AOTInductor* entry
        points) and importing `imports` (its aoti_torch_* shims): the same entry points exactly, its release's
        markers and no other same-entry-point release's, and nothing its release's headers don't declare."""
        eps = frozenset(e for e in exports if e.startswith("AOTInductor"))
        imp = frozenset(imports)
        same = [r for r in self.releases if r.entry_points and r.entry_points == eps]
        marks = {r.version: self.markers(r) for r in same}
        return [r.version for r in same
                if marks[r.version] <= imp and not (imp & r.declares_not)
                and not any(imp & m for v, m in marks.items() if v != r.version)]


def verdict(record: Record | None, exports: Iterable[str], imports: Iterable[str], spec_names: set[str],
            recorded_torch: str | None = None) -> dict[str, Any]:
    """What inspect says about a plugin's torch: which release wrote it (the package's own record when it has
    one, else the inference), the supported window, and the imports this runtime's spec lacks."""
    imports = sorted(imports)
    missing = [s for s in imports if s not in spec_names]
    out: dict[str, Any] = {"window": record.window() if record else None, "missing_shims": missing,
                           "covered": not missing}
    if recorded_torch:
        out.update(written_by=[recorded_torch], basis="recorded in the package by aoti-toolchain export")
    elif record is None:
        out.update(written_by=None, basis="no torch-version record (toolchain/torch_versions.json) to compare with")
    else:
        out.update(written_by=record.writers(exports, imports),
                   basis="inferred from its entry points and imports; torch records no version in a package")
    vers = out["written_by"]
    if recorded_torch and record is not None:
        out["in_window"] = any(_vkey(r.version)[:2] == _vkey(recorded_torch)[:2] for r in record.passing())
    elif vers and record is not None:
        ok = {r.version for r in record.passing()}
        out["in_window"] = all(v in ok for v in vers)
    else:
        out["in_window"] = False
    return out


def verdict_text(v: dict[str, Any]) -> list[str]:
    """inspect's text lines for verdict()'s result."""
    vers = v["written_by"]
    if vers is None:
        who = "unknown"
    elif not vers:
        who = f"none of the measured releases (window {v['window']}): older, newer or patched torch"
    else:
        who = "torch " + (vers[0] if len(vers) == 1 else f"{vers[0]} .. {vers[-1]} ({', '.join(vers)})")
    lines = [f"  written by:   {who} ({v['basis']})"]
    cover = "all its aoti_torch_* imports are implemented" if v["covered"] else \
        f"NOT covered: {len(v['missing_shims'])} import(s) not implemented: {', '.join(v['missing_shims'])}"
    window = f"supported torch {v['window']}" if v["window"] else "no measured window"
    lines.append(f"  this runtime: {cover}; {window}" + ("" if v["in_window"] or not vers else
                                                         " (this plugin's torch is outside it)"))
    return lines


def render_markdown(record: Record) -> str:
    """docs/torch-versions.md from the record."""
    tol = record.tolerance
    lines = [
        "# torch versions",
        "",
        "<!-- generated by `nox -s torch_versions` (python -m toolchain.torch_versions) from "
        "toolchain/torch_versions.json: edit neither by hand -->",
        "",
        f"Supported window: **torch {record.window()}** (every release below marked pass). Each release's own "
        "`torch._inductor.aoti_compile_and_package` exported the corpus (stateless; an MLP with a dynamic batch "
        "dimension run at three batch sizes; three outputs of float32, int64 and bool with weights in a blob; "
        "vectorised kernels that call Sleef) with the configs of a plugin shipped without libtorch "
        "(`aot_inductor.link_libtorch=False`); each case ran through `aoti-run` and the Python module of this "
        "runtime and was compared with that torch's eager outputs "
        f"(rtol {tol.get('rtol')}, atol {tol.get('atol')}; integer and bool outputs exactly).",
        "",
        "| torch | installed from | packages | aoti-run | Python module | shims imported | in spec | missing | "
        "entry points |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in record.releases:
        raw = r.raw
        pk = raw.get("packages") or {}
        if not pk:
            lines.append(f"| {r.version} | {raw.get('source', '-')} | - | {r.status}: {raw.get('error', '')} | | | | | |")
            continue
        ok_run = sum(p["aoti_run"] == "pass" for p in pk.values())
        ok_py = sum(p["python"] == "pass" for p in pk.values())
        exported = sum(p["exported"] for p in pk.values())
        imp, miss = raw.get("imports") or [], raw.get("missing") or []
        lines.append(
            f"| {raw.get('torch', r.version)} | {raw.get('source', '-')} | {exported}/{len(pk)} exported | "
            f"{'pass' if ok_run == len(pk) else 'FAIL'} ({ok_run}/{len(pk)}) | "
            f"{'pass' if ok_py == len(pk) else 'FAIL'} ({ok_py}/{len(pk)}) | {len(imp)} | {len(imp) - len(miss)} | "
            f"{', '.join(miss) or 'none'} | {len(raw.get('entry_points') or [])} |")
    lines += ["", "## What the plugin runtime of each release can call", "",
              "The shims each release's plugin runtime code (`aoti_runtime/*.h`, inductor's `aoti_runtime/` "
              "sources: the CPU and CUDA paths; XPU and MPS left out) mentions: what CUDA plugins and optional "
              "features (pinned constant copies, the caching allocator for weights, proxy-executor values) can "
              "import beyond the corpus. Those not in `toolchain/spec/shims.toml`:", ""]
    for r in record.releases:
        if "runtime_refs" in r.raw:
            miss = r.raw.get("runtime_refs_missing") or []
            lines.append(f"- {r.version}: {len(r.raw['runtime_refs'])} referenced, "
                         + (f"missing {', '.join(miss)}" if miss else "all in the spec"))
    lines += ["", "## Per package", "",
              "| torch | package | cases | aoti-run | Python module | shims | CPU ISA (torch's record) | Sleef |",
              "|---|---|---|---|---|---|---|---|"]
    for r in record.releases:
        for name, p in sorted((r.raw.get("packages") or {}).items()):
            if not p["exported"]:
                lines.append(f"| {r.version} | {name} | - | export failed: {p['error'][:200]} | | | | |")
                continue
            note = f" ({p['error']})" if p.get("error") else ""
            lines.append(f"| {r.version} | {name}{note} | {p['cases']} | {p['aoti_run']} | {p['python']} | "
                         f"{len(p['imports'])} | {p['cpu_isa'] or '-'} | {'yes' if p['sleef'] else 'no'} |")
    lines += ["", "## What changes between releases", ""]
    prev: Release | None = None
    for r in record.releases:
        if not r.imports:
            continue
        if prev is None:
            lines.append(f"- {r.version}: {len(r.imports)} shims imported, {len(r.entry_points)} entry points exported")
        else:
            added, gone = sorted(r.imports - prev.imports), sorted(prev.imports - r.imports)
            eps_added = sorted(r.entry_points - prev.entry_points)
            parts = [f"imports +{len(added)}" + (f" ({', '.join(added)})" if added else ""),
                     f"-{len(gone)}" + (f" ({', '.join(gone)})" if gone else "")]
            if eps_added:
                parts.append(f"new entry points: {', '.join(eps_added)}")
            lines.append(f"- {prev.version} -> {r.version}: " + "; ".join(parts))
        prev = r
    lines += ["", "## Cost of a release's venv", "",
              "PyPI's Linux wheels are CUDA builds; they run on CPU but `import torch` loads the CUDA libraries "
              "libtorch links, so a venv holds the wheel (installed without dependencies) plus the pure-Python "
              "requirements and only those CUDA libraries (no triton, cuda-bindings, cuSOLVER or NVTX; NVRTC comes as cuBLAS's dependency). "
              "Everything stays under build/torch-versions/ (wheels, pip's cache, venvs, inductor's cache, "
              "packages).", "",
              "| torch | install (download + unpack), s | venv size, GiB | corpus export, s |", "|---|---|---|---|"]
    for r in record.releases:
        raw = r.raw
        if raw.get("install_seconds"):  # not the torch of the environment the matrix runs in
            lines.append(f"| {r.version} | {raw['install_seconds']} | {raw.get('venv_bytes', 0) / 2**30:.1f} | "
                         f"{raw.get('export_seconds', '-')} |")
    lines.append("")
    return "\n".join(lines)
