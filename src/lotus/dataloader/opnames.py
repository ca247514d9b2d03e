"""Op names of transforms, shared by the traced transforms (:mod:`lotus.dataloader.transforms`) and the
Compose timing window (:mod:`lotus.dataloader.compose`). Standard library only.
"""

from __future__ import annotations

import functools
import types


def op_name(fn) -> str:
    """A readable op name: the class of a transform object, the name of a function."""
    if isinstance(fn, functools.partial):
        return op_name(fn.func)
    if isinstance(fn, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        return fn.__name__
    return type(fn).__name__
