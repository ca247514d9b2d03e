"""The files a dataset reads, for the profilers' page-cache control (``lotus stalls``/``sensitivity``).

With ``LOTUS_DATASET_FILES=1`` (set by the profilers through ``lotus.launch``), each traced DataLoader
of the main process writes the paths of its dataset's files, one per line, to
``<trace_dir>/lotus-dataset-r<rank>-l<loader>.files``, so the launcher can evict them from the page
cache (cold-cache probes) or keep a share of them cached (memory sensitivity) between probes. Found
from the conventions of torchvision and common datasets: ``samples``/``imgs`` (lists of ``(path,
target)``), ``files``/``paths``/``image_paths``/``file_list`` (lists of paths), through wrappers
(``dataset``, ``datasets``). Nothing is read or opened.
"""

from __future__ import annotations

import os

_LIST_ATTRS = ("samples", "imgs", "files", "paths", "image_paths", "file_list", "filenames")
_MAX_DEPTH = 4


def _paths_of(value) -> list[str]:
    if not isinstance(value, (list, tuple)) or not value:
        return []
    first = value[0]
    if isinstance(first, (tuple, list)) and first and isinstance(first[0], (str, os.PathLike)):
        return [os.fspath(v[0]) for v in value]
    if isinstance(first, (str, os.PathLike)):
        return [os.fspath(v) for v in value]
    return []


def dataset_files(ds, depth: int = 0, seen: set | None = None) -> list[str]:
    """Paths of the files ``ds`` (and the datasets it wraps) reads; [] when unknown."""
    seen = set() if seen is None else seen
    if ds is None or depth > _MAX_DEPTH or id(ds) in seen:
        return []
    seen.add(id(ds))
    try:
        attrs = vars(ds)
    except TypeError:
        return []
    for name in _LIST_ATTRS:
        paths = _paths_of(attrs.get(name))
        if paths and os.path.isfile(paths[0]):
            return paths
    out: list[str] = []
    out += dataset_files(attrs.get("dataset"), depth + 1, seen)
    for sub in attrs.get("datasets") or ():
        out += dataset_files(sub, depth + 1, seen)
    return out


def write_file_list(ds, trace_dir: str, rank: int, loader: int) -> str | None:
    """Write the list; its path, or None when the dataset's files are unknown."""
    paths = dataset_files(ds)
    if not paths:
        return None
    out = os.path.join(trace_dir, f"lotus-dataset-r{rank}-l{loader}.files")
    with open(out, "w") as f:
        f.write("\n".join(paths))
        f.write("\n")
    return out
