"""How a config section checks its values, in one style: each rule is one `require(ok, message)`, and a
section's numeric bounds are a table (`check_ranges`) whose rows are checked the same way."""

from __future__ import annotations

from seq2seq.config.schema import ConfigError


def require(ok: bool, message: str, error: type[ValueError] = ConfigError) -> None:
    """`error(message)` (a `ConfigError` naming the key, unless another is given) unless `ok`."""
    if not ok:
        raise error(message)


def check_ranges(section: object, name: str, ranges: dict[str, tuple[float | None, float | None]]) -> None:
    """ConfigError naming the key ("model.layers must be >= 1, got -3") for a value outside its
    [low, high] range; None values (unset options) and None bounds are not checked."""
    for key, (low, high) in ranges.items():
        value = getattr(section, key)
        if value is None:
            continue
        require(low is None or not value < low, f"{name}.{key} must be >= {low}, got {value}")
        require(high is None or not value > high, f"{name}.{key} must be <= {high}, got {value}")
