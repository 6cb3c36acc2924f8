"""Text classification: an LSTM reads padded token sequences, with masking, and tells their mood.

The "sentences" are made here: sequences of 4 to 20 word ids from a vocabulary of 50, padded
with 0 at the end to one length. Ids 1-5 are happy words and 6-10 sad ones; a sequence is
positive (label 1) when it holds more happy words than sad ones. ``Embedding(mask_zero=True)``
marks the padding, so the LSTM stops at each sequence's last word instead of reading zeros.
Run: ``python -m examples.text_lstm`` (``--tiny`` for a run of a few seconds).
"""

from __future__ import annotations

import sys

import numpy as np

import tapefit as tp

VOCABULARY = 50  # id 0 is the padding
LENGTH = 20


def make_sentences(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` padded sequences of word ids, shape ``(n, LENGTH)``, and their labels (0 or 1)."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, LENGTH), np.int32)
    y = np.zeros(n, np.int32)
    for i in range(n):
        length = int(rng.integers(4, LENGTH + 1))
        words = rng.integers(11, VOCABULARY, size=length)  # neutral words
        mood = rng.choice([1, 6], size=int(rng.integers(1, 4)))  # 1 to 3 moody words ...
        words[rng.choice(length, size=len(mood), replace=False)] = mood + rng.integers(0, 5, len(mood))
        happy, sad = np.sum(words <= 5), np.sum((words >= 6) & (words <= 10))
        if happy == sad:  # no ties: one more happy word makes it positive
            words[rng.integers(length)] = 1
            happy, sad = np.sum(words <= 5), np.sum((words >= 6) & (words <= 10))
        x[i, :length] = words
        y[i] = happy > sad
    return x, y


# --8<-- [start:model]
def build_model() -> tp.layers.Sequential:
    """Word vectors, an LSTM over the unpadded words, and the probability of a positive label."""
    return tp.layers.Sequential(
        [
            tp.layers.Embedding(VOCABULARY, 16, mask_zero=True),  # id 0 is padding: masked
            tp.layers.LSTM(24),  # the mask reaches it: the last state is at the last word
            tp.layers.Dense(1, activation="sigmoid"),
        ],
        name="text_lstm",
    )


# --8<-- [end:model]


def main(tiny: bool = False) -> dict[str, list[float]]:
    """Trains the LSTM and returns its history (loss and accuracy, and their val_ twins)."""
    tp.random.set_seed(0)
    x, y = make_sentences(600 if tiny else 3000)
    # --8<-- [start:fit]
    model = build_model()
    model.compile(
        optimizer=tp.optimizers.Adam(learning_rate=0.01), loss="binary_crossentropy", metrics=["accuracy"]
    )
    history = model.fit(x, y, epochs=4 if tiny else 10, batch_size=32, validation_split=0.2, verbose=0)
    # --8<-- [end:fit]
    logs = history.history
    print(f"validation accuracy {logs['val_accuracy'][-1]:.3f} (chance 0.5)")
    return logs


if __name__ == "__main__":
    main(tiny="--tiny" in sys.argv)
