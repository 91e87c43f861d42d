"""Decoding with a trained model.

    search      greedy, beam and sampling search over `Seq2SeqTransformer.decode_step`
    translator  `Translator`: text in, translations out
    generator   `Generator`, `Captioner`, `Transcriber`: image or audio files in, text out
"""
