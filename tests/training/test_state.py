import numpy as np

import tapefit as tp
from tapefit.training.state import TrainState


def test_a_complete_epoch_moves_the_position_to_the_next_and_joins_the_history():
    state = TrainState()
    state.start_fit(first_epoch=0, continued=False)
    state.start_epoch(0)
    for loss in (2.0, 4.0):
        state.end_step(loss, samples=3)
    assert state.position() == (0, 2, 2) and state.running_loss == 3.0
    state.end_epoch({"loss": 3.0}, complete=True)
    assert state.position() == (1, 0, 2)
    assert state.history == [(0, {"loss": 3.0})]


def test_an_epoch_cut_short_stays_in_progress_and_out_of_the_history():
    state = TrainState()
    state.start_epoch(4)
    state.end_step(1.0, samples=2)
    state.end_epoch({"loss": 1.0}, complete=False)
    assert state.in_epoch and state.position() == (4, 1, 1)
    assert state.history == []


def test_to_dict_and_from_dict_round_trip_in_an_epoch():
    state = TrainState(
        epoch=2,
        next_epoch=2,
        step=11,
        batch_in_epoch=3,
        in_epoch=True,
        loss_sum=4.5,
        loss_count=9,
        history=[(0, {"loss": 1.0}), (1, {"loss": 0.5})],
        stopped={"by": "early_stopping", "reason": "no improvement"},
        data={"rng": {"x": 1}, "order": np.arange(5), "position": 3},
        random={"global": {"y": 2}},
        metrics=[{"state": {"total": 1.0, "count": 2.0}}],
        fit={"epochs": 5, "batch_size": 4, "num_samples": 20, "shuffle": True, "drop_last": False},
    )
    back = TrainState.from_dict(state.to_dict())
    np.testing.assert_array_equal(back.data.pop("order"), state.data["order"])
    assert back.data == {"rng": {"x": 1}, "position": 3}
    for field in (
        "epoch",
        "step",
        "batch_in_epoch",
        "in_epoch",
        "loss_sum",
        "loss_count",
        "history",
        "stopped",
    ):
        assert getattr(back, field) == getattr(state, field), field
    assert back.metrics == state.metrics and back.random == state.random and back.fit == state.fit


def test_between_epochs_the_dict_holds_no_order_metrics_or_running_loss():
    state = TrainState(epoch=1, next_epoch=2, step=8, batch_in_epoch=4, loss_sum=3.0, loss_count=6)
    state.data = {"rng": {}, "order": np.arange(3), "position": 4}
    state.metrics = [{"state": None}]
    contents = state.to_dict()
    assert contents["trainer"]["epoch"] == 2 and contents["trainer"]["batch_in_epoch"] == 0
    assert contents["loader"]["order"] is None and contents["metrics"] == []
    assert contents["trainer"]["loss_sum"] == 0.0


def test_the_trainer_state_is_what_its_checkpoints_hold(tmp_path):
    x = np.random.default_rng(0).normal(size=(10, 3)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)
    trainer = tp.Trainer(tp.layers.Dense(1), "sgd", "mse")
    trainer.fit(x, y, epochs=2, batch_size=4, verbose=0)
    assert trainer.state.position() == (2, 0, 6) and [e for e, _ in trainer.state.history] == [0, 1]
    assert (trainer.epoch, trainer.step, trainer.batch_in_epoch) == (1, 6, 3)
