"""Small shared helpers for display names."""

from __future__ import annotations


def dedupe(names: list[str], sep: str = "#") -> list[str]:
    """The names in order, a repeated one suffixed ``<sep>2``, ``<sep>3``... so that all are unique."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        if n in seen:
            seen[n] += 1
            out.append(f"{n}{sep}{seen[n]}")
        else:
            seen[n] = 1
            out.append(n)
    return out
