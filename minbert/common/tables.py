"""Markdown tables of results, in the form the README shows them."""
from collections.abc import Mapping, Sequence


def markdown_table(rows: Mapping[str, Mapping], columns: Sequence[str], label: str = "model", digits: int = 2,
                   headers: Sequence[str] | None = None) -> str:
    """One line per row name, one cell per column key: floats to `digits` decimals, other values as they
    are, '-' where a row has no such key. `headers` renames the columns in the header line only.

    >>> print(markdown_table({"a": {"x": 0.5, "n": 3}, "b": {"x": 1.0}}, ["x", "n"], label="run"))
    | run | x | n |
    |---|---|---|
    | a | 0.50 | 3 |
    | b | 1.00 | - |
    """
    headers = columns if headers is None else headers
    if len(headers) != len(columns):
        raise ValueError(f"{len(headers)} headers for {len(columns)} columns")
    lines = [f"| {label} | " + " | ".join(headers) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, row in rows.items():
        cells = (f"{row[c]:.{digits}f}" if isinstance(row.get(c), float) else str(row.get(c, "-")) for c in columns)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cell(text) -> str:
    """Text inside a Markdown table cell: one line, and a | would end the cell."""
    return " ".join(str(text).split()).replace("|", "\\|")
