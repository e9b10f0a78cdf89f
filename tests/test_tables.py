"""The one Markdown table writer behind every printed results table."""
import pytest

from minbert.common.tables import markdown_table


def test_rows_columns_rounding_and_missing_cells():
    table = markdown_table({"a": {"x": 0.12345, "n": 3, "t": "1.5"}, "b": {"x": 1.0}}, ["x", "n", "t"],
                           label="run", digits=3)
    assert table.splitlines() == ["| run | x | n | t |", "|---|---|---|---|",
                                  "| a | 0.123 | 3 | 1.5 |", "| b | 1.000 | - | - |"]


def test_headers_rename_the_header_line_only():
    table = markdown_table({"mtdnn": {"sst": 0.5}}, ["sst"], label="schedule", headers=["SST acc"])
    assert table.splitlines()[0] == "| schedule | SST acc |" and table.splitlines()[2] == "| mtdnn | 0.50 |"
    with pytest.raises(ValueError, match="2 headers for 1 columns"):
        markdown_table({}, ["sst"], headers=["a", "b"])
