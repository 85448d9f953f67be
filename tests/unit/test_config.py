from __future__ import annotations

import pytest

from trainmon.config import Config, ConfigError, load


def test_full_config_is_read(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(
        'interval = 2\naddress = "127.0.0.1:7077"\ntheme = "mono"\nprometheus = "127.0.0.1:9464"\n'
        "[thresholds]\nwait_warning = 0.1\nmin_steps = 25\n"
    )
    cfg = load(str(p))
    assert (cfg.interval, cfg.address, cfg.theme, cfg.prometheus) == (2.0, "127.0.0.1:7077", "mono", "127.0.0.1:9464")
    assert cfg.thresholds.wait_warning == 0.1 and cfg.thresholds.min_steps == 25
    assert isinstance(cfg.thresholds.min_steps, int)
    assert cfg.thresholds.cpu_saturated_pct == 90.0  # untouched defaults stay


def test_missing_default_file_gives_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("TRAINMON_CONFIG", raising=False)
    assert load() == Config()


@pytest.mark.parametrize(
    "text, message",
    [
        ("interval = -1", "greater than 0"),
        ('interval = "fast"', "must be a number"),
        ("colour = 1", "unknown setting"),
        ('theme = "neon"', "must be one of"),
        ("[thresholds]\nwait_warnin = 0.1", "unknown threshold"),
        ("[thresholds]\nwait_warning = true", "must be a number"),
        ("interval = ", "not valid TOML"),
    ],
)
def test_bad_config_is_one_clear_error(tmp_path, text, message):
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load(str(p))


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load(str(tmp_path / "nope.toml"))
