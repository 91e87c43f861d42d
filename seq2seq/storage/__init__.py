"""Files on disk: atomic writes, pickle-free weights, and the model directory."""
