"""lotus.commands.

Top layer: the ``lotus`` commands (click). May import every package, lazily inside each command so
that ``lotus --help`` stays fast (see docs/architecture.md).
"""
