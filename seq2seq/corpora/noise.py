"""Word noise for noised back-translation (Edunov et al. 2018, after Lample et al. 2018).

A synthetic source (the reverse model's beam output) is noised word by word, in this order:

1. each word is deleted with probability `delete` (a line keeps at least one word);
2. each remaining word is replaced by the filler `filler` (default "<BLANK>") with probability `blank`;
3. the words are shuffled by a random permutation that moves no word more than `max_shift`
   positions: word i gets the key i + U(0, max_shift + 1) and the words are sorted by key. A word
   that ends at position p has before it every word j <= i - max_shift - 1 (their keys are all
   below i) and none j >= i + max_shift + 1 (their keys are all above i + max_shift + 1 > its key),
   so |p - i| <= max_shift.

Words are whitespace-separated tokens; the result is joined with single spaces. The filler is meant to
be a reserved piece of the forward model's tokenizer (`data.reserved: ["<BLANK>"]`, so that it stays
one piece the model can learn to read as "some word was here"). Everything is drawn from a
`numpy.random.Generator` the caller seeds: the same generator state gives the same noise.

    rng = np.random.default_rng([seed, chunk])
    noise_line("a man rides a red bike .", rng)   # e.g. "man a <BLANK> rides bike red ."
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FILLER = "<BLANK>"


@dataclass(frozen=True)
class WordNoise:
    """The rates of `noise_words` (Edunov et al. 2018: 0.1, 0.1, 3). Rates 0 and max_shift 0 leave a line as it is."""

    delete: float = 0.1
    blank: float = 0.1
    max_shift: int = 3
    filler: str = FILLER

    def __post_init__(self) -> None:
        for name in ("delete", "blank"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"word noise {name} must be in [0, 1), got {value}")
        if self.max_shift < 0:
            raise ValueError(f"word noise max_shift must be >= 0, got {self.max_shift}")
        if not self.filler or any(c.isspace() for c in self.filler):
            raise ValueError(f"the noise filler must be one word, got {self.filler!r}")

    @property
    def identity(self) -> bool:
        return self.delete == 0 and self.blank == 0 and self.max_shift == 0


def bounded_permutation(n: int, max_shift: int, rng: np.random.Generator) -> np.ndarray:
    """[n] int: a random order of range(n) in which no index moves more than max_shift positions
    (out[p] = the index placed at position p; |p - out[p]| <= max_shift)."""
    if n < 2 or max_shift == 0:
        return np.arange(n)
    keys = np.arange(n) + rng.uniform(0.0, max_shift + 1, size=n)
    return np.argsort(keys, kind="stable")


def noise_words(words: list[str], rng: np.random.Generator, noise: WordNoise = WordNoise()) -> list[str]:
    """`words` deleted, blanked and shuffled as the module docstring says, drawing from `rng`."""
    n = len(words)
    if n == 0:
        return []
    keep = rng.uniform(size=n) >= noise.delete
    if not keep.any():  # never delete a whole line: keep one word, at random
        keep[rng.integers(n)] = True
    blank = rng.uniform(size=n) < noise.blank
    kept = [noise.filler if b else w for w, k, b in zip(words, keep, blank) if k]
    return [kept[i] for i in bounded_permutation(len(kept), noise.max_shift, rng)]


def noise_line(text: str, rng: np.random.Generator, noise: WordNoise = WordNoise()) -> str:
    """One line noised (`noise_words` over its whitespace-separated words); a blank line stays blank,
    and with no noise (`WordNoise(0, 0, 0)`) the line is returned as it is."""
    if noise.identity:
        return text
    return " ".join(noise_words(text.split(), rng, noise))
