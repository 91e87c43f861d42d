"""Synthetic parallel corpora: a text file translated by a trained model (back-translation, sequence-level
distillation; docs/back-translation.md).

    translation         a text file translated into a parallel corpus, chunk by chunk, resumable (`CorpusJob`,
                        `translate_corpus`)
    noise               word noise for noised back-translation (`WordNoise`, `noise_line`)
    fingerprint         `model_fingerprint`: sha256 of the files that decide a model's translations
"""
