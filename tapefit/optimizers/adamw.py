"""AdamW: Adam with decoupled weight decay."""

from __future__ import annotations

from tapefit.optimizers.adam import Adam
from tapefit.optimizers.optimizer import LearningRate

__all__ = ["AdamW"]


class AdamW(Adam):
    """Adam with decoupled weight decay, as ``keras.optimizers.AdamW``.

    Each step first shrinks the weights, ``w -= lr * weight_decay * w``, then takes the
    Adam step (see ``Adam``). ``exclude_from_weight_decay`` exempts variables (biases, norms).

    Args:
        learning_rate: a float or a schedule (see ``Optimizer``).
        weight_decay: the decay coefficient (required, a float).
        beta_1: decay of the first moment, in ``[0, 1)``.
        beta_2: decay of the second moment, in ``[0, 1)``.
        epsilon: added to the denominator for stability.
        amsgrad: use the AMSGrad variant.
        clipnorm: clip each gradient to this L2 norm.
        clipvalue: clip each gradient's elements to ``[-clipvalue, clipvalue]``.
        global_clipnorm: clip all gradients together to this global L2 norm.
        name: the optimizer's name.
    """

    def __init__(
        self,
        learning_rate: LearningRate = 0.001,
        weight_decay: float = 0.004,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: bool = False,
        clipnorm: float | None = None,
        clipvalue: float | None = None,
        global_clipnorm: float | None = None,
        name: str = "adamw",
    ) -> None:
        if weight_decay is None:
            raise ValueError("AdamW needs a float `weight_decay`, got None (use Adam for no weight decay)")
        super().__init__(
            learning_rate,
            beta_1,
            beta_2,
            epsilon,
            amsgrad,
            weight_decay=weight_decay,
            clipnorm=clipnorm,
            clipvalue=clipvalue,
            global_clipnorm=global_clipnorm,
            name=name,
        )
