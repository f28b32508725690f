"""verify's outputs and exit codes through the real CLI: JSON against our versioned schema, SARIF against the
official SARIF 2.1.0 schema, JUnit XML as CI systems read it."""

from __future__ import annotations

import json
import re
import string
import subprocess
import sys
from xml.etree import ElementTree as ET

import jsonschema
import pytest
import xmlschema

from tests.integration import elf_builders as eb
from toolchain.findings import RULES
from toolchain.report.formats import REPORT_SCHEMA, SARIF_SCHEMA


def cli(*args):
    """The CLI; these files are checked standalone (--host none) unless a test names a host."""
    if args[0] == "verify" and "--host" not in args:
        args = ("verify", "--host", "none", *args[1:])
    return subprocess.run([sys.executable, "-m", "toolchain", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("formats")
    good = eb.build(d, "good", imports=["puts"], flags=["-Wl,-z,noexecstack"])
    warn = eb.build(d, "warn", flags=["-Wl,-z,execstack"])  # exec-stack: a warning on this glibc
    bad = eb.build(d, "bad", imports=["no_such_symbol_x"], entry_points=[], flags=["-Wl,-z,noexecstack"])
    bad_plugin = eb.build(d, "badplugin", imports=["no_such_symbol_y"], flags=["-Wl,-z,noexecstack"])
    junk = d / "junk.so"
    junk.write_bytes(b"not an elf at all")
    return {"good": good, "warn": warn, "bad": bad, "bad_plugin": bad_plugin, "junk": junk, "dir": d}


def test_exit_codes(files):
    assert cli("verify", files["good"]).returncode == 0
    r = cli("verify", files["warn"])
    assert r.returncode == 0 and "exec-stack" in r.stdout
    assert cli("verify", "--strict", files["warn"]).returncode == 1
    r = cli("verify", files["bad_plugin"])
    assert r.returncode == 1 and "[unresolved-symbol]" in r.stdout and "fix:" in r.stdout
    r = cli("verify", files["junk"], files["bad_plugin"])
    assert r.returncode == 3 and "[not-elf]" in r.stdout
    r = cli("verify", "--profile", "debain12", files["good"])
    assert r.returncode == 2 and "did you mean 'debian12'" in r.stderr and "Traceback" not in r.stderr
    r = cli("verify", files["dir"] / "missing.so")
    assert r.returncode == 3 and "no such file" in r.stderr and "Traceback" not in r.stderr
    r = cli("verify", files["good"], "--host", files["junk"])
    assert r.returncode == 3 and "--host" in r.stderr


def test_json_validates_against_the_versioned_schema(files):
    schema = json.loads(REPORT_SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    for name in ("good", "warn", "bad_plugin", "junk"):
        r = cli("verify", "--format", "json", files[name])
        data = json.loads(r.stdout)
        jsonschema.validate(data, schema)
        assert data["summary"]["exit_code"] == r.returncode
    data = json.loads(cli("verify", "--format", "json", files["bad_plugin"]).stdout)
    (f,) = [x for x in data["findings"] if x["rule"] == "unresolved-symbol"]
    assert f["symbol"] == "no_such_symbol_y" and f["file"] == str(files["bad_plugin"]) and f["fix"]
    assert data["profile"]["source"]
    # the schema is not a rubber stamp: a report with an unknown rule id is rejected
    data["findings"][0]["rule"] = "made-up-rule"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


def test_sarif_validates_against_sarif_2_1_0(files):
    schema = json.loads(SARIF_SCHEMA.read_text())
    assert schema["title"].startswith("Static Analysis Results Format (SARIF) Version 2.1.0")
    out = files["dir"] / "report.sarif"
    r = cli("verify", "--format", "sarif", "-o", out, files["bad_plugin"], files["warn"], files["junk"])
    assert r.returncode == 3 and out.is_file() and "report ->" in r.stderr
    data = json.loads(out.read_text())
    jsonschema.Draft4Validator(schema).validate(data)
    results = data["runs"][0]["results"]
    assert {x["ruleId"] for x in results} >= {"unresolved-symbol", "exec-stack", "not-elf"}
    rules = data["runs"][0]["tool"]["driver"]["rules"]
    for x in results:
        assert rules[x["ruleIndex"]]["id"] == x["ruleId"]
    bad = dict(data, version="2.0.0")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(schema).validate(bad)


def test_junit_is_readable(files):
    out = files["dir"] / "report.xml"
    r = cli("verify", "--format", "junit", "-o", out, files["good"], files["bad_plugin"], files["junk"])
    assert r.returncode == 3
    root = ET.parse(out).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [str(files["good"]), str(files["bad_plugin"]), str(files["junk"])]
    for s in suites:
        cases = s.findall("testcase")
        assert int(s.get("tests")) == len(cases)
        assert int(s.get("failures")) == sum(1 for c in cases if c.find("failure") is not None)
        assert int(s.get("errors")) == sum(1 for c in cases if c.find("error") is not None)
    good, bad, junk = suites
    assert good.get("failures") == "0" and int(good.get("tests")) >= 10
    failed = [c.get("name") for c in bad.findall("testcase") if c.find("failure") is not None]
    assert failed == ["unresolved-symbol"]
    assert junk.find("testcase/error").get("type") == "not-elf"
    assert int(root.get("tests")) == sum(int(s.get("tests")) for s in suites)
    # each suite is what Maven Surefire writes and Jenkins/GitLab/GitHub reporters read
    xsd = xmlschema.XMLSchema(str(eb.REPO_ROOT / "tests" / "data" / "surefire-test-report-3.0.xsd"))
    for s in suites:
        xsd.validate(ET.tostring(s, encoding="unicode"))
    broken = ET.fromstring(ET.tostring(bad, encoding="unicode"))
    broken.find("testcase").attrib.pop("name")
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        xsd.validate(ET.tostring(broken, encoding="unicode"))
    assert all(c.get("name") in RULES for c in root.iter("testcase"))


def _template_regex(template: str) -> re.Pattern:
    """A fix template as a pattern: its literal text, each {field} any non-empty text."""
    parts = []
    for literal, field, _spec, _conv in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(".+?")
    return re.compile("".join(parts))


def _from_table(rule: str, fix: str) -> bool:
    return any(_template_regex(t).fullmatch(fix) for t in RULES[rule].templates())


def test_every_fix_in_text_sarif_and_junit_comes_from_the_rule_table(files, tmp_path):
    d = files["dir"]
    rp = eb.build(d, "rp", flags=["-Wl,-z,noexecstack", f"-Wl,-rpath,{d}", "-Wl,--enable-new-dtags"])
    arm = eb.set_machine(files["good"], d / "arm.so", 183)
    cut = d / "cut.so"
    cut.write_bytes(files["good"].read_bytes()[:100])
    inputs = [files["bad"], files["bad_plugin"], files["warn"], files["junk"], rp, arm, cut]
    text = cli("verify", *inputs).stdout
    text_fixes = re.findall(r"^  (?:error|warning): \[([\w-]+)\] .*\n    fix: (.*)$", text, re.M)
    assert {r for r, _ in text_fixes} >= {"unresolved-symbol", "exec-stack", "not-elf",
                                         "unsafe-runpath", "wrong-arch", "truncated"}, text
    for rule, fix in text_fixes:
        assert _from_table(rule, fix), (rule, fix)

    out = tmp_path / "r.sarif"
    cli("verify", "--format", "sarif", "-o", out, *inputs)
    run = json.loads(out.read_text())["runs"][0]
    assert {r["id"]: r["help"]["text"] for r in run["tool"]["driver"]["rules"]} == {
        r.id: r.fix for r in RULES.values() if "verify" in r.stages}
    assert len(run["results"]) == len(text_fixes)
    for res in run["results"]:
        fix = res["message"]["text"].rsplit(". Fix: ", 1)[1]
        assert _from_table(res["ruleId"], fix), res

    out = tmp_path / "r.xml"
    cli("verify", "--format", "junit", "-o", out, *inputs)
    junit_fixes = [(el.get("type") or case.get("name"), line.removeprefix("fix: "))
                   for case in ET.parse(out).getroot().iter("testcase")
                   for el in (*case.findall("failure"), *case.findall("error"), *case.findall("system-out"))
                   for line in (el.text or "").splitlines() if line.startswith(("fix: ", "warning: fix: "))]
    assert junit_fixes
    for rule, fix in junit_fixes:
        assert _from_table(rule, fix.removeprefix("warning: fix: ")), (rule, fix)
