"""Findings, the rule catalogue and the report; exit codes.

Exit codes of `aoti-toolchain verify`: 0 pass (warnings allowed unless --strict), 1 a failure (an error
finding, or a warning with --strict), 2 usage error (no runtime library to assume as the host included),
3 an input that cannot be read (not-elf, truncated, malformed, missing file, a package entry the runtime
cannot parse: bad-package-json). Unreadable input wins over failures: the verdict is incomplete.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from toolchain.errors import exit_code

# From the project's exit-code table (toolchain/spec/exit_codes.toml).
EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_UNREADABLE = (exit_code(n) for n in ("ok", "failed", "usage", "bad_input"))
REPORT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str  # default: error | warning
    applies_to: str  # plugin | host | any
    summary: str


RULES: dict[str, Rule] = {r.id: r for r in (
    Rule("not-elf", "error", "any", "The file is not an ELF object (or a .pt2 holding one)."),
    Rule("truncated", "error", "any", "The file ends before a structure its headers point to."),
    Rule("malformed", "error", "any", "A table inside the ELF file is inconsistent."),
    Rule("wrong-arch", "error", "any", "Built for another machine or ELF class than the target."),
    Rule("missing-entry-point", "error", "plugin", "A required AOTInductor entry point is not exported."),
    Rule("no-entries-api", "warning", "plugin",
         "No AOTInductorModelContainerExtractConstantsMapEntries: features are lost."),
    Rule("unresolved-symbol", "error", "any", "An undefined symbol no object in the lookup scope defines."),
    Rule("missing-library", "error", "any", "A DT_NEEDED library the loader will not find."),
    Rule("missing-cxx-runtime", "error", "any", "C++ runtime symbols imported without libstdc++ in DT_NEEDED."),
    Rule("symbol-version-too-new", "error", "any", "Needs a newer GLIBC/GLIBCXX/CXXABI/GCC than the profile."),
    Rule("library-not-allowed", "error", "any", "Needs a library the target profile does not provide."),
    Rule("libtorch-dependency", "error", "plugin", "Needs LibTorch (built with link_libtorch=True)."),
    Rule("exec-stack", "warning", "any", "Asks for an executable stack (error where glibc >= 2.41 refuses it)."),
    Rule("textrel", "warning", "any", "Has text relocations."),
    Rule("unsafe-runpath", "error", "any", "RUNPATH/RPATH entry outside the system dirs or not under $ORIGIN."),
    Rule("cannot-unload", "warning", "plugin",
         "GNU_UNIQUE symbols or DF_1_NODELETE: dlclose never unmaps it. Expected on every torch-built plugin "
         "(aoti-toolchain export's too): libstdc++ headers and inductor's own globals give GNU_UNIQUE symbols and "
         "torch's inductor configs cannot pass -fno-gnu-unique; the cost is one mapping per distinct plugin for "
         "the life of the process."),
    Rule("exports-shim", "error", "plugin", "The plugin defines aoti_torch_* shims itself."),
    Rule("two-cxx-runtimes", "warning", "plugin",
         "The plugin exports its own (static) C++ runtime with GNU_UNIQUE symbols and the host's global scope "
         "lacks the shared libstdc++."),
    Rule("shim-not-exported", "error", "host", "The host does not export a shim plugins import."),
    Rule("duplicate-shim-definition", "error", "host", "More than one object in the host's scope defines a shim."),
    Rule("mixed-config", "error", "any", "Objects linked into one binary were compiled with different configs."),
    Rule("not-shared-object", "error", "plugin",
         "Checked as a plugin but not a shared object (ET_EXEC, ET_REL, a PIE): dlopen refuses it."),
    Rule("bad-package", "error", "package",
         "The .pt2 is not one the runtime loads: no plugin under <model>/data/aotinductor/, or several."),
    Rule("bad-package-json", "error", "package",
         "The package's contract or constant-layout entry breaks the rules the runtime applies "
         "(docs/package-json.md): the runtime refuses the package."),
)}
UNREADABLE_RULES = frozenset({"not-elf", "truncated", "malformed", "bad-package-json"})


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    file: str
    message: str
    fix: str
    symbol: str | None = None
    version: str | None = None
    entry_point: str | None = None
    library: str | None = None
    fix_op: tuple[str, str] | None = None  # (operation, argument) that `patch --fix` applies

    def to_json(self) -> dict:
        d = asdict(self)
        d["fix_op"] = {"op": self.fix_op[0], "arg": self.fix_op[1]} if self.fix_op else None
        return d


@dataclass
class FileResult:
    path: str
    kind: str  # plugin | host | library | package | unreadable
    machine: str | None = None
    findings: list[Finding] = field(default_factory=list)
    # what its undefined symbols bind to: library -> [symbols, "host" (the host's global scope) or "needed"
    # (its own DT_NEEDED closure)]
    resolved: dict[str, list] = field(default_factory=dict)

    def note_resolved(self, library: str, via: str) -> None:
        entry = self.resolved.setdefault(library, [0, via])
        entry[0] += 1

    def add(self, rule: str, message: str, fix: str, *, severity: str | None = None, **kw) -> None:
        sev = severity or RULES[rule].severity
        self.findings.append(Finding(rule, sev, self.path, message, fix, **kw))


@dataclass
class Report:
    profile: dict
    host: str | None
    strict: bool
    files: list[FileResult] = field(default_factory=list)
    host_source: str | None = None  # why this host: "--host", "default: ...", "none: ..."

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.files for f in r.findings]

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    @property
    def exit_code(self) -> int:
        if any(f.rule in UNREADABLE_RULES for f in self.findings):
            return EXIT_UNREADABLE
        if self.count("error") or (self.strict and self.count("warning")):
            return EXIT_FAIL
        return EXIT_PASS

    @property
    def verdict(self) -> str:
        return {EXIT_PASS: "pass", EXIT_FAIL: "fail", EXIT_UNREADABLE: "unreadable"}[self.exit_code]

    def rules_seen(self) -> list[str]:
        return sorted({f.rule for f in self.findings})
