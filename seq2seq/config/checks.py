"""`check_ranges`: a section's numeric keys inside their bounds, or a ConfigError naming the key."""

from __future__ import annotations

from seq2seq.config.schema import ConfigError


def check_ranges(section: object, name: str, ranges: dict[str, tuple[float | None, float | None]]) -> None:
    """ConfigError naming the key ("model.layers must be >= 1, got -3") for a value outside its
    [low, high] range; None values (unset options) and None bounds are not checked."""
    for key, (low, high) in ranges.items():
        value = getattr(section, key)
        if value is None:
            continue
        if low is not None and value < low:
            raise ConfigError(f"{name}.{key} must be >= {low}, got {value}")
        if high is not None and value > high:
            raise ConfigError(f"{name}.{key} must be <= {high}, got {value}")
