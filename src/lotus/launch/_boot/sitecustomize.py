# lotus run's start-up hook (this directory is put first on PYTHONPATH by `lotus run`).
# It makes torch's DataLoader lotus's in this process, then runs the sitecustomize this one shadows.
def _lotus_boot():
    import os
    import sys

    if os.environ.get("LOTUS_LAUNCH") == "1":
        try:
            from lotus.launch.hook import install

            install()
        except Exception as exc:  # never break the user's program
            if os.environ.get("LOTUS_LAUNCH_WARNED") != str(os.getpid()):
                sys.stderr.write(f"lotus run: this Python ({sys.executable}) cannot load lotus ({exc!r}); "
                                 "the command runs untraced\n")
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import importlib.machinery
        import importlib.util

        path = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = module
            spec.loader.exec_module(module)
    except Exception as exc:
        sys.stderr.write(f"lotus run: the environment's own sitecustomize failed: {exc!r}\n")


_lotus_boot()
del _lotus_boot
