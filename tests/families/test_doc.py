"""docs/METRICS.md is what `kdiag metrics doc` writes from the declarations today."""

from __future__ import annotations

from tests.paths import ROOT

from kdiag.cli.main import main


def test_metrics_doc_is_up_to_date(tmp_path):
    assert main(["metrics", "doc", "-o", str(tmp_path / "METRICS.md")]) == 0
    assert (tmp_path / "METRICS.md").read_text() == (ROOT / "docs" / "METRICS.md").read_text(), \
        "docs/METRICS.md is stale: run `kdiag metrics doc`"


def test_every_declared_family_and_the_collector_emitting_it_is_listed(tmp_path):
    text = (ROOT / "docs" / "METRICS.md").read_text()
    assert "| `kdiag_disk_io_time_seconds_total` | counter | seconds | device | diskstats |" in text
    assert "| `kdiag_collector_success` | gauge | - | collector | kdiag |" in text
    assert "`kdiag_memory_<field>_bytes`" in text
