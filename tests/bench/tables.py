"""Reading the Markdown tables the bench scripts print (their smoke tests' parser)."""

from __future__ import annotations

import re


def tables(text: str) -> dict[str, list[list[str]]]:
    """``### (x) ...`` heading -> the rows (cells) of the table under it, header excluded; any
    other ``### `` heading ends the part."""
    out: dict[str, list[list[str]]] = {}
    part = None
    for line in text.splitlines():
        m = re.match(r"### \((\w)\)", line)
        if m:
            part = m.group(1)
            out[part] = []
        elif line.startswith("### "):
            part = None
        elif part and line.startswith("|") and not line.startswith("|---"):
            out[part].append([c.strip() for c in line.strip("|").split("|")])
    return {k: rows[1:] for k, rows in out.items()}  # drop each header row


def number(cell: str) -> float:
    """The first number of a cell (``**1,234.5** ...`` -> 1234.5)."""
    return float(re.match(r"[*\s]*([\d,.]+)", cell).group(1).replace(",", ""))
