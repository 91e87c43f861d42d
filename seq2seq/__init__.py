"""seq2seq: an encoder-decoder Transformer toolkit for translation, captioning and speech-to-text."""

__version__ = "0.1.0"
