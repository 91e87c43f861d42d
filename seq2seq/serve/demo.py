"""The demo page of `seq2seq serve` (`GET /`) and what it reads: `GET /info` and `POST /attention`.

The page (`demo.html`, one self-contained file: no CDN, no build step, no framework) asks the server
what it holds (`model_info`: the model's name, kind, languages, size, the search options with their
types and defaults, the limits) and then uses the JSON API as any client would: `/translate`,
`/generate`, and `/attention`, which draws the cross-attention of one source as the command line's
`--show-attention` does, as a PNG. Nothing the page can do is beyond the API; with `--api-key` the page
asks for the key and keeps it in the tab's sessionStorage only.
"""

from __future__ import annotations

import tempfile
from importlib import resources
from pathlib import Path

from seq2seq.inference.generator import Generator
from seq2seq.config.search import SEARCH_OPTIONS
from seq2seq.inference.engine import Engine
from seq2seq.inference.results import Translation
from seq2seq.model.encoders.sources import AttentionView
from seq2seq.serve.requests import Limits
from seq2seq.text.languages import file_languages



def demo_page() -> str:
    """The page, read from the package."""
    return resources.files("seq2seq.serve").joinpath("demo.html").read_text(encoding="utf-8")


def languages(model: Engine) -> list[str] | None:
    """[source, target] language codes read from the training files' names (train.en.gz,
    train.de.gz), or None where they do not say."""
    return file_languages(model.config)


def model_info(model: Engine, limits: Limits) -> dict[str, object]:
    """What the page shows and builds its form from: the model, its kind, the search options
    (`SEARCH_OPTIONS`, the same definitions requests are checked with) with the model's defaults, and
    whether it takes terms on its sources (the page then offers how they reach it: `terms`)."""
    defaults = model.defaults
    kind = model.processor.kind
    options = []
    for name, option in SEARCH_OPTIONS.items():
        default = getattr(defaults, name, None)
        if option.type is bool and name in ("greedy", "sample"):
            default = defaults.strategy == name
        options.append({"name": name, "type": option.type.__name__, "help": option.help, "default": default})
    return {
        "model": Path(model.path).name,
        "kind": kind.name,
        "noun": kind.noun,
        "endpoint": "/generate" if kind.reads_files else "/translate",
        "languages": languages(model),
        "parameters": model.parameters,
        "device": str(model.device),
        "precision": model.precision,
        "strategy": defaults.strategy,
        "annotates_terms": model.annotates_terms,  # takes terms on its sources
        "options": options,
        "limits": {"max_texts": limits.max_texts, "max_chars": limits.max_chars, "max_beam": limits.max_beam,
                   "max_upload_bytes": limits.max_upload_bytes, "max_pixels": limits.max_pixels,
                   "max_audio_seconds": limits.max_audio_seconds},
    }


def attention_png(model: Engine, hypothesis: Translation, view: AttentionView | None = None) -> bytes:
    """The PNG `--show-attention` draws for one result (`hypothesis`, generated with attention_layer
    set): a text's heatmap over its source pieces, or a file's attention over its `view`
    (`Generator.attention_view`)."""
    from seq2seq.report.plots import plot_attention

    with tempfile.TemporaryDirectory(prefix="seq2seq-attention-") as tmp:
        png = Path(tmp) / "attention.png"
        if view is None:
            assert hypothesis.attention is not None  # generated with attention_layer set
            plot_attention(hypothesis.attention, hypothesis.src_pieces, hypothesis.pieces + ["</s>"], png)
        else:
            assert isinstance(model, Generator)  # a view is of a file
            model.plot_attention(hypothesis, str(png), view)
        return png.read_bytes()
