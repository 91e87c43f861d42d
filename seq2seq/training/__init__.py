"""Training: from a config to a model directory.

    experiment   the pipeline: data, tokenizer, model, `Trainer`, model directory (`run_training`)
    trainer      the training loop: steps, accumulation, validation cadence, stopping, resume
    log_window   the training loss and tokens since the last log line (`LogWindow`)
    placement    device, precision, processes and gradient scaler for a run (`place`)
    loss         the fused, label-smoothed cross-entropy over the output projection
    optim        optimizer and learning-rate schedule
    validation   validation loss and scores during training
    run_state    a run's checkpoints and resume state on disk
    throughput   how many steps a time budget buys: a short timed probe of the run
    distributed  torchrun process groups
    finetune     `train --init-from`: starting from another model directory
    adapter      a LoRA run: the base frozen, only the adapter trained and saved
    new_vocabulary  `seq2seq add-vocab`: new language codes and pieces for a model directory
    quickstart   the built-in corpus job behind `seq2seq quickstart`
"""
