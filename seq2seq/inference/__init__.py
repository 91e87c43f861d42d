"""Decoding with a trained model.

    search      greedy, beam and sampling search over `Seq2SeqTransformer.decode_step`
    options     the per-call search options and `resolve_search` (defaults + options -> SearchConfig)
    results     `Translation`: one hypothesis for one source
    sources     reading a call's sources: texts tokenized, files loaded by their modality's processor
    translator  `Translator`: the generation loop (sources in, n-best `Translation`s out)
    generator   `Generator`, `Captioner`, `Transcriber`: the same for image or audio files
    protocol    `TranslationEngine`: what the CLI and the server need of an engine
    formats     results as output lines; translating a stream of lines
"""
