"""Text as the toolkit reads and scores it.

    tokenizer    SentencePiece with fixed special ids, one joint or two separate models
    lines        reading lines exactly (one per '\\n', bad UTF-8 replaced with a warning), '-' and .gz
    metrics      sacreBLEU BLEU, chrF, TER (with signatures); WER and CER
    languages    language and corpus tags: the reserved source pieces of multilingual models
    terminology  target terms appended to a source after the reserved piece <term> (`annotate`)
    lexicon      the Dice score of each (source word, target word) of the training pairs: what places tags
"""
