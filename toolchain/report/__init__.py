"""Report formats of the checks: text (people), json (the versioned schema in schema/), sarif (SARIF 2.1.0)
and junit (JUnit XML). They render a toolchain.findings.Report; rule texts come from the rule table."""

from toolchain.report import formats
from toolchain.report.formats import FORMATS, render, to_json, to_junit, to_sarif, to_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from toolchain.report.formats import REPORT_SCHEMA, SARIF_SCHEMA

__all__ = ["FORMATS", "REPORT_SCHEMA", "SARIF_SCHEMA", "render", "to_json", "to_junit", "to_sarif", "to_text"]


def __getattr__(name: str):
    """REPORT_SCHEMA and SARIF_SCHEMA (pathlib.Path) from toolchain.report.formats, made when first read."""
    if name in ("REPORT_SCHEMA", "SARIF_SCHEMA"):
        return getattr(formats, name)
    msg = f"module 'toolchain.report' has no attribute {name!r}"
    raise AttributeError(msg)
