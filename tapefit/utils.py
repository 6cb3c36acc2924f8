"""``tp.utils``: the helpers of ``keras.utils`` that a training step uses."""

from tapefit.training.step import pack_x_y_sample_weight, unpack_x_y_sample_weight

__all__ = ["pack_x_y_sample_weight", "unpack_x_y_sample_weight"]
