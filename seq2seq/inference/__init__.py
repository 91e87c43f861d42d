"""Decoding with a trained model.

    search      the search loop over `Seq2SeqTransformer.decode_step` (stepping, finishing, scores)
    strategies  greedy, beam and sampling: which tokens continue
    ctc         rescoring finished hypotheses with a CTC head
    options     the per-call search options and `resolve_search` (defaults + options -> SearchConfig)
    results     `Translation`: one hypothesis for one source
    translator  `Translator`: the generation loop (sources in, prepared by the model's `SourceProcessor`;
                n-best `Translation`s out)
    generator   `Generator`, `Captioner`, `Transcriber`: the same for image or audio files
    protocol    `TranslationEngine`: what the CLI and the server need of an engine; `SearchableModel`:
                what the search needs of a model
    formats     results as output lines; translating a stream of lines
"""
