"""Text as the toolkit reads and scores it.

    tokenizer  SentencePiece with fixed special ids, one joint or two separate models
    lines      reading lines exactly (one per '\\n', bad UTF-8 replaced with a warning), '-' and .gz
    metrics    sacreBLEU BLEU, chrF, TER (with signatures); WER and CER
"""
