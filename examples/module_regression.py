"""A user model as a ``tp.Module`` subclass: layers in a list, extra variables in a dict.

Shows what Module tracks, the variable paths of ``state_dict``, and a tape + optimizer loop
fitting ``y = 3 sin(x) + 1`` with Adam. Run: ``python examples/module_regression.py``.
"""

from __future__ import annotations

import numpy as np

import tapefit as tp
from tapefit.layers import Dense


class Regressor(tp.Module):
    """Two Dense layers and a learned output scale and shift."""

    def __init__(self, hidden: int = 32, name: str | None = None) -> None:
        super().__init__(name=name)
        self.blocks = [Dense(hidden, activation="tanh"), Dense(1)]
        self.head = {"scale": tp.Variable(1.0, name="scale"), "shift": tp.Variable(0.0, name="shift")}

    def call(self, x: tp.Tensor) -> tp.Tensor:
        for block in self.blocks:
            x = block(x)
        return x * self.head["scale"] + self.head["shift"]


def main() -> None:
    tp.random.set_seed(0)
    x = np.linspace(-3, 3, 128, dtype=np.float32).reshape(-1, 1)
    y = 3 * np.sin(x) + 1

    model = Regressor(name="regressor")
    loss_fn = tp.losses.get("mse")
    optimizer = tp.optimizers.Adam(learning_rate=0.01)
    for step in range(500):
        with tp.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        if step % 100 == 0:
            print(f"step {step}: mse {float(loss):.4f}")
    print(f"final mse {float(loss):.4f}")
    print("variables:", list(model.state_dict()))
    model.summary()


if __name__ == "__main__":
    main()
