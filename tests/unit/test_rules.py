"""The rule table (toolchain/spec/rules.toml): valid, the one source of every rule's text, and
docs/rules.md generated from it is current."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from toolchain import rules_doc
from toolchain.errors import SpecError
from toolchain.findings import RULES, RULES_FILE, load_rules, template_fields

ROOT = Path(__file__).resolve().parents[2]


def test_table_loads_with_every_stage():
    assert {s for r in RULES.values() for s in r.stages} == {"link", "post-link", "verify"}
    assert RULES["shim-not-exported"].stages == ("post-link", "verify")
    assert template_fields(RULES["unresolved-symbol"].fixes["provider-not-needed"]) == ("soname", "file", "soname")
    assert RULES["cannot-unload"].fix_text().count("{global: AOTInductor*; local: *;}") == 1


def test_the_docs_are_current():
    assert rules_doc.DOC.read_text(encoding="utf-8") == rules_doc.render(), \
        "docs/rules.md is stale: python -m toolchain.rules_doc"


@pytest.mark.parametrize(("edit", "defect"), [
    (lambda t: t.replace('severity = "warning"', 'severity = "fatal"', 1), "severity 'fatal'"),
    (lambda t: t.replace('stage = ["verify"]', 'stage = ["install"]', 1), "stage"),
    (lambda t: t.replace('applies-to = "any"', 'applies-to = "everything"', 1), "applies-to"),
    (lambda t: t.replace('id = "truncated"', 'id = "not-elf"', 1), "a second rule with this id"),
    (lambda t: t.replace('fix = "compile every object with -fPIC"', 'fix = "compile {every"', 1), "fix template"),
    (lambda t: t.replace('summary = "Has text relocations."', 'summery = "x"', 1), "unknown keys"),
    (lambda t: t + "\n[[rule]\n", "not valid TOML"),
])
def test_a_broken_table_is_refused_naming_the_defect(tmp_path, edit, defect):
    bad = tmp_path / "rules.toml"
    bad.write_text(edit(RULES_FILE.read_text()))
    with pytest.raises(SpecError) as info:
        load_rules(bad)
    assert str(bad) in str(info.value) and defect in str(info.value) and info.value.fix


def test_no_fix_text_is_written_in_the_checks():
    """Findings get their fix from the table: the checks pass a variant name and fields, never a text."""
    for rel in ("toolchain/verify/checks.py", "toolchain/verify/package.py", "toolchain/scons/checks.py",
                "toolchain/scons/link_rules.py", "toolchain/elf/config_records.py"):
        text = (ROOT / rel).read_text()
        assert not re.search(r"\bfix\s*=\s*f?\"", text), rel
    assert not [p for p in (ROOT / "toolchain").rglob("*.py") if "AotiUseRuntime" in p.read_text()]
    for rule in RULES.values():
        for template in rule.templates():
            # a fix the checks give is one of these: nothing in the code may hold its words
            words = template.split("{")[0][:40]
            if len(words) < 25:
                continue
            for rel in ("toolchain/verify/checks.py", "toolchain/scons/checks.py", "toolchain/scons/link_rules.py"):
                assert words not in (ROOT / rel).read_text(), (rel, rule.id, words)


def test_the_json_report_schema_knows_every_verify_rule():
    """The JSON report's schema lists the rule ids a finding may have: exactly the verify rules."""
    import json

    from toolchain.findings import verify_rules
    from toolchain.report.formats import REPORT_SCHEMA

    schema = json.loads(REPORT_SCHEMA.read_text(encoding="utf-8"))
    assert sorted(schema["$defs"]["finding"]["properties"]["rule"]["enum"]) == sorted(r.id for r in verify_rules())
