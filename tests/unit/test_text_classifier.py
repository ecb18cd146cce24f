"""The classifier-training job's maths, with no database: labels, the held-out split, the vocabulary,
gradient descent, accuracy, and the stored model."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.jobs.text_classifier import (
    Classifier,
    Example,
    LabelledRow,
    TooFewClasses,
    TooManyClasses,
    TrainingSet,
    accuracy,
    encode,
    epoch_order,
    held_out,
    label_of,
    learning_rate,
    majority_share,
    softmax,
    tokens,
    training_set,
    vocabulary,
)

# fmt: off
TOPICS = {
    "network": ["latency", "packet", "dns", "router", "firewall", "timeout", "vpn", "switch"],
    "database": ["postgres", "query", "index", "replica", "deadlock", "vacuum", "migration", "table"],
    "auth": ["login", "password", "token", "sso", "mfa", "session", "expired", "permission"],
}
NOISE = ["customer", "reported", "issue", "since", "morning", "please", "check", "urgent", "service", "users",
         "affected", "team"]
# fmt: on


def tickets(count: int, seed: int = 7) -> list[LabelledRow]:
    """Tickets whose words say their topic (three topic words among eight of noise)."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        topic = rng.choice(sorted(TOPICS))
        words = rng.sample(TOPICS[topic], 3) + rng.sample(NOISE, 8)
        rng.shuffle(words)
        rows.append(LabelledRow(f"jira:OPS-{i}", " ".join(words), (topic, "triaged")))
    return rows


def train(rows: list[LabelledRow], epochs: int = 5) -> tuple[Classifier, TrainingSet]:
    data = training_set(rows, wanted=None, holdout=0.25, max_features=100, max_classes=10)
    model = Classifier(data.classes, data.features)
    for epoch in range(epochs):
        model.train_pass(data.train, epoch_order(len(data.train), epoch), learning_rate(epoch))
    return model, data


def test_tokens_are_lowercased_distinct_words_without_stopwords() -> None:
    assert tokens("The VPN is down; the vpn TIMEOUT (again) a") == {"vpn", "down", "timeout", "again"}
    assert tokens("") == frozenset()


def test_a_row_is_learnt_as_its_first_label_or_its_first_wanted_one() -> None:
    assert label_of(["bug", "db"], None) == "bug"
    assert label_of(["bug", "db"], ["db", "network"]) == "db"
    assert label_of(["bug"], ["db"]) is None
    assert label_of([], None) is None
    assert label_of(None, None) is None


@given(st.text(min_size=1, max_size=30), st.floats(min_value=0.0, max_value=0.5))
def test_the_split_is_a_function_of_the_key_alone(key: str, fraction: float) -> None:
    assert held_out(key, fraction) == held_out(key, fraction)
    assert not held_out(key, 0.0)  # nothing is held out at 0
    assert held_out(key, fraction) <= held_out(key, 0.5)  # a larger share only adds rows


def test_the_split_holds_out_about_the_share_asked() -> None:
    keys = [f"jira:OPS-{i}" for i in range(10_000)]
    share = sum(held_out(k, 0.2) for k in keys) / len(keys)
    assert 0.18 < share < 0.22


def test_the_vocabulary_keeps_the_commonest_words_seen_twice_ties_by_word() -> None:
    docs = [frozenset({"a1", "b1", "c1"}), frozenset({"a1", "b1"}), frozenset({"a1", "z9"}), frozenset({"c1"})]
    assert vocabulary(docs, size=10) == ["a1", "b1", "c1"]  # z9 is in one document only
    assert vocabulary(docs, size=1) == ["a1"]
    assert vocabulary(docs, size=2) == ["a1", "b1"]  # b1 and c1 are in two each: b1 comes first


def test_an_example_weighs_its_words_so_long_and_short_rows_count_alike() -> None:
    example = encode(frozenset({"dns", "vpn", "unknown"}), {"dns": 0, "vpn": 1}, label=1)
    assert example == Example((0, 1), 1)
    assert example.value == pytest.approx(1 / math.sqrt(2))
    assert Example((), 0).value == 0.0


@given(st.lists(st.floats(min_value=-50, max_value=50), min_size=1, max_size=8))
def test_softmax_is_a_distribution_that_keeps_the_order(scores: list[float]) -> None:
    probabilities = softmax(scores)
    assert sum(probabilities) == pytest.approx(1.0)
    assert all(0.0 <= p <= 1.0 for p in probabilities)
    top = max(range(len(scores)), key=lambda i: scores[i])
    assert probabilities[top] == max(probabilities)


