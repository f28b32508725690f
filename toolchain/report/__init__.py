"""Report formats of the checks: text (people), json (the versioned schema in schema/), sarif (SARIF 2.1.0)
and junit (JUnit XML). They render a toolchain.findings.Report; rule texts come from the rule table."""

from toolchain.report.formats import FORMATS, REPORT_SCHEMA, SARIF_SCHEMA, render, to_json, to_junit, to_sarif, to_text

__all__ = ["FORMATS", "REPORT_SCHEMA", "SARIF_SCHEMA", "render", "to_json", "to_junit", "to_sarif", "to_text"]
