"""The output invariants, stated once: what a number lotus prints or writes may physically be.

Every checker returns a list of :class:`Violation` (empty: the output keeps every invariant), so that a
failing test names each broken figure at once. The rules (docs/analysis.md, "Invariants"):

* **no NaN or infinity** anywhere: JSON written with ``NaN``/``Infinity`` tokens, or ``nan``/``inf`` in
  text (or a JSON string), is a violation; an absent value is ``null`` in JSON and ``-``/``n/a`` in text;
  no suggested ``num_workers`` a machine could not run (above :data:`MAX_WORKERS`);
* **shares** (keys naming a share, a hit rate, a fraction; the wait buckets; the workers' busy shares)
  lie in [0, 1];
* **durations, counts, rates** are >= 0: every number but those whose key is in :data:`SIGNED` (a
  change between runs, a relative error, an id whose -1 means "the main process", an exit code);
* **a measured rate carries its interval or says why not**: a dict with a non-null ``samples_per_s``
  has ``ci95`` (or ``ci95_lo``/``ci95_hi``, ``samples_per_s_ci95``), and when that interval is null, a
  non-empty note in itself or its nearest parent (model predictions, under ``predictions``, named
  ``predicted_*`` or in a dict with ``measured`` false, are predictions, not measurements);
* **rates from the trace** are never above what its batches could deliver and a windowed rate (the
  report's trends) comes from a window holding enough hand-offs (:mod:`tests.invariants.trace_rules`, the
  rule of :mod:`lotus.analysis.windowrate`);
* **the same figure across formats**: every number a command prints as text (or its HTML page shows) is
  one of its JSON's figures as lotus formats numbers, or appears in one of its JSON's strings
  (:func:`check_backed`).
"""

from __future__ import annotations

import html as html_mod
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    where: str  # the output: "stats --json", "report.html", ...
    path: str  # the figure's place in it (JSON path, or the text token)
    value: object
    rule: str

    def __str__(self) -> str:
        return f"{self.where}: {self.path} = {self.value!r}: {self.rule}"


# -- JSON ------------------------------------------------------------------------------------------------
# Numbers that may be negative, and why (every other number is a duration, count, rate, share or id >= 0).
SIGNED = {
    "change": "B - A (diff)", "change_ms": "B - A (diff)", "change_pct": "B - A (diff)",
    "median_change_ms": "B - A (diff)", "prep_change_ms": "B - A (diff)", "wait_change_ms": "B - A (diff)",
    "error": "the model's relative error", "error_before": "the model's relative error (lotus.model.check)",
    "loo_error": "the model's relative error (leave one probe out)", "model_error": "the model's relative error",
    "drift": "a control probe's repeat / first - 1 (lotus.analysis.runspread.Control)",
    "worker_id": "-1: the main process (num_workers=0)",
    "dispatch_worker": "-1: the main process", "worker_a": "-1: the main process",
    "worker_b": "-1: the main process", "worker": "-1: the main process", "exit_code": "a signal: < 0",
}
_SHARE_KEY = re.compile(r"(^|_)(share|shares|hit_rate|frac|fraction)($|_)")
_PCT_KEY = re.compile(r"_pct$")  # a share in percent (share_pct): [0, 100]
_SHARE_PARENTS = {"buckets", "per_worker", "busy_by_worker"}  # {name: share} dicts
_INTERVAL_KEYS = ("ci95", "samples_per_s_ci95", "ci95_lo")
_NOTE_KEYS = ("note", "samples_per_s_note", "rate_note")


class _Strict(json.JSONDecoder):
    def __init__(self):
        super().__init__(parse_constant=self._constant)
        self.bad: list[str] = []

    def _constant(self, token: str):
        self.bad.append(token)
        return float("nan")


