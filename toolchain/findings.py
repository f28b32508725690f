"""The bottom floor of the checks: the rule table (toolchain/spec/rules.toml), findings, per-file results and
the report with its exit code. Everything that reports a rule (the SCons link rules, the post-link step,
`aoti-toolchain verify`, its report formats, docs/rules.md) takes the rule's summary and fix from here.

Exit codes of `aoti-toolchain verify`, by their names in toolchain/spec/exit_codes.toml: ok (pass; warnings
allowed unless --strict), failed (an error finding, or a warning with --strict), usage (no runtime library to
assume as the host included), bad_input (an input that cannot be read: not-elf, truncated, malformed, missing
file, a package entry the runtime cannot parse: bad-package-json). Unreadable input wins over failures: the
verdict is incomplete.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType

from toolchain import parsed_cache
from toolchain.errors import SpecError, exit_code

RULES_FILE = Path(__file__).resolve().parent / "spec" / "rules.toml"
SEVERITIES = ("error", "warning")
STAGES = ("link", "post-link", "verify")
APPLIES_TO = ("plugin", "host", "package", "any")
_KEYS = {"id", "severity", "stage", "applies-to", "summary", "fix", "fixes"}

# From the project's exit-code table (toolchain/spec/exit_codes.toml).
EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_UNREADABLE = (exit_code(n) for n in ("ok", "failed", "usage", "bad_input"))
REPORT_SCHEMA_VERSION = 1


def template_fields(template: str) -> tuple[str, ...]:
    """The named fields of a fix template ("{soname}"), in order."""
    import string  # when a rule table is parsed and checked, not at every start (its entry comes checked)

    return tuple(f for _, f, _, _ in string.Formatter().parse(template) if f is not None)


@dataclass(frozen=True)
class Rule:
    """One row of the rule table (toolchain/spec/rules.toml): severity, stages, what it applies to, fixes."""

    id: str
    severity: str  # default: error | warning
    stages: tuple[str, ...]  # link | post-link | verify
    applies_to: str  # plugin | host | package | any
    summary: str
    fix: str  # a template: {field}s are filled by the check
    fixes: Mapping[str, str] = field(default_factory=dict)  # named variants of the fix

    def fix_text(self, variant: str | None = None, **fields: object) -> str:
        """The fix for one finding: the default template or a named variant, with its fields filled."""
        template = self.fix if variant is None else self.fixes[variant]
        return template.format_map(fields)

    def templates(self) -> tuple[str, ...]:
        return (self.fix, *self.fixes.values())


def _bad(path: str | os.PathLike[str], where: str, reason: str, fix: str) -> SpecError:
    return SpecError(f"{path}: {where}: {reason}", fix=fix)


def load_rules(path: str | os.PathLike[str] = RULES_FILE) -> dict[str, Rule]:
    """Read and validate the rule table; SpecError names the file, the rule and the defect."""
    import tomllib  # only when the file is parsed (not for an entry of the parsed cache)

    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise _bad(path, "rule table", f"cannot be read: {exc.strerror}", "restore toolchain/spec/rules.toml") from None
    except tomllib.TOMLDecodeError as exc:
        raise _bad(path, "rule table", f"not valid TOML: {exc}", "fix the TOML syntax") from None
    rows = data.get("rule")
    if not isinstance(rows, list) or set(data) != {"rule"}:
        raise _bad(path, "rule table", "expected only [[rule]] tables", "write each rule as a [[rule]] table")
    out: dict[str, Rule] = {}
    for i, row in enumerate(rows):
        where = f"rule {i} ({row.get('id', '?')})" if isinstance(row, dict) else f"rule {i}"
        if not isinstance(row, dict):
            raise _bad(path, where, "not a table", "write it as [[rule]]")
        unknown = set(row) - _KEYS
        missing = _KEYS - {"fixes"} - set(row)
        if unknown or missing:
            raise _bad(path, where, f"unknown keys {sorted(unknown)}, missing keys {sorted(missing)}",
                       f"a rule has exactly the keys {', '.join(sorted(_KEYS))} (fixes optional)")
        fixes = row.get("fixes", {})
        texts = [row["id"], row["summary"], row["fix"], *(fixes.values() if isinstance(fixes, dict) else [None])]
        if not all(isinstance(t, str) and t for t in texts):
            raise _bad(path, where, "id, summary, fix and each fixes entry must be non-empty strings",
                       "quote the texts")
        stages = row["stage"]
        if row["severity"] not in SEVERITIES:
            raise _bad(path, where, f"severity {row['severity']!r}", f"one of {', '.join(SEVERITIES)}")
        if not isinstance(stages, list) or not stages or not set(stages) <= set(STAGES):
            raise _bad(path, where, f"stage {stages!r}", f"a list of {', '.join(STAGES)}")
        if row["applies-to"] not in APPLIES_TO:
            raise _bad(path, where, f"applies-to {row['applies-to']!r}", f"one of {', '.join(APPLIES_TO)}")
        if row["id"] in out:
            raise _bad(path, where, "a second rule with this id", "rename or remove one")
        for t in (row["fix"], *fixes.values()):
            try:
                template_fields(t)
            except ValueError as exc:
                raise _bad(path, where, f"fix template {t!r}: {exc}", "write literal braces as {{ and }}") from None
        out[row["id"]] = Rule(row["id"], row["severity"], tuple(stages), row["applies-to"], row["summary"],
                              row["fix"], MappingProxyType(dict(fixes)))
    return out


def _rules_from(stored: dict) -> dict[str, Rule]:
    """The rule table from the parsed cache's plain copy of it."""
    return {rid: Rule(i, sev, stages, applies, summary, fix, MappingProxyType(fixes))
            for rid, (i, sev, stages, applies, summary, fix, fixes) in stored.items()}


def _rules_plain(rules: dict[str, Rule]) -> dict:
    return {rid: (r.id, r.severity, r.stages, r.applies_to, r.summary, r.fix, dict(r.fixes)) for rid, r in rules.items()}


RULES: dict[str, Rule] = parsed_cache.load("rules", (RULES_FILE, __file__), load_rules, _rules_from, _rules_plain)
UNREADABLE_RULES = frozenset({"not-elf", "truncated", "malformed", "bad-package-json"})


def verify_rules() -> list[Rule]:
    """The rules `aoti-toolchain verify` reports (SARIF's rule list, JUnit's test cases)."""
    return [r for r in RULES.values() if "verify" in r.stages]


@dataclass(frozen=True)
class Finding:
    """One rule's finding on one file, with the fix the rule table gives."""

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
    """What verify found in one file: its kind, machine, findings and where its imports bound."""

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

    def add(self, rule: str, message: str, *, severity: str | None = None, fix_variant: str | None = None,
            fix_args: Mapping[str, object] | None = None, **kw) -> None:
        """A finding of `rule`; its fix is the table's (the `fix_variant` one), filled with `fix_args`."""
        r = RULES[rule]
        fix = r.fix_text(fix_variant, **(fix_args or {}))
        self.findings.append(Finding(rule, severity or r.severity, self.path, message, fix, **kw))


@dataclass
class Report:
    """Every file's result under one profile and host, with the verdict and exit code."""

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
