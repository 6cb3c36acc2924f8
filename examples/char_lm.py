"""A small character-level Transformer language model, trained on text that ships with Python.

``configs/char_lm.yaml`` trains it with ``train --config``; this file holds the data loader and
the model the config names by import path, and a ``generate`` command::

    train --config configs/char_lm.yaml
    python -m examples.char_lm generate --weights runs/char-lm/model.safetensors --prompt "def "

``python -m examples.char_lm`` with no command trains a smaller model with ``compile`` and
``fit`` in under a minute (``--tiny``: seconds) and prints a sample of its text.

The text is the source of Python's own ``difflib`` module (no download); each sample is a
window of ``context`` characters, and the target is the same window shifted by one.
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path

import numpy as np

import tapefit as tp


def corpus() -> str:
    """The training text: the source of the standard library's ``difflib``."""
    return Path(difflib.__file__).read_text(encoding="utf-8")


def vocabulary() -> list[str]:
    """Every character of the corpus, sorted: index ``i`` of the model is ``vocabulary()[i]``."""
    return sorted(set(corpus()))


@tp.configurable
def load_text(context: int = 64, stride: int = 16, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: windows of ``context`` character ids and the windows one character later.

    Args:
        context: characters per window.
        stride: characters between the starts of consecutive windows.
        limit: use only the first ``limit`` characters of the text (quick runs and tests).
    """
    text = corpus()[:limit]
    index = {c: i for i, c in enumerate(vocabulary())}
    ids = np.array([index[c] for c in text], dtype=np.int64)
    starts = np.arange(0, len(ids) - context - 1, stride)
    rows = starts[:, None] + np.arange(context)
    return ids[rows], ids[rows + 1]


class Block(tp.Module):
    """Pre-norm Transformer block: causal self-attention and a GELU MLP, each with a residual."""

    def __init__(self, width: int, heads: int, name: str | None = None) -> None:
        super().__init__(name=name)
        self.norm1 = tp.layers.LayerNormalization()
        self.attention = tp.layers.MultiHeadAttention(heads, width // heads)
        self.norm2 = tp.layers.LayerNormalization()
        self.up = tp.layers.Dense(4 * width, activation="gelu")
        self.down = tp.layers.Dense(width)

    def call(self, x: tp.Tensor) -> tp.Tensor:
        h = self.norm1(x)
        x = x + self.attention(h, h, use_causal_mask=True)
        return x + self.down(self.up(self.norm2(x)))


@tp.register_serializable  # so that tp.models.load_model can rebuild a saved .tapefit file
class CharTransformer(tp.Module):
    """Character embeddings plus learned position embeddings, ``blocks`` Transformer blocks,
    a final LayerNormalization and the logits over the vocabulary at every position."""

    def __init__(
        self, context: int = 64, width: int = 64, heads: int = 4, blocks: int = 2, name: str | None = None
    ) -> None:
        super().__init__(name=name)
        self.context = context
        vocab = len(vocabulary())
        self.embed = tp.layers.Embedding(vocab, width)
        self.positions = tp.Variable(
            np.random.default_rng(0).normal(0.0, 0.02, (context, width)).astype(np.float32), name="positions"
        )
        self.blocks = [Block(width, heads) for _ in range(blocks)]
        self.norm = tp.layers.LayerNormalization()
        self.head = tp.layers.Dense(vocab)

    def call(self, ids: tp.Tensor) -> tp.Tensor:
        # train --config hands features over as float32; a cast op (not Embedding's check of
        # the values) keeps the step traceable by tp.function.
        ids = tp.cast(ids, tp.int32)
        steps = ids.shape[1]
        x = self.embed(ids) + self.positions[:steps]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def generate(
    model: CharTransformer, prompt: str, length: int = 200, temperature: float = 0.8, seed: int = 0
) -> str:
    """``prompt`` continued by ``length`` characters sampled from the model."""
    chars = vocabulary()
    index = {c: i for i, c in enumerate(chars)}
    unknown = sorted({c for c in prompt if c not in index})
    if unknown:
        raise ValueError(f"the prompt has characters the model never saw: {unknown}")
    ids = [index[c] for c in prompt] or [index["\n"]]
    rng = np.random.default_rng(seed)
    for _ in range(length):
        window = np.array([ids[-model.context :]])
        logits = model(tp.constant(window)).numpy()[0, -1].astype(np.float64) / temperature
        probs = np.exp(logits - logits.max())
        ids.append(int(rng.choice(len(chars), p=probs / probs.sum())))
    return "".join(chars[i] for i in ids)


def train(tiny: bool = False) -> dict[str, list[float]]:
    """Trains a small model on the start of the text with ``compile`` and ``fit``, prints a
    sample, and returns the history: loss and val_loss per epoch (nats per character)."""
    tp.random.set_seed(0)
    # --8<-- [start:train]
    x, y = load_text(context=32, stride=8 if tiny else 16, limit=2400 if tiny else 12000)
    model = CharTransformer(context=32, width=16 if tiny else 32, heads=2, blocks=2)
    model.compile(
        optimizer=tp.optimizers.Adam(learning_rate=3e-3),
        loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),  # at every position
    )
    history = model.fit(x, y, epochs=3 if tiny else 6, batch_size=32, validation_split=0.1, verbose=0)
    # --8<-- [end:train]
    logs = history.history
    print(
        f"validation loss {logs['val_loss'][-1]:.2f} nats per character (uniform: {np.log(len(vocabulary())):.2f})"
    )
    print(generate(model, "def ", length=60))
    return logs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m examples.char_lm", description="Train a small model, or generate text."
    )
    parser.add_argument("--tiny", action="store_true", help="train for seconds, not a minute")
    sub = parser.add_subparsers(dest="command")
    gen = sub.add_parser("generate", help="continue a prompt with a trained model")
    gen.add_argument("--weights", required=True, help="the run's model.safetensors")
    gen.add_argument("--prompt", default="def ")
    gen.add_argument("--length", type=int, default=200)
    gen.add_argument("--temperature", type=float, default=0.8)
    gen.add_argument("--context", type=int, default=64)
    gen.add_argument("--width", type=int, default=64)
    gen.add_argument("--heads", type=int, default=4)
    gen.add_argument("--blocks", type=int, default=2)
    args = parser.parse_args(argv)
    if args.command is None:
        train(tiny=args.tiny)
        return
    model = CharTransformer(args.context, args.width, args.heads, args.blocks)
    model(tp.constant(np.zeros((1, args.context), np.int64)))
    model.load_weights(args.weights)
    print(generate(model, args.prompt, args.length, args.temperature))


if __name__ == "__main__":
    main()
