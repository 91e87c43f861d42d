"""Decoding with a trained model.

    search              the search loop over `Seq2SeqTransformer.decode` (stepping, finishing, scores) and its
                        state and result: `Units`, `Rows`, `EndedHypotheses`, `Hypothesis`; `stop_when`: a
                        search stopped between two steps for a caller that no longer wants it
    strategies          greedy, beam and sampling: which tokens continue
    ctc                 rescoring finished hypotheses with a CTC head
    ensemble            `EnsembleModel`: several models sharing a target vocabulary, searched as one
    memory              a search's memory estimated before it starts, and the memory it may take
    results             `Translation`: one hypothesis for one source; its JSON object and its output lines
    engine              `Engine`: the one prepare -> search -> finish loop every engine runs (`run`), steering
                        checked and encoded once; what an engine's search cannot do (`Capabilities`); an
                        engine over a stream of lines, chunk by chunk (`translate_stream`)
    translator          `Translator`: the torch engine (sources prepared by the model's `SourceProcessor`,
                        searched in token-bounded batches; n-best `Translation`s out)
    generator           `Generator`, `Captioner`, `Transcriber`: the same for image or audio files;
                        `load_engine`: the engine class of a model directory, chosen from what it reads
    protocol            `SearchableModel`: what the search needs of a model
    inputs              the typed request: `SourceInput` (one input and its own steering, its JSON form read
                        by one parser, its steering fields too) and `Call` (what a call's inputs share);
                        `translate_inputs` (any engine)
    steering            an input's steering (its `SourceInput` and glossary terms) checked against the
                        search and encoded to token ids (`encode_steering` -> `SourceControls`)
    controls            `SourceControls`: one source's controls as token ids; the search's `Control`; each
                        control (`TargetPrefix`: the output starts with given tokens; `BannedPhrases`: phrases
                        that never appear; `TermBias`: a bonus on each annotated term's next piece; the
                        constraints: lexically constrained beam search, dynamic beam allocation) and a
                        batch's controls (`build_controls`)
    glossary            `Glossary`: a termbase's target terms as constraints where its source terms occur
    scoring             forced decoding: the log-probability of given targets (`score_pairs` -> `PairScore`)
"""
