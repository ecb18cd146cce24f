"""A text classifier in plain Python: multinomial logistic regression over bags of words.

The maths of the classifier-training job (`jobs/classifier.py`), with no I/O: which label a knowledge
row is learnt as, which rows are held out, the vocabulary, one epoch of stochastic gradient descent,
and how well the model does on rows it never saw. Every choice is a function of the data alone (the
held-out split hashes the row's key, the order of an epoch is seeded by its number), so one job trained
twice on the same rows gives the same model.
"""

from __future__ import annotations

import math
import random
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_WORD = re.compile(r"[a-z0-9]+")
# Words every ticket has: they tell the classes apart by chance only.
# fmt: off
_STOPWORDS = frozenset({
    "an", "and", "are", "as", "at", "be", "but", "by", "can", "for", "from", "has", "have", "in", "is", "it",
    "its", "no", "not", "of", "on", "or", "our", "so", "that", "the", "this", "to", "was", "we", "were", "will",
    "with", "you", "your",
})
# fmt: on
# The split's resolution: a held-out fraction is honoured to 1/10,000.
_SPLIT_BUCKETS = 10_000
# Learning rate of epoch e: BASE / (1 + DECAY * e), so late epochs settle rather than jump.
BASE_RATE = 0.5
RATE_DECAY = 0.1
# Weights are kept to this many decimals: enough to predict the same classes, small as JSON.
_DECIMALS = 5


def tokens(text: str) -> frozenset[str]:
    """The distinct words of a text, lowercased, without one-letter words and stopwords."""
    return frozenset(w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in _STOPWORDS)


def label_of(labels: Sequence[str] | None, wanted: Sequence[str] | None) -> str | None:
    """The class a row is learnt as: its first label, or with `wanted` the first of its labels that is
    wanted; None (the row is not learnt from) when it has none."""
    for label in labels or ():
        if wanted is None or label in wanted:
            return label
    return None


def held_out(key: str, fraction: float) -> bool:
    """Whether the row with this key is kept out of training to measure the model. A function of the
    key alone: adding rows never moves an old one between the two sets."""
    return zlib.crc32(key.encode()) % _SPLIT_BUCKETS < round(fraction * _SPLIT_BUCKETS)


def vocabulary(documents: Iterable[frozenset[str]], size: int, min_documents: int = 2) -> list[str]:
    """The `size` words found in the most documents (at least `min_documents`), ties by the word."""
    counts: Counter[str] = Counter()
    for words in documents:
        counts.update(words)
    ranked = sorted((w for w, n in counts.items() if n >= min_documents), key=lambda w: (-counts[w], w))
    return sorted(ranked[:size])


@dataclass(frozen=True)
class Example:
    """A row as the model sees it: the vocabulary's words it holds (their positions) and its class.
    Each word present weighs 1/sqrt(words present), so long and short tickets count alike."""

    features: tuple[int, ...]
    label: int

    @property
    def value(self) -> float:
        return 1.0 / math.sqrt(len(self.features)) if self.features else 0.0


def encode(words: frozenset[str], index: Mapping[str, int], label: int) -> Example:
    return Example(tuple(sorted(index[w] for w in words if w in index)), label)


@dataclass(frozen=True)
class LabelledRow:
    key: str  # what identifies the row (source:key): it decides the held-out split
    text: str
    labels: tuple[str, ...]


@dataclass(frozen=True)
class TrainingSet:
    classes: list[str]
    features: list[str]
    train: list[Example]
    held: list[Example]
    unlabelled: int  # rows with no label to learn (none, or none of the wanted ones)


class TooFewClasses(ValueError):
    """The rows name fewer than two classes: there is nothing to tell apart."""


class TooManyClasses(ValueError):
    """More distinct labels than a job learns at once."""


