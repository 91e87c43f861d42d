"""Several training corpora in one run: temperature sampling over corpora of unequal size.

Corpus i (n_i pairs after cleaning, weight w_i) is sampled with probability

    p_i = (n_i * w_i)^(1/T) / sum_j (n_j * w_j)^(1/T)            T = data.sampling_temperature

(Arivazhagan et al. 2019, "Massively Multilingual NMT in the Wild"; fairseq's multilingual
`--sampling-temperature`, which has no weights: w_i = 1). T = 1 samples in proportion to size
(the corpora concatenated, a weight acting as a repetition count); T -> infinity samples the corpora
uniformly; T = 5 is the usual choice for many languages of very different sizes.

An epoch is N = sum_i n_i draws (the size of the concatenation). Rather than drawing each row's
corpus at random, the counts are exact: corpus i is read as an endless sequence of passes, each pass
a seeded permutation of its rows, and epoch e takes from it the rows at positions
[round(e N p_i), round((e + 1) N p_i)). So over any number of epochs each corpus has its share up to
rounding (a smaller corpus is repeated, a larger one subsampled), every row of a corpus is read once
before any is read twice, and an epoch's rows are a function of (seed, epoch) alone: a resumed run
(`TokenBatchSampler.state_dict`: epoch and position) rebuilds the same epoch exactly.

    mix = CorpusMix(sizes=[20_000, 500], weights=[1, 1], temperature=5, seed=1)
    mix.probabilities               # array([0.677, 0.323]): 13,868 and 6,632 rows an epoch
    mix.epoch_rows(3)               # global row indices (corpus i's rows start at mix.starts[i])
    sampler = MixedBatches(mix, src_lengths, tgt_lengths, max_tokens=4096, seed=1)   # a TokenBatchSampler
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seq2seq.data.batching import Lengths, PackedBatches, TokenBatchSampler
from seq2seq.data.sampling import SubwordSampler


def corpus_probabilities(sizes: Sequence[int], weights: Sequence[float], temperature: float) -> np.ndarray:
    """p_i = (n_i * w_i)^(1/T) / sum_j (n_j * w_j)^(1/T) (see the module docstring), in float64."""
    mass = np.asarray(sizes, dtype=np.float64) * np.asarray(weights, dtype=np.float64)
    if len(mass) == 0 or not (mass > 0).all() or not temperature > 0:
        raise ValueError(f"corpus sizes and weights must be positive and the temperature too, got sizes {list(sizes)}, "
                         f"weights {list(weights)}, temperature {temperature}")
    # In logs, so that (n w)^(1/T) cannot overflow for a small T: p = softmax(log(n w) / T).
    logits = np.log(mass) / temperature
    scaled = np.exp(logits - logits.max())
    return scaled / scaled.sum()


class CorpusMix:
    """Which rows of several concatenated corpora each epoch reads (see the module docstring).

    sizes: rows of each corpus, in the order they are concatenated (corpus i's rows are
    starts[i] .. starts[i] + sizes[i] - 1). epoch_size: draws per epoch (default: sum of sizes).
    """

    def __init__(self, sizes: Sequence[int], weights: Sequence[float], temperature: float, seed: int = 0,
                 epoch_size: int | None = None) -> None:
        if len(sizes) != len(weights):
            raise ValueError(f"{len(sizes)} corpus sizes but {len(weights)} weights")
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self.probabilities = corpus_probabilities(sizes, weights, temperature)
        self.temperature = temperature
        self.seed = seed
        self.epoch_size = int(self.sizes.sum()) if epoch_size is None else int(epoch_size)
        self._cache: tuple[int, np.ndarray] | None = None
        self._passes: dict[int, tuple[int, np.ndarray]] = {}

    def position(self, corpus: int, epoch: int) -> int:
        """How many rows of `corpus` the epochs before `epoch` read: round(epoch * N * p_i)."""
        return int(np.floor(epoch * self.epoch_size * self.probabilities[corpus] + 0.5))

    def counts(self, epoch: int) -> np.ndarray:
        """Rows of each corpus in `epoch` (they sum to about epoch_size, up to rounding)."""
        return np.array([self.position(i, epoch + 1) - self.position(i, epoch) for i in range(len(self.sizes))])

    def _pass(self, corpus: int, cycle: int) -> np.ndarray:
        """The order of corpus `corpus`'s rows in its pass number `cycle` (the last one kept: consecutive
        epochs mostly read the same pass)."""
        kept = self._passes.get(corpus)
        if kept is None or kept[0] != cycle:
            rng = np.random.default_rng(np.random.SeedSequence([self.seed % 2**63, corpus, cycle]))
            kept = self._passes[corpus] = (cycle, rng.permutation(int(self.sizes[corpus])))
        return kept[1]

    def corpus_rows(self, corpus: int, epoch: int) -> np.ndarray:
        """The rows (0 .. n_i - 1, within the corpus) that `epoch` reads from `corpus`."""
        n = int(self.sizes[corpus])
        start, end = self.position(corpus, epoch), self.position(corpus, epoch + 1)
        chunks = []
        for cycle in range(start // n, (end - 1) // n + 1) if end > start else ():
            lo, hi = max(start - cycle * n, 0), min(end - cycle * n, n)
            chunks.append(self._pass(corpus, cycle)[lo:hi])
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)

    def epoch_rows(self, epoch: int) -> np.ndarray:
        """The global row indices `epoch` reads, corpus by corpus (the batcher shuffles them)."""
        if self._cache is None or self._cache[0] != epoch:
            rows = [self.starts[i] + self.corpus_rows(i, epoch) for i in range(len(self.sizes))]
            self._cache = (epoch, np.concatenate(rows).astype(np.int64))
        return self._cache[1]


class MixedBatches(TokenBatchSampler):
    """A `TokenBatchSampler` over the rows a `CorpusMix` draws each epoch: batches (of global row
    indices, a row possibly more than once) are bucketed by length and shuffled as usual, and its
    state (epoch, position) resumes exactly.

    src_lengths / tgt_lengths: of every row of the concatenated corpora. segmenter: with subword
    regularization (`seq2seq.data.sampling`), each epoch's sampled segmentation gives the lengths,
    and `rows` the ids.
    """

    def __init__(self, mix: CorpusMix, src_lengths: Lengths, tgt_lengths: Lengths, max_tokens: int,
                 seed: int = 0, segmenter: SubwordSampler | None = None, multiple: int = 1) -> None:
        super().__init__(src_lengths, tgt_lengths, max_tokens=max_tokens, shuffle=True, seed=seed, multiple=multiple)
        if int(mix.sizes.sum()) != len(self.src_lengths):
            raise ValueError(f"the corpora have {int(mix.sizes.sum())} rows but {len(self.src_lengths)} lengths "
                             f"were given")
        self.mix, self.segmenter = mix, segmenter

    def row_lengths(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, target) lengths of every row of the corpora in `epoch`."""
        if self.segmenter is None:
            return self.src_lengths, self.tgt_lengths
        src_ids, tgt_ids = self.segmenter.epoch(epoch)
        return np.array([len(s) for s in src_ids]), np.array([len(t) + 1 for t in tgt_ids])

    def lengths(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Lengths of the epoch's draws (in `mix.epoch_rows` order), which the batcher packs."""
        rows = self.mix.epoch_rows(epoch)
        src, tgt = self.row_lengths(epoch)
        return src[rows], tgt[rows]

    def _make_batches(self, epoch: int) -> PackedBatches:
        packed = super()._make_batches(epoch)  # of positions in the epoch's draws
        rows = self.mix.epoch_rows(epoch)[packed.rows]
        return PackedBatches(rows.astype(np.int32) if len(self.src_lengths) < 2**31 else rows, packed.starts, packed.ends)

    def rows(self, indices: Sequence[int]) -> tuple[list[list[int]], list[list[int]]]:
        """(src_ids, tgt_ids) of rows `indices` in the current epoch's segmentation (needs a segmenter)."""
        if self.segmenter is None:
            raise RuntimeError("MixedBatches.rows needs a segmenter; read the ids from the dataset")
        src_ids, tgt_ids = self.segmenter.epoch(self.epoch)
        return [src_ids[i] for i in indices], [tgt_ids[i] for i in indices]
