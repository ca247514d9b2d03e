"""Warn once per process and reason: the tracer's way of failing without hurting training."""

from __future__ import annotations

import logging
import threading
import warnings

_log = logging.getLogger("lotus")
_seen: set[str] = set()
_lock = threading.Lock()


class LotusTraceWarning(UserWarning):
    """Tracing was (partly) disabled; training goes on untraced."""


def warn_once(key: str, message: str, category: type[Warning] = LotusTraceWarning) -> bool:
    """Emit ``message`` as a warning the first time ``key`` is seen in this process.

    Returns True when the warning was emitted. Never raises.
    """
    try:
        with _lock:
            if key in _seen:
                return False
            _seen.add(key)
        warnings.warn(message, category, stacklevel=3)
        _log.debug("%s", message)
        return True
    except Exception:  # warnings turned into errors by the user: still never break training
        return False


def reset_for_tests() -> None:
    with _lock:
        _seen.clear()