def test_an_epoch_visits_every_example_once_in_an_order_seeded_by_the_epoch() -> None:
    assert sorted(epoch_order(50, 3)) == list(range(50))
    assert epoch_order(50, 3) == epoch_order(50, 3)
    assert epoch_order(50, 3) != epoch_order(50, 4)
    assert learning_rate(0) > learning_rate(10) > 0


def test_one_gradient_step_moves_the_right_class_up_and_the_others_down() -> None:
    model = Classifier(["a", "b"], ["w0", "w1"])
    example = Example((1,), label=0)
    before = softmax(model.scores(example))
    loss = model.train_pass([example], [0], rate=1.0)
    assert loss == pytest.approx(math.log(2))  # the untrained model gives each class one half
    assert model.weights[0][1] > 0 > model.weights[1][1]
    assert model.weights[0][0] == model.weights[1][0] == 0.0  # a word the row lacks is not touched
    assert softmax(model.scores(example))[0] > before[0]


def test_training_learns_topics_well_above_the_majority_baseline() -> None:
    model, data = train(tickets(1200))
    assert data.classes == ["auth", "database", "network"]
    held = data.held
    assert 200 < len(held) < 400
    score = accuracy(model, held)
    baseline = majority_share(data.train, held)
    assert score is not None and baseline is not None
    assert score > 0.95 > 0.5 > baseline


def test_the_loss_falls_epoch_by_epoch() -> None:
    data = training_set(tickets(600), wanted=None, holdout=0.2, max_features=100, max_classes=10)
    model = Classifier(data.classes, data.features)
    losses = [model.train_pass(data.train, epoch_order(len(data.train), e), learning_rate(e)) for e in range(4)]
    assert losses == sorted(losses, reverse=True)


def test_an_epoch_in_slices_trains_the_same_model_as_in_one_pass() -> None:
    data = training_set(tickets(300), wanted=None, holdout=0.2, max_features=100, max_classes=10)
    whole, sliced = Classifier(data.classes, data.features), Classifier(data.classes, data.features)
    order = epoch_order(len(data.train), 0)
    whole.train_pass(data.train, order, 0.5)
    for start in range(0, len(order), 64):
        sliced.train_pass(data.train, order[start : start + 64], 0.5)
    assert sliced.to_json() == whole.to_json()


def test_the_same_rows_train_the_same_model() -> None:
    first, _ = train(tickets(300), epochs=3)
    second, _ = train(tickets(300), epochs=3)
    assert first.to_json() == second.to_json()


def test_the_stored_model_classifies_as_the_trained_one() -> None:
    model, _ = train(tickets(600))
    stored = model.to_json()
    assert stored["classes"] == model.classes and len(stored["weights"]) == len(model.classes)
    back = Classifier.from_json(stored)
    for row in tickets(100, seed=99):
        assert back.classify(row.text) == model.classify(row.text) == row.labels[0]


def test_wanted_labels_choose_the_classes_and_skip_rows_without_one() -> None:
    rows = [*tickets(200), LabelledRow("jira:X-1", "no label here", ())]
    data = training_set(rows, wanted=["network", "auth"], holdout=0.0, max_features=50, max_classes=10)
    assert data.classes == ["auth", "network"]
    assert data.held == []
    assert data.unlabelled == 1 + sum(1 for r in rows[:200] if r.labels[0] == "database")


def test_no_held_out_rows_means_no_accuracy_is_claimed() -> None:
    model = Classifier(["a", "b"], [])
    assert accuracy(model, []) is None
    assert majority_share([Example((), 0)], []) is None


def test_rows_of_one_class_cannot_train_a_classifier() -> None:
    rows = [LabelledRow(f"k{i}", "vpn down", ("network",)) for i in range(20)]
    with pytest.raises(TooFewClasses, match="1 class "):
        training_set(rows, wanted=None, holdout=0.0, max_features=10, max_classes=10)
    with pytest.raises(TooFewClasses, match="0 classes"):
        training_set([], wanted=None, holdout=0.0, max_features=10, max_classes=10)


def test_too_many_labels_ask_for_the_ones_to_learn() -> None:
    rows = [LabelledRow(f"k{i}", f"word{i} common", (f"label{i}",)) for i in range(30)]
    with pytest.raises(TooManyClasses, match=r"params\.labels"):
        training_set(rows, wanted=None, holdout=0.0, max_features=10, max_classes=20)


def test_a_held_out_row_of_a_class_never_trained_counts_against_the_model() -> None:
    model = Classifier(["a", "b"], ["w"])
    assert accuracy(model, [Example((0,), -1), Example((0,), 0)]) == 0.5