def parse_json(text: str, where: str) -> tuple[object, list[Violation]]:
    """The document and its NaN/Infinity tokens as violations (strict JSON has none)."""
    dec = _Strict()
    doc = dec.decode(text)
    return doc, [Violation(where, "(token)", t, "NaN/Infinity in JSON: an absent value is null") for t in dec.bad]


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _walk(obj, path: tuple = ()):
    """(path, key, value) of every scalar; ``key``: the nearest dict key above the value."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, (*path, str(k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, (*path, i))
    else:
        yield path, _key_of(path), obj


def _key_of(path: tuple) -> str:
    return next((p for p in reversed(path) if isinstance(p, str)), "")


def _is_share(path: tuple) -> bool:
    key = _key_of(path)
    strs = [p for p in path if isinstance(p, str)]
    parent = strs[-2] if len(strs) > 1 else ""
    return bool(_SHARE_KEY.search(key)) or parent in _SHARE_PARENTS


def _predicted(path: tuple) -> bool:
    return any(isinstance(p, str) and (p == "predictions" or p.startswith("predicted")) for p in path)


def check_json(doc, where: str) -> list[Violation]:
    """Shares in [0, 1], every unsigned number >= 0 and finite, measured rates with an interval or a note."""
    out = []
    for path, key, v in _walk(doc):
        p = "/".join(map(str, path))
        if isinstance(v, str):  # notes, suggestions: the text rules
            out += check_text(v, f"{where}: {p}")
        if not _is_num(v):
            continue
        if isinstance(v, float) and not math.isfinite(v):
            out.append(Violation(where, p, v, "not finite"))
            continue
        if key not in SIGNED and v < 0:
            out.append(Violation(where, p, v, "negative: durations, counts, rates and shares are >= 0"))
        if _is_share(path) and _PCT_KEY.search(_key_of(path)):
            if not 0 <= v <= 100 + 1e-9:
                out.append(Violation(where, p, v, "a share outside [0, 100] %"))
        elif _is_share(path) and not 0 <= v <= 1 + 1e-12:
            out.append(Violation(where, p, v, "a share outside [0, 1]"))
    out += _check_intervals(doc, where, (), [])
    return out


def _check_intervals(obj, where: str, path: tuple, parents: list) -> list[Violation]:
    out = []
    if isinstance(obj, dict):
        rate = obj.get("samples_per_s")
        if _is_num(rate) and not _predicted(path) and obj.get("measured") is not False:
            ci = next((obj[k] for k in _INTERVAL_KEYS if obj.get(k) is not None), None)
            if ci is None and not any(d.get(k) for d in [obj, *parents[-1:]] for k in _NOTE_KEYS):
                out.append(Violation(where, "/".join(map(str, path)) + "/samples_per_s", rate,
                                     "a measured rate without its interval and no note saying why"))
            elif isinstance(ci, list) and not ci[0] <= rate <= ci[1]:
                out.append(Violation(where, "/".join(map(str, path)) + "/ci95", ci, "the rate outside its interval"))
        for k, v in obj.items():
            out += _check_intervals(v, where, (*path, str(k)), [*parents, obj])
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _check_intervals(v, where, (*path, i), parents)
    return out


# -- text ------------------------------------------------------------------------------------------------
_NAN = re.compile(r"(?<![\w.])[-+]?(nan|inf|infinity)(?![\w])", re.IGNORECASE)
# a number as lotus prints it: sign, thousands separators, decimals, exponent, percent; not inside a word
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?%?(?![\w])")


_WORKERS = re.compile(r"num_workers=(\d+)")
MAX_WORKERS = 256  # a worker count lotus may suggest (lotus.analysis.diagnosis.MAX_WORKERS_NEEDED)


def check_text(text: str, where: str) -> list[Violation]:
    """No NaN/infinity tokens where a number is expected; no worker count a machine could not run."""
    out = [Violation(where, m.group(0), text[max(0, m.start() - 40): m.end() + 20], "NaN/infinity in text")
           for m in _NAN.finditer(text)]
    out += [Violation(where, m.group(0), text[max(0, m.start() - 60): m.end()], f"num_workers above {MAX_WORKERS}")
            for m in _WORKERS.finditer(text) if int(m.group(1)) > MAX_WORKERS]
    return out


_RANGE = re.compile(r"(?<=[\d%])-(?=\d)")  # 1.8%-40.9%, 160.8-184.9: a range, not a minus sign


def _plain(text: str) -> str:
    """``text`` with ``+-`` (a half-width: ``+-3%`` reads as ``3%``) and range dashes as spaces."""
    return _RANGE.sub(" ", text.replace("+-", "  "))


def numbers_in(text: str) -> list[str]:
    """The numbers of ``text`` as written."""
    return [m.group(0).rstrip(",") for m in _NUMBER.finditer(_plain(text))]


def _formats(v: float) -> Iterable[str]:
    """Every way lotus's commands and pages write the number ``v`` (CLI ``ms``/``pct``/``rate_text``,
    the report's ``fmt``/``pct``, probe tables)."""
    if isinstance(v, float):  # a share printed as a percentage (never a count: 1 CPU is no 100%)
        yield from (f"{v:.1%}", f"{v:.0%}", f"{v:.2%}")
    yield repr(v)
    for spec in (",.0f", ".3g", ".3f", ",.1f", ".1f", ".2f", ".4f", ".0f", "g", ".2g", "+.1f", "+.3g", ".1e",
                 ",.2f"):
        yield f"{v:{spec}}"
    for spec in (".0f", ".1f", ".2f", "+.1f"):  # a percentage printed with a % sign
        yield f"{v:{spec}}%"
    if float(v).is_integer():
        yield str(int(v))
        yield f"{int(v):,}"


def backed_tokens(doc) -> set[str]:
    """The numbers a text rendering of ``doc`` may show: its numbers in every format, the numbers inside its
    strings and keys (notes, suggestions, names, paths)."""
    out: set[str] = set()

    def add(obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                out.update(numbers_in(str(k)))
                add(v)
        elif isinstance(obj, list):
            out.add(str(len(obj)))  # "3 probes": the length of a list of them
            for v in obj:
                add(v)
        elif isinstance(obj, str):
            out.update(numbers_in(obj))
        elif _is_num(obj) and math.isfinite(obj):
            for s in _formats(obj):
                out.add(s)
                out.add(s.lstrip("+"))
    add(doc)
    return out


def check_backed(text: str, doc, where: str, template: Iterable[str] = ()) -> list[Violation]:
    """Every number of ``text`` is a figure of ``doc`` (as lotus formats it) or part of the command's fixed
    wording (``template``: e.g. ``1 ms`` of "> 1 ms")."""
    for phrase in template:
        text = text.replace(phrase, " ")
    ok = backed_tokens(doc)
    out = []
    text = _plain(text)
    for m in _NUMBER.finditer(text):
        tok = m.group(0).rstrip(",")
        if tok not in ok and tok.lstrip("+") not in ok:
            context = text[max(0, m.start() - 60): m.end() + 20].replace("\n", " | ")
            out.append(Violation(where, tok, context, "a printed figure that is not the JSON's"))
    return out


def html_text(page: str) -> str:
    """The visible text of an HTML page (no style, no embedded images, entities decoded)."""
    page = re.sub(r"<style>.*?</style>", " ", page, flags=re.S)
    page = re.sub(r"<img[^>]*>", " ", page)
    page = re.sub(r"<[^>]+>", " ", page)
    return html_mod.unescape(page)
