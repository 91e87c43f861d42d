"""The `data.terminology` section: training sources annotated with target terms (docs/terminology.md)."""

from __future__ import annotations

from dataclasses import dataclass

from seq2seq.config.checks import require

PICKS = ("random", "rare")  # how a pair's terms are chosen among its candidate words
SUBSTITUTES = ("words", "compounds")  # what a substituted term is replaced by


@dataclass(frozen=True)
class TerminologyConfig:
    """Which training pairs carry target terms on their source, and which terms.

    share: the fraction of training pairs whose source is annotated (0: none, the model takes no
        annotations); each annotated pair gets 1 to `max_terms` words of its own target, drawn at random
        among those that are not one of the `skip_frequent` most frequent target words, appended to the
        source after the reserved piece <term> (`seq2seq.text.terminology.annotate`). A model so trained
        takes a translation's terms the same way (`seq2seq translate --terms`), and learns where they go.
    pick: which of the candidate words become the pair's terms: "random" (any of them alike) or "rare"
        (the rarest in the training targets first: the words a termbase holds and a model gets wrong,
        so that the annotation tells the model what it could not guess).
    base_forms: annotate with a word's base form (its corpus's shortest form without an inflection
        ending, `seq2seq.text.terminology.base_forms`) instead of the word as the target has it: the model
        learns to inflect a term given as a lemma ("schlank" -> "schlanker").
    substitute: the fraction of the terms that, in the annotation and in the target alike, are replaced by
        another candidate word of the training targets (drawn at random, capitalised as the word it
        replaces): the source then cannot predict the term, so the model learns to take it from the
        annotation rather than ignore it (a term the pair's own translation holds anyway teaches little).
    substitute_with: "words" (another word of the corpus) or "compounds" (two of them joined, the second
        lowercased, "Baum" + "Hütte" -> "Baumhütte": a word no training target holds, as a fifth of a
        termbase's terms are, which the model can only copy piece for piece).
    resample: draw the annotated pairs, their terms and substitutes anew in every epoch (seeded by the
        run's seed and the epoch, as subword regularization samples segmentations) instead of once when
        the data is prepared: over a training the model copies many more (pair, term) combinations, and a
        substituted word can never be learnt from its pair, only read from the annotation.
    loss_weight: the weight, in the training loss, of the target pieces of a pair's terms (where the target
        holds a term's pieces as the annotation has them; 1: none weighs more; Ailem et al. 2021 weight a
        term's tokens alike): the few pieces a model must copy weigh more against the many it translates,
        so that it learns to use the terms it is given (docs/terminology.md measures it).
    """

    share: float = 0.0
    max_terms: int = 2
    skip_frequent: int = 100
    base_forms: bool = False
    pick: str = "random"
    substitute: float = 0.0
    substitute_with: str = "words"
    resample: bool = False
    loss_weight: float = 1.0

    def __post_init__(self) -> None:
        require(self.pick in PICKS, f"data.terminology.pick must be one of {', '.join(PICKS)}, got {self.pick!r}")
        require(self.substitute_with in SUBSTITUTES, f"data.terminology.substitute_with must be one of "
                                                     f"{', '.join(SUBSTITUTES)}, got {self.substitute_with!r}")
        require(0.0 <= self.share <= 1.0, f"data.terminology.share must be a fraction in [0, 1], got {self.share}")
        require(0.0 <= self.substitute <= 1.0,
                f"data.terminology.substitute must be a fraction in [0, 1], got {self.substitute}")
        require(not self.loss_weight < 1.0, f"data.terminology.loss_weight must be >= 1, got {self.loss_weight}")
        require(self.max_terms >= 1, f"data.terminology.max_terms must be >= 1, got {self.max_terms}")
        require(self.skip_frequent >= 0, f"data.terminology.skip_frequent must be >= 0, got {self.skip_frequent}")

    @property
    def on(self) -> bool:
        """Does the model take terms on its sources?"""
        return self.share > 0
