"""The network: attention, layers, the encoder-decoder Transformer and the encoders.

    attention    scaled dot-product and multi-head attention, the per-layer key/value cache
    layers       embeddings and positions, feed-forward, encoder and decoder layers
    transformer  `Seq2SeqTransformer`: encode, one decoding step with a cache, cache reorder
    sync         `host_reads_are_free`: where reading a device value on the host costs nothing
    encoders/    the encoder interface and one module per modality (text, image, audio)

Plain torch only: the CPU kernel variants that training and decoding swap in live in `seq2seq.accel`.
"""
