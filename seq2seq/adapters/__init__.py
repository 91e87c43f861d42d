"""Adapters: LoRA fine-tuning of a trained model, adapter directories, merging and serving several.

    lora      the LoRA layers: trainable (`LoRALinear`), merged (`merge_lora`), shared by several adapters
              over one base (`SharedLoRA`)
    files     an adapter directory (adapter.safetensors + adapter.json naming its base and the base's
              fingerprint), read and written; `resolve_base`
    merge     an adapter merged into a loaded model, or written as a full model directory (`merge-adapter`)
    serving   several adapters served over one copy of the base (`seq2seq serve BASE --adapter NAME=DIR`)

A LoRA training run (`training.adapter`, `seq2seq train --init-from BASE`) is `seq2seq.training.adapter`.
The package sits between data and inference (the Translator loads adapters; it imports no training code).
See docs/fine-tuning.md, "LoRA adapters".
"""
