"""Run a Python script with Intel VTune collection resumed at its first DataLoader iteration.

LotusTrace_imagenet_vtune.sh starts VTune paused (``-start-paused``, as the Lotus study did, so that
interpreter start-up, imports, dataset scanning and model building are not collected) and runs the
training script through this launcher:

    vtune -collect uarch-exploration -start-paused -result-dir R -- python itt_resume.py train.py ARGS...
    vtune ... -- python -m torch.distributed.run --nproc-per-node 4 itt_resume.py train.py ARGS...

The first time a torch DataLoader (lotus's included) is iterated in this process, ``ittapi.resume()``
is called; collection then goes on until the end. Without VTune attached, ITT calls do nothing.
``LOTUS_ITT_RESUME=start`` resumes at once instead (everything after this launcher's imports).
"""

from __future__ import annotations

import os
import runpy
import sys


def _say(message: str) -> None:
    sys.stderr.write(f"itt_resume: {message} (pid {os.getpid()})\n")
    sys.stderr.flush()


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        sys.stderr.write("usage: python itt_resume.py SCRIPT.py [ARGS...]\n" + (__doc__ or ""))
        raise SystemExit(0 if len(sys.argv) >= 2 else 2)
    import ittapi

    if os.environ.get("LOTUS_ITT_RESUME", "first-batch") == "start":
        ittapi.resume()
        _say("collection resumed at start")
    else:
        from torch.utils.data import DataLoader

        original = DataLoader.__iter__
        resumed = []

        def __iter__(self):
            if not resumed:
                resumed.append(True)
                ittapi.resume()
                _say("collection resumed at the first DataLoader iteration")
            return original(self)

        DataLoader.__iter__ = __iter__
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT.py` would have it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
