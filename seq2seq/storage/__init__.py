"""Files on disk: atomic writes, pickle-free weights, and the model directory.

    atomic     atomic_path, write_text_atomic, write_json_atomic, read_json (no torch)
    outputs    a command's output: check_output_path(s) (never onto an input), open_output (no torch)
    weights    safetensors weights: save_weights, load_weights, load_into, load_torch, average_checkpoints
    model_dir  `ModelDir`, the one owner of a model directory's layout, read and written through it;
               `load_model_dir(path)` -> LoadedModel for inference

`CheckpointError` (defined here, so that the torch-free `atomic` can raise it) is a model
directory or file that cannot be used; its message names the file.
"""

from seq2seq.config.diagnostics import Seq2SeqError


class CheckpointError(Seq2SeqError, ValueError):
    """A model directory or checkpoint that cannot be used; the message names the file."""


__all__ = ["CheckpointError"]
