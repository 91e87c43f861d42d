"""`python -m seq2seq ...` (also what torchrun runs: `torchrun --nproc_per_node=2 -m seq2seq train CONFIG`)."""

from seq2seq.cli import main

if __name__ == "__main__":
    main()
