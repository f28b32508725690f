"""Report output: text (people), json (our versioned schema, schema/verify-report-v1.schema.json),
sarif (SARIF 2.1.0, for code-scanning UIs) and junit (JUnit XML, for CI test reports)."""

from __future__ import annotations

import os
from pathlib import Path

from toolchain.findings import EXIT_UNREADABLE, REPORT_SCHEMA_VERSION, Report, verify_rules

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"  # the schemas, for tests and docs
REPORT_SCHEMA = SCHEMA_DIR / "verify-report-v1.schema.json"
SARIF_SCHEMA = SCHEMA_DIR / "sarif-schema-2.1.0.json"
FORMATS = ("text", "json", "sarif", "junit")


def _tool_version() -> str:
    """The version of the code that made the report: toolchain.__version__, which the wheel's metadata is
    built from (asking importlib.metadata instead costs ~10 ms and, in a checkout, names whatever
    distribution is installed, not the code running)."""
    import toolchain

    return toolchain.__version__


def to_json(report: Report) -> dict:
    return {
        "schema": "aoti-toolchain-verify-report",
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": {"name": "aoti-toolchain", "version": _tool_version()},
        "profile": report.profile,
        "host": report.host,
        "host_source": report.host_source,
        "strict": report.strict,
        "summary": {"files": len(report.files), "errors": report.count("error"),
                    "warnings": report.count("warning"), "verdict": report.verdict, "exit_code": report.exit_code},
        "files": [{"path": f.path, "kind": f.kind, "machine": f.machine,
                   "errors": sum(1 for x in f.findings if x.severity == "error"),
                   "warnings": sum(1 for x in f.findings if x.severity == "warning"),
                   "resolved": {lib: {"symbols": n, "via": via} for lib, (n, via) in sorted(f.resolved.items())}}
                  for f in report.files],
        "findings": [f.to_json() for f in report.findings],
    }


def to_text(report: Report) -> str:
    lines = [f"profile {report.profile['name']}: {report.profile['description']}"
             + (f"; host {report.host}" if report.host else "")]
    if report.host_source:
        lines.append(f"host assumed: {report.host_source}")
    for f in report.files:
        errs = sum(1 for x in f.findings if x.severity == "error")
        warns = sum(1 for x in f.findings if x.severity == "warning")
        status = "ok" if not f.findings else f"{errs} error(s), {warns} warning(s)"
        lines.append(f"{f.path} [{f.kind}{', ' + f.machine if f.machine else ''}]: {status}")
        if f.kind == "plugin" and f.resolved:
            for via, what in (("needed", "its DT_NEEDED"), ("host", "the host")):
                libs = [f"{lib} ({n})" for lib, (n, v) in sorted(f.resolved.items()) if v == via]
                if libs:
                    lines.append(f"  imports bound by {what}: {', '.join(libs)}")
        for x in f.findings:
            lines.append(f"  {x.severity}: [{x.rule}] {x.message}")
            lines.append(f"    fix: {x.fix}")
    lines.append(f"verdict: {report.verdict.upper()} ({report.count('error')} error(s), "
                 f"{report.count('warning')} warning(s){', --strict' if report.strict else ''})")
    return "\n".join(lines) + "\n"


def _uri(path: str) -> str:
    outer = path.split("!", 1)[0]
    return Path(os.path.abspath(outer)).as_uri()


def to_sarif(report: Report) -> dict:
    table = verify_rules()
    rule_ids = [r.id for r in table]
    rules = [{"id": r.id, "name": r.id.replace("-", " ").title().replace(" ", ""),
              "shortDescription": {"text": r.summary},
              "help": {"text": r.fix},
              "defaultConfiguration": {"level": r.severity}} for r in table]
    results = []
    for f in report.findings:
        loc: dict = {"physicalLocation": {"artifactLocation": {"uri": _uri(f.file)}}}
        if f.symbol or f.entry_point:
            loc["logicalLocations"] = [{"name": f.symbol or f.entry_point, "kind": "function"}]
        results.append({"ruleId": f.rule, "ruleIndex": rule_ids.index(f.rule), "level": f.severity,
                        "message": {"text": f"{f.message}. Fix: {f.fix}"}, "locations": [loc],
                        "properties": {"symbol": f.symbol, "version": f.version, "entryPoint": f.entry_point,
                                       "library": f.library, "file": f.file}})
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "aoti-toolchain verify", "version": _tool_version(), "rules": rules}},
            "invocations": [{"executionSuccessful": report.exit_code != EXIT_UNREADABLE, "exitCode": report.exit_code}],
            "results": results,
            "properties": {"profile": report.profile["name"], "host": report.host},
        }],
    }


def to_junit(report: Report) -> str:
    """One testsuite per file, one testcase per rule that applies to its kind; a finding is a failure
    (error) or a skipped-with-message (warning); an unreadable file is an <error>."""
    from xml.etree import ElementTree as ET

    suites = ET.Element("testsuites", name="aoti-toolchain verify")
    tot_t = tot_f = tot_e = 0
    for fr in report.files:
        suite = ET.SubElement(suites, "testsuite", name=fr.path)
        n_t = n_f = n_e = 0
        by_rule: dict[str, list] = {}
        for x in fr.findings:
            by_rule.setdefault(x.rule, []).append(x)
        applicable = [r for r in verify_rules() if r.applies_to in ("any", fr.kind) or r.id in by_rule]
        for rule in applicable:
            case = ET.SubElement(suite, "testcase", classname=fr.path, name=rule.id, time="0")
            n_t += 1
            found = by_rule.get(rule.id, [])
            errors = [x for x in found if x.severity == "error"]
            text = "\n".join(f"{x.message}\nfix: {x.fix}" for x in found)
            if fr.kind == "unreadable" and found:
                ET.SubElement(case, "error", message=found[0].message, type=rule.id).text = text
                n_e += 1
            elif errors or (found and report.strict):
                ET.SubElement(case, "failure", message=found[0].message, type=rule.id).text = text
                n_f += 1
            elif found:
                ET.SubElement(case, "system-out").text = "warning: " + text
        suite.set("tests", str(n_t))
        suite.set("failures", str(n_f))
        suite.set("errors", str(n_e))
        suite.set("skipped", "0")
        suite.set("time", "0")
        tot_t, tot_f, tot_e = tot_t + n_t, tot_f + n_f, tot_e + n_e
    suites.set("tests", str(tot_t))
    suites.set("failures", str(tot_f))
    suites.set("errors", str(tot_e))
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def render(report: Report, fmt: str) -> str:
    if fmt == "text":
        return to_text(report)
    import json  # the text report, the common case, needs no JSON encoder

    if fmt == "json":
        return json.dumps(to_json(report), indent=2) + "\n"
    if fmt == "sarif":
        return json.dumps(to_sarif(report), indent=2) + "\n"
    if fmt == "junit":
        return to_junit(report)
    msg = f"unknown format {fmt!r}"
    raise ValueError(msg)