def training_set(
    rows: Iterable[LabelledRow], *, wanted: Sequence[str] | None, holdout: float, max_features: int, max_classes: int
) -> TrainingSet:
    """The rows as examples: each row's class (`label_of`), the split (`held_out`), the vocabulary of
    the training rows only (a held-out row's words must not shape the model that is judged on it)."""
    learnt: list[tuple[frozenset[str], str, bool]] = []
    unlabelled = 0
    for row in rows:
        label = label_of(row.labels, wanted)
        if label is None:
            unlabelled += 1
            continue
        learnt.append((tokens(row.text), label, held_out(row.key, holdout)))
    classes = sorted({label for _, label, held in learnt if not held})
    if len(classes) < 2:
        raise TooFewClasses(
            f"the training rows name {len(classes)} class{'' if len(classes) == 1 else 'es'} "
            f"({', '.join(classes) or 'none'}); a classifier needs at least two"
        )
    if len(classes) > max_classes:
        raise TooManyClasses(
            f"the rows name {len(classes)} labels, more than {max_classes}; name the ones to learn in params.labels"
        )
    features = vocabulary((words for words, _, held in learnt if not held), max_features)
    index = {word: i for i, word in enumerate(features)}
    class_index = {label: i for i, label in enumerate(classes)}
    train = [encode(words, index, class_index[label]) for words, label, held in learnt if not held]
    # A held-out row of a class no training row has cannot be predicted right: it counts against the model.
    held = [encode(words, index, class_index.get(label, -1)) for words, label, held in learnt if held]
    return TrainingSet(classes, features, train, held, unlabelled)


def epoch_order(count: int, epoch: int) -> list[int]:
    """The order epoch number `epoch` visits the training examples in: shuffled, seeded by the epoch."""
    order = list(range(count))
    random.Random(epoch).shuffle(order)
    return order


def learning_rate(epoch: int) -> float:
    return BASE_RATE / (1.0 + RATE_DECAY * epoch)


def softmax(scores: Sequence[float]) -> list[float]:
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


class Classifier:
    """Weights (class x feature) and a bias per class; a row's class is the one scoring highest."""

    def __init__(self, classes: Sequence[str], features: Sequence[str]) -> None:
        self.classes = list(classes)
        self.features = list(features)
        self.weights = [[0.0] * len(self.features) for _ in self.classes]
        self.bias = [0.0] * len(self.classes)

    def scores(self, example: Example) -> list[float]:
        value = example.value
        return [
            b + value * sum(row[f] for f in example.features) for row, b in zip(self.weights, self.bias, strict=True)
        ]

    def predict(self, example: Example) -> int:
        scores = self.scores(example)
        return max(range(len(scores)), key=lambda c: (scores[c], -c))  # ties: the first class

    def train_pass(self, examples: Sequence[Example], order: Sequence[int], rate: float) -> float:
        """Stochastic gradient descent on the cross-entropy loss over the examples at the positions in
        `order`, in that order (an epoch, or a slice of one); returns the mean loss seen before each
        update."""
        loss = 0.0
        weights, bias = self.weights, self.bias
        for i in order:
            example = examples[i]
            probabilities = softmax(self.scores(example))
            loss -= math.log(max(probabilities[example.label], 1e-12))
            value = example.value
            for c, p in enumerate(probabilities):
                gradient = p - (1.0 if c == example.label else 0.0)
                if gradient == 0.0:
                    continue
                step = rate * gradient
                bias[c] -= step
                row = weights[c]
                for f in example.features:
                    row[f] -= step * value
        return loss / len(order) if order else 0.0

    def to_json(self) -> dict[str, Any]:
        """The model as stored: each class's non-zero weights by word, and its bias."""
        return {
            "kind": "multinomial_logistic_regression",
            "classes": self.classes,
            "bias": [round(b, _DECIMALS) for b in self.bias],
            "weights": [
                {w: round(x, _DECIMALS) for w, x in zip(self.features, row, strict=True) if round(x, _DECIMALS)}
                for row in self.weights
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Classifier:
        """A stored model back, to predict with (the features are the words any class weighs)."""
        features = sorted({w for row in data["weights"] for w in row})
        model = cls(data["classes"], features)
        model.bias = [float(b) for b in data["bias"]]
        model.weights = [[float(row.get(w, 0.0)) for w in features] for row in data["weights"]]
        return model

    def classify(self, text: str) -> str:
        index = {word: i for i, word in enumerate(self.features)}
        return self.classes[self.predict(encode(tokens(text), index, -1))]


def accuracy(model: Classifier, examples: Sequence[Example]) -> float | None:
    """The share of `examples` the model classes right; None when there are none to judge by."""
    if not examples:
        return None
    return sum(1 for e in examples if model.predict(e) == e.label) / len(examples)


def majority_share(train: Sequence[Example], held: Sequence[Example]) -> float | None:
    """What always answering the training rows' commonest class scores on `held`: the bar a model
    must clear to have learnt anything."""
    if not held or not train:
        return None
    commonest = Counter(e.label for e in train).most_common(1)[0][0]
    return sum(1 for e in held if e.label == commonest) / len(held)
