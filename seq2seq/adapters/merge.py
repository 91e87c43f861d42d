"""An adapter merged into its base: in a loaded model (`Translator.load(BASE, adapter=DIR)`), or as a
new full model directory (`seq2seq merge-adapter BASE ADAPTER OUT`).

Merging adds scale * B A to each adapted weight (`seq2seq.adapters.lora.merge_lora`): the merged model
computes what the base with its adapter computes, to float rounding (~1e-6), and decodes as fast as
the base.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from seq2seq.adapters.files import Adapter, AdapterError, read_adapter
from seq2seq.adapters.lora import merge_lora
from seq2seq.storage.atomic import shared_mode
from seq2seq.storage.model_dir import LoadedModel, ModelDir

log = logging.getLogger(__name__)


def merge_into(loaded: LoadedModel, adapter_dir: str | Path, weights: str | Path | None = None) -> Adapter:
    """Merge the adapter in `adapter_dir` into `loaded`'s model in place, after checking it was trained on
    these weights (`loaded.path`'s model.safetensors, or `weights`): AdapterError in one line if not."""
    adapter = read_adapter(adapter_dir)
    adapter.check_base(loaded.path, weights)
    adapter.check_layers(loaded.model)
    merge_lora(loaded.model, adapter.tensors, adapter.config.scale)
    log.info("adapter %s merged into %s (%d layers, rank %d)", adapter.path, loaded.path, len(adapter.modules),
             adapter.config.rank)
    return adapter


def write_merged(base_dir: str | Path, adapter_dir: str | Path, out_dir: str | Path) -> Path:
    """A full model directory in `out_dir`: `base_dir`'s files (config, tokenizer, metadata) with its weights
    merged with the adapter's. Written as a temporary directory beside `out_dir` and renamed into place:
    nothing is left on failure; an `out_dir` that exists is refused."""
    base, out = ModelDir(base_dir), Path(out_dir)
    if out.exists():
        raise AdapterError(f"{out} exists; merge-adapter writes a new model directory")
    loaded = base.load("cpu")
    adapter = merge_into(loaded, adapter_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        own = {base.weights_path, base.best_weights_path}
        for path in base.path.iterdir():  # the static files; checkpoints and train state do not belong to it
            if path.is_file() and path not in own and path.name != ModelDir.LOG and path.name != ModelDir.CURVES:
                shutil.copy2(path, tmp / path.name)
        merged = ModelDir(tmp)
        merged.save_weights(loaded.model.state_dict())
        merged.update_metadata({"merged_adapter": {"adapter": str(adapter.path.resolve()),
                                                   "base": str(base.path.resolve()),
                                                   "fingerprint": adapter.fingerprint}})
        os.chmod(tmp, shared_mode(directory=True))
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


__all__ = ["merge_into", "write_merged"]
