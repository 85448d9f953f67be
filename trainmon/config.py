"""The config file: ``~/.config/trainmon/config.toml`` (or ``--config FILE``).

    interval = 1.0                # refresh, seconds
    address = "/run/user/1000/trainmon/monitor.sock"   # default listen / agent address
    theme = "dark"                # dark | light | mono
    prometheus = "127.0.0.1:9464" # serve /metrics by default

    [thresholds]                  # any field of trainmon.diagnose.Thresholds
    wait_warning = 0.05
    cpu_saturated_pct = 90

Every key is checked: an unknown key or a wrong type is a one-line error, never a silent default.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from trainmon.diagnose.rules import Thresholds

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

THEMES = ("dark", "light", "mono")


class ConfigError(Exception):
    pass


@dataclass
class Config:
    interval: float = 1.0
    address: str | None = None
    theme: str = "dark"
    prometheus: str | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    path: str | None = None  # where it was read from


def default_path() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "trainmon", "config.toml")


def _number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where} must be a number, got {value!r}")
    return float(value)


def parse(data: dict[str, Any], path: str = "<config>") -> Config:
    cfg = Config(path=path)
    for key, value in data.items():
        where = f"{path}: {key}"
        if key == "interval":
            cfg.interval = _number(where, value)
            if cfg.interval <= 0:
                raise ConfigError(f"{where} must be greater than 0")
        elif key in ("address", "prometheus"):
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{where} must be a non-empty string")
            setattr(cfg, key, value)
        elif key == "theme":
            if value not in THEMES:
                raise ConfigError(f"{where} must be one of {', '.join(THEMES)}, got {value!r}")
            cfg.theme = value
        elif key == "thresholds":
            cfg.thresholds = _thresholds(value, where)
        else:
            raise ConfigError(f"{where}: unknown setting (known: interval, address, theme, prometheus, thresholds)")
    return cfg


def _thresholds(table: Any, where: str) -> Thresholds:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    fields = {f.name: f for f in dataclasses.fields(Thresholds)}
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in fields:
            raise ConfigError(f"{where}.{key}: unknown threshold")
        number = _number(f"{where}.{key}", value)
        values[key] = int(number) if isinstance(getattr(Thresholds(), key), int) else number
    return Thresholds(**values)


def load(path: str | None = None) -> Config:
    """``path`` must exist when given; the default path is optional."""
    explicit = path is not None
    path = path or os.environ.get("TRAINMON_CONFIG") or default_path()
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"no such config file: {path}") from None
        return Config()
    except IsADirectoryError:
        raise ConfigError(f"{path} is a directory, not a config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse(data, path)
