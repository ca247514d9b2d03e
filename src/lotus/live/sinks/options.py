"""Which sinks to publish to, and how the choice travels (keywords, environment, the sidecar's arguments).

No imports beyond the standard library: the DataLoader reads :func:`from_env` on its way to tracing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from lotus import _env

DEFAULT_PERIOD_S = 10.0
DEFAULT_WINDOW_S = 10.0
_TRUE = {"1", "true", "yes", "on"}


def parse_address(text: str | int) -> tuple[str, int]:
    """``"9100"`` -> ("0.0.0.0", 9100); ``"127.0.0.1:9100"`` -> ("127.0.0.1", 9100). ValueError otherwise."""
    host, sep, port = str(text).strip().rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{text!r}: expected PORT or HOST:PORT") from None
    if not 0 < number < 65536:
        raise ValueError(f"{text!r}: a port is 1..65535")
    return (host.strip("[]") if sep and host else "0.0.0.0"), number


@dataclass(frozen=True)
class SinkOptions:
    """Where the live metrics go. ``tensorboard``: a directory (scalars under ``DIR/lotus/``); ``prometheus``:
    ``PORT`` or ``HOST:PORT`` of an HTTP endpoint; ``wandb``: log to Weights & Biases. ``period_s``: seconds
    between publishes; ``window_s``: seconds over which rates and shares are computed."""

    tensorboard: str | None = None
    prometheus: str | None = None
    wandb: bool = False
    period_s: float = DEFAULT_PERIOD_S
    window_s: float = DEFAULT_WINDOW_S

    def __post_init__(self) -> None:
        if self.tensorboard is not None:
            object.__setattr__(self, "tensorboard", os.fspath(self.tensorboard))
        if self.prometheus is not None:
            object.__setattr__(self, "prometheus", str(self.prometheus))
            parse_address(self.prometheus)
        if not (self.period_s > 0 and self.window_s > 0):
            raise ValueError("the sinks' period and window must be positive")

    @property
    def any(self) -> bool:
        return bool(self.tensorboard or self.prometheus or self.wandb)

    def argv(self) -> list[str]:
        """The sidecar's arguments (``python -m lotus.live.sinks``)."""
        out = ["--period", repr(self.period_s), "--window", repr(self.window_s)]
        if self.tensorboard:
            out += ["--tensorboard", os.path.abspath(self.tensorboard)]
        if self.prometheus:
            out += ["--prometheus", self.prometheus]
        if self.wandb:
            out.append("--wandb")
        return out

    @classmethod
    def coerce(cls, value) -> SinkOptions | None:
        """A ``live_sinks=`` keyword: SinkOptions, a mapping of its fields, or None."""
        if value is None or isinstance(value, SinkOptions):
            return value
        if isinstance(value, Mapping):
            known = {f.name for f in fields(cls)}
            bad = sorted(set(value) - known)
            if bad:
                raise ValueError(f"live_sinks: unknown keys {bad} (known: {sorted(known)})")
            return cls(**value)
        raise TypeError(f"live_sinks: expected a dict or lotus.live.sinks.SinkOptions, not {type(value).__name__}")


def from_env(environ: Mapping[str, str] | None = None) -> SinkOptions | None:
    """Sinks asked for through ``LOTUS_TENSORBOARD``, ``LOTUS_PROMETHEUS``, ``LOTUS_WANDB`` (None: none).
    ValueError on a bad value."""
    env = os.environ if environ is None else environ
    tb = env.get(_env.TENSORBOARD, "").strip() or None
    prom = env.get(_env.PROMETHEUS, "").strip() or None
    wb = env.get(_env.WANDB, "").strip().lower() in _TRUE
    if not (tb or prom or wb):
        return None
    period = env.get(_env.SINK_PERIOD, "").strip()
    try:
        period_s = float(period) if period else DEFAULT_PERIOD_S
    except ValueError:
        raise ValueError(f"{_env.SINK_PERIOD}={period!r}: expected seconds") from None
    return SinkOptions(tensorboard=tb, prometheus=prom, wandb=wb, period_s=period_s)

