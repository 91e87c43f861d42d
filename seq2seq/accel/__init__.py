"""Making the model fast where it runs: devices and precisions, CPU module variants for training,
oneDNN shape bucketing, pre-packed decoder weights and bf16/int8 inference variants.

Every variant here is a transform applied to a plain `seq2seq.model` module; none changes what the
model computes beyond floating-point rounding.
"""
