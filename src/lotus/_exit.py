"""Leaving the ``lotus`` program once its command is done, without the interpreter's teardown.

A command that imported pandas (3.x loads pyarrow) spends 0.1-0.17 s after its last line of output in the
interpreter's finalisation (modules and their objects freed one by one; measured on the 2-vCPU VM:
``python -c "import pandas"`` 0.80 s, 0.67 s leaving with ``os._exit``; ``lotus analyze verdict`` of 100M events,
0.12-0.17 s from its last statement to the process's end, 0.013-0.018 s this way). :func:`leave` runs what a
normal exit runs that matters to anyone (the ``atexit`` handlers: log handlers flushed, temporary directories of
``weakref.finalize`` removed, multiprocessing's children joined, coverage's data saved), flushes the standard
streams and ends the process with the command's code. It falls back to the normal exit where that could lose
anything: a thread that is not a daemon still running (the interpreter would wait for it), a code that is not a
number (``sys.exit("message")`` prints it), a stream that cannot be flushed (a closed pipe: Python's own handling),
an interpreter without ``atexit._run_exitfuncs``, or ``$LOTUS_SLOW_EXIT`` set. Only the program does this
(:func:`lotus.cli.main` called without arguments); the library and ``main(argv)`` never end the process.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def _blocked(code: object) -> bool:
    if not isinstance(code, int) or os.environ.get("LOTUS_SLOW_EXIT"):
        return True
    if getattr(atexit, "_run_exitfuncs", None) is None:
        return True
    main = threading.main_thread()
    return any(t is not main and t.is_alive() and not t.daemon for t in threading.enumerate())


def leave(code: object = 0) -> NoReturn:
    """End the process with ``code`` (module doc); ``None`` is 0, as for ``sys.exit``."""
    code = 0 if code is None else code
    if _blocked(code):
        raise SystemExit(code)
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        raise SystemExit(code) from None
    os._exit(code)
