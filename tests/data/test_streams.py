"""fit, evaluate and predict on streams: generators, Grain, tp.data pipelines, memory-mapped .npy."""

import logging

import numpy as np
import pytest

import tapefit as tp
from tapefit.checkpointing import load_checkpoint
from tapefit.data.npy import NpyFile, ShardedArray, is_on_disk, load_npy, open_npy

grain = pytest.importorskip("grain")

X, Y = tp.data.make_spirals(n_samples=400, n_classes=2, seed=0)
X = X.astype(np.float32)
BATCH = 32
EPOCHS = 6


def build():
    tp.random.set_seed(0)
    model = tp.layers.Sequential([tp.layers.Dense(32, activation="relu"), tp.layers.Dense(2)])
    return tp.Trainer(
        model,
        tp.optimizers.Adam(learning_rate=0.02),
        tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )


def stopping_after(at, folder):
    """A trainer that stops after step ``at`` with a checkpoint there (and none at epoch ends)."""

    class StopAt:
        @tp.hookimpl
        def on_train_batch_end(self, trainer, step):
            if step == at:
                trainer.stop_training = True

    trainer = build()
    trainer.plugins.register_all([StopAt(), tp.plugins.Checkpoint(dirpath=str(folder), every_n_epochs=None)])
    return trainer


def in_order_batches(x=X, y=Y):
    for start in range(0, len(x), BATCH):
        yield x[start : start + BATCH], y[start : start + BATCH]


class InOrder:
    """A re-iterable: every epoch a fresh generator of the batches in data order."""

    def __iter__(self):
        return in_order_batches()


def weights(trainer):
    return [np.array(v.numpy()) for v in trainer.model.variables]


@pytest.fixture(scope="module")
def arrays_run():
    trainer = build()
    history = trainer.fit(X, Y, epochs=EPOCHS, batch_size=BATCH, shuffle=False, verbose=0)
    return trainer, history


def assert_same_weights(a, b):
    for left, right in zip(weights(a), weights(b), strict=True):
        np.testing.assert_array_equal(left, right)


def test_a_re_iterable_of_batches_trains_as_the_same_arrays(arrays_run):
    reference, history = arrays_run
    trainer = build()
    streamed = trainer.fit(InOrder(), epochs=EPOCHS, verbose=0)
    assert_same_weights(trainer, reference)  # the same batches in the same order
    assert streamed.history == history.history
    assert history.history["accuracy"][-1] > 0.8


def test_a_list_of_batches_trains_as_the_same_arrays(arrays_run):
    reference, history = arrays_run
    batches = list(in_order_batches())  # [(x0, y0), (x1, y1), ...] with y not given: a stream
    trainer = build()
    streamed = trainer.fit(batches, epochs=EPOCHS, verbose=0)
    assert_same_weights(trainer, reference)
    assert streamed.history == history.history
    assert trainer.evaluate(tuple(batches)) == pytest.approx(reference.evaluate(X, Y))
    np.testing.assert_allclose(trainer.predict(batches), reference.predict(X), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="fit: y is None"):  # a list of arrays stays arrays
        build().fit([X, X])


def test_an_endless_generator_with_steps_per_epoch():
    def endless():
        while True:
            yield from in_order_batches()

    trainer = build()
    history = trainer.fit(endless(), epochs=3, steps_per_epoch=5, verbose=0)
    assert trainer.step == 15 and len(history.epoch) == 3


def test_a_spent_generator_warns_and_stops(caplog):
    trainer = build()
    with caplog.at_level(logging.WARNING, logger="tapefit"):
        history = trainer.fit(in_order_batches(), epochs=3, verbose=0)
    assert history.epoch == [0] and trainer.step == 13
    assert "epoch 2 got no batch: the data ran out" in caplog.text


def grain_input(kind):
    """The batches of ``X, Y`` in data order as a Grain ``MapDataset``, ``IterDataset`` or ``DataLoader``."""
    rows = list(zip(X, Y))
    if kind == "map":
        return grain.MapDataset.source(rows).batch(BATCH)
    if kind == "iter":
        return grain.MapDataset.source(rows).to_iter_dataset().batch(BATCH)
    sampler = grain.samplers.IndexSampler(len(rows), shuffle=False, num_epochs=1)
    return grain.DataLoader(
        data_source=rows, sampler=sampler, operations=[grain.transforms.Batch(BATCH)], worker_count=0
    )


def test_an_endless_grain_map_dataset_needs_steps_per_epoch():
    trainer = build()
    endless = grain_input("map").repeat()
    with pytest.raises(ValueError, match=r"repeats without end .* give steps_per_epoch"):
        trainer.fit(endless, epochs=1, verbose=0)
    assert trainer.step == 0
    trainer.fit(endless, epochs=2, steps_per_epoch=3, verbose=0)
    assert trainer.step == 6


@pytest.mark.parametrize("kind", ["map", "iter", "loader"])
def test_a_grain_input_trains_as_the_same_arrays(arrays_run, kind):
    reference, _ = arrays_run
    dataset = grain_input(kind)
    trainer = build()
    trainer.fit(dataset, epochs=EPOCHS, verbose=0)
    assert_same_weights(trainer, reference)
    logs = trainer.evaluate(dataset)
    assert logs["accuracy"] == pytest.approx(reference.evaluate(X, Y)["accuracy"])
    np.testing.assert_allclose(trainer.predict(dataset), reference.predict(X), rtol=1e-5, atol=1e-6)


def test_a_memory_mapped_npy_folder_trains_as_the_same_arrays(tmp_path):
    folder = tmp_path / "data"
    (folder / "x").mkdir(parents=True)
    for i, start in enumerate(range(0, len(X), 150)):  # three shards of x, one file of y
        np.save(folder / "x" / f"part{i}.npy", X[start : start + 150])
    np.save(folder / "y.npy", Y)
    x, y = load_npy(folder)
    assert isinstance(x, ShardedArray) and isinstance(y, NpyFile) and x.shape == X.shape
    np.testing.assert_array_equal(x[np.array([5, 160, 399, 0])], X[[5, 160, 399, 0]])
    reference = build()
    reference.fit(X, Y, epochs=3, batch_size=BATCH, verbose=0)
    trainer = build()
    trainer.fit(x, y, epochs=3, batch_size=BATCH, verbose=0)  # shuffled, from the same seed
    assert_same_weights(trainer, reference)


def test_a_pipeline_with_a_map_trains_the_spirals():
    def jitter(sample):
        x, y = sample
        return x + np.float32(0.0), y

    trainer = build()
    pipeline = tp.data.Pipeline(X, Y, batch_size=BATCH, map=jitter, seed=3)
    history = trainer.fit(pipeline, epochs=EPOCHS, validation_data=(X, Y), verbose=0)
    assert history.history["val_accuracy"][-1] > 0.8


@pytest.mark.parametrize("workers", [0, 2])
def test_a_pipeline_resumed_in_the_middle_of_an_epoch_is_bit_exact(tmp_path, workers):
    def make():
        return tp.data.Pipeline(X, Y, batch_size=BATCH, seed=7, workers=workers, prefetch=2)

    straight = build()
    straight.fit(make(), epochs=3, verbose=0)
    folder = tmp_path / "ckpt"

    first = stopping_after(20, folder)  # epoch 1, batch 8 of 13
    first.fit(make(), epochs=3, verbose=0)
    assert first.step == 21
    resumed = build()
    resumed.fit(make(), epochs=3, resume_from=folder, verbose=0)
    assert resumed.step == straight.step == 39
    assert_same_weights(resumed, straight)


def test_a_grain_dataset_resumed_in_the_middle_of_an_epoch_is_bit_exact(tmp_path):
    def make():
        return grain.MapDataset.source(list(zip(X, Y))).shuffle(seed=4).batch(BATCH)

    straight = build()
    straight.fit(make(), epochs=2, verbose=0)
    folder = tmp_path / "ckpt"

    class Fail:
        @tp.hookimpl
        def on_train_batch_start(self, step):
            if step == 17:
                raise RuntimeError("disk on fire")

    first = build()
    first.plugins.register_all([Fail(), tp.plugins.Checkpoint(dirpath=str(folder))])
    with pytest.raises(RuntimeError):
        first.fit(make(), epochs=2, verbose=0)
    saved = load_checkpoint(folder)["trainer"]
    assert saved["in_epoch"] and (saved["epoch"], saved["batch_in_epoch"]) == (1, 4)  # 13 batches an epoch
    resumed = build()
    resumed.fit(make(), epochs=2, resume_from=folder, verbose=0)
    assert_same_weights(resumed, straight)


def test_a_grain_map_dataset_read_by_workers_keeps_its_batches_and_resumes(tmp_path):
    from tapefit.data.sources import GrainSource

    def make(workers=2):
        dataset = grain.MapDataset.source(list(zip(X, Y))).shuffle(seed=4).batch(BATCH)
        return GrainSource(dataset, workers=workers, prefetch=1)

    straight = build()
    straight.fit(make(workers=0), epochs=2, verbose=0)
    folder = tmp_path / "ckpt"

    first = stopping_after(16, folder)
    first.fit(make(), epochs=2, verbose=0)
    resumed = build()
    resumed.fit(make(), epochs=2, resume_from=folder, verbose=0)
    assert resumed.step == straight.step == 26
    assert_same_weights(resumed, straight)  # the workers read the batches in their order
    with pytest.raises(ValueError, match=r"read by 2 worker processes, this input by 0"):
        build().fit(make(workers=0), epochs=2, resume_from=folder, verbose=0)


def test_a_grain_map_dataset_read_in_parts_resumes_only_on_as_many_processes():
    def part(rank=None):
        source = tp.data.sources.as_source(grain.MapDataset.source(list(zip(X, Y))).batch(BATCH))
        if rank is not None:
            source.shard(rank, 2)
        return source

    whole = [y for _, y in grain.MapDataset.source(list(zip(X, Y))).batch(BATCH)]
    source = part(1)
    assert source.num_batches == 6  # 13 batches: 6 each, the 13th left out
    source.start_epoch()
    np.testing.assert_array_equal(source.next_batch()[1], whole[1])  # batches 1, 3, 5, ...
    state = source.get_state()
    assert state["ranks"] == 2 and state["position"] == 1
    again = part(1)
    again.set_state(state)
    np.testing.assert_array_equal(again.next_batch()[1], whole[3])
    alone = part()
    alone.set_state(state)
    with pytest.raises(ValueError, match=r"read in parts by 2 processes, and this fit runs on 1: resume"):
        alone.next_batch()
    with pytest.raises(ValueError, match=r"13 batches cannot be read in parts by 14 processes"):
        part().shard(0, 14)


class NoStateAsked:
    """Wraps a Grain iterator and fails if asked for its state: asked before the first batch,
    a multiprocess iterator starts its second worker only after the first gave a batch."""

    def __init__(self, iterator):
        self.iterator = iterator

    def __next__(self):
        return next(self.iterator)

    def get_state(self):
        raise AssertionError("Grain's iterator state was asked for")


def test_a_pipelines_state_is_its_position_and_grain_is_not_asked():
    pipeline = tp.data.Pipeline(X, Y, batch_size=BATCH, seed=7)
    pipeline.start_epoch()
    pipeline._iterator = NoStateAsked(pipeline._iterator)
    for _ in range(3):
        pipeline.next_batch()
    state = pipeline.get_state()
    assert state == {"kind": "pipeline", "seed": 7, "epoch": 0, "position": 3}
    again = tp.data.Pipeline(X, Y, batch_size=BATCH, seed=0)
    again.set_state(state)
    for ours, theirs in zip(again.next_batch(), pipeline.next_batch(), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    with pytest.raises(ValueError, match=r"loader.position: expected an integer, got 'x'"):
        again.set_state({**state, "position": "x"})


def test_a_grain_input_at_an_epochs_start_needs_no_state_from_grain():
    source = tp.data.sources.as_source(grain.MapDataset.source(list(zip(X, Y))).batch(BATCH))
    source.start_epoch()
    source._iterator = NoStateAsked(source._iterator)
    assert source.get_state() == {"kind": "grain", "position": 0, "iterator": "null"}
    source.set_state(source.get_state())
    np.testing.assert_array_equal(source.next_batch()[0], X[:BATCH])


def test_a_plain_generator_resume_warns_once_and_goes_on(tmp_path, caplog):
    folder = tmp_path / "ckpt"

    first = stopping_after(4, folder)
    first.fit(InOrder(), epochs=2, verbose=0)
    resumed = build()
    with caplog.at_level(logging.WARNING, logger="tapefit"):
        resumed.fit(InOrder(), epochs=2, resume_from=folder, verbose=0)
    assert caplog.text.count("position cannot be restored") == 1
    # The stream of epoch 0 starts again and is read to its end: 5 + 13 batches, then 13.
    assert resumed.step == 31 and resumed.history.epoch == [0, 1]


def test_validation_split_takes_the_last_samples_before_shuffling():
    seen = []

    class Validation:
        @tp.hookimpl
        def on_epoch_end(self, logs):
            seen.append(logs["val_loss"])

    trainer = build()
    trainer.plugins.register(Validation())
    trainer.fit(X, Y, epochs=1, validation_split=0.25, verbose=0)
    assert trainer.steps_per_epoch == 10  # 300 training samples
    expected = trainer.evaluate(X[300:], Y[300:])["loss"]
    assert seen == [pytest.approx(expected)]
    with pytest.raises(ValueError, match="validation_split takes the last samples"):
        trainer.fit(InOrder(), validation_split=0.2)
    with pytest.raises(ValueError, match=r"validation_split must be a fraction in \[0, 1\)"):
        trainer.fit(X, Y, validation_split=1.0)


def test_validation_steps_limits_a_streamed_validation():
    counted = []

    def validation():
        for batch in in_order_batches():
            counted.append(1)
            yield batch

    trainer = build()
    trainer.fit(X, Y, epochs=1, validation_data=validation(), validation_steps=3, verbose=0)
    assert len(counted) == 3


def test_a_batch_of_the_wrong_structure_is_named():
    def bad():
        yield X[:4], Y[:4]
        yield X[4:8], Y[4:8], Y[4:8], Y[4:8]

    trainer = build()
    with pytest.raises(
        ValueError,
        match=r"batch 1 of the data: expected an \(x, y\) or \(x, y, sample_weight\) tuple.*4 items",
    ):
        trainer.fit(bad(), verbose=0)


def test_stream_arguments_that_cannot_apply_are_refused():
    trainer = build()
    with pytest.raises(ValueError, match="y must be None when x is a data set or a generator"):
        trainer.fit(InOrder(), Y)
    with pytest.raises(ValueError, match="steps_per_epoch is for data sets and generators"):
        trainer.fit(X, Y, steps_per_epoch=3)
    with pytest.raises(ValueError, match="steps_per_epoch must be a positive integer"):
        trainer.fit(InOrder(), steps_per_epoch=0)


def test_a_file_that_is_not_npy_is_named(tmp_path):
    bad = tmp_path / "x.npy"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(tp.data.DataError, match=r"x\.npy' is not a \.npy file"):
        open_npy(bad)
    (tmp_path / "folder").mkdir()
    np.save(tmp_path / "folder" / "a.npy", np.zeros((3, 2), np.float32))
    np.save(tmp_path / "folder" / "b.npy", np.zeros((3, 5), np.float32))
    with pytest.raises(tp.data.DataError, match=r"agree in every axis.*a\.npy: \(3, 2\).*b\.npy: \(3, 5\)"):
        open_npy(tmp_path / "folder")


def test_an_npy_file_reads_the_rows_asked_for(tmp_path):
    np.save(tmp_path / "a.npy", X)
    on_disk = open_npy(tmp_path / "a.npy")
    assert isinstance(on_disk, NpyFile) and is_on_disk(on_disk) and on_disk.shape == X.shape
    rows = np.array([399, 3, 4, 5, 0, 3])  # unsorted, with a run and a repeat
    np.testing.assert_array_equal(on_disk[rows], X[rows])
    np.testing.assert_array_equal(on_disk[10:20], X[10:20])
    np.testing.assert_array_equal(on_disk[-1], X[-1])
    np.testing.assert_array_equal(np.asarray(on_disk), X)
    with pytest.raises(IndexError, match="row index out of range for 400 rows"):
        on_disk[np.array([400])]
    np.testing.assert_array_equal(open_npy(tmp_path / "a.npy", mmap=False), X)


def test_validation_split_of_data_on_disk_reads_nothing_up_front(tmp_path):
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", Y)
    x, y = load_npy(tmp_path)
    seen = []

    class Validation:
        @tp.hookimpl
        def on_epoch_end(self, logs):
            seen.append(logs["val_loss"])

    trainer = build()
    trainer.plugins.register(Validation())
    trainer.fit(x, y, epochs=1, batch_size=BATCH, validation_split=0.25, verbose=0)
    assert trainer.steps_per_epoch == 10
    assert seen == [pytest.approx(trainer.evaluate(X[300:], Y[300:])["loss"])]


def test_sharded_pipelines_read_disjoint_parts_of_each_epoch():
    ids = np.arange(21)
    parts = []
    for rank in range(2):
        pipeline = tp.data.Pipeline(ids.astype(np.float32)[:, None], ids, batch_size=4, seed=9)
        pipeline.shard(rank, 2)
        assert len(pipeline) == 3  # 10 samples each (one of 21 left out), batches of 4, 4, 2
        epochs = []
        for _ in range(2):
            epochs.append(np.concatenate([y for _, y in pipeline]).tolist())
        parts.append(epochs)
    for epoch in range(2):
        first, second = set(parts[0][epoch]), set(parts[1][epoch])
        assert len(first) == len(second) == 10 and not first & second
    assert parts[0][0] != parts[0][1]  # a new order every epoch


def test_a_batch_that_does_not_fit_the_model_is_named():
    def widening():
        yield X[:8], Y[:8]
        yield np.concatenate([X[8:16], X[8:16]], axis=1), Y[8:16]  # 4 features, not 2

    trainer = build()
    with pytest.raises(ValueError, match=r"^batch 1 of epoch 1 of the data: .*"):
        trainer.fit(widening(), verbose=0)


def test_evaluate_and_predict_name_the_batch_that_fails():
    def widening():
        yield X[:8], Y[:8]
        yield np.concatenate([X[8:16], X[8:16]], axis=1), Y[8:16]  # 4 features, not 2

    def triples():
        yield X[:8], Y[:8], Y[:8]

    trainer = build()
    trainer.fit(X, Y, epochs=1, verbose=0)
    with pytest.raises(
        ValueError, match=r"^batch 1 of the data: Dense .* last dimension 2, got shape \(8, 4\)"
    ):
        trainer.evaluate(widening())
    with pytest.raises(ValueError, match=r"^batch 1 of the data: Dense .* last dimension 2"):
        trainer.predict(widening())
    assert trainer.predict(triples()).shape[0] == 8  # (x, y, sample_weight) batches: x predicted, as Keras
    with pytest.raises(ValueError, match=r"^Dense .* last dimension 2"):  # arrays: no batch to name
        trainer.predict(np.zeros((4, 3), np.float32))


def test_large_csv_and_npz_files_are_read_on_demand(tmp_path):
    from tapefit.data.files import load_csv, load_npz

    rows = "\n".join(f"{a:.6f},{b:.6f},{label}" for (a, b), label in zip(X, Y))
    (tmp_path / "d.csv").write_text("a,b,label\n" + rows + "\n")
    x, y = load_csv(str(tmp_path / "d.csv"), label_column="label", mmap=True)
    assert isinstance(x, NpyFile) and x.shape == (400, 2) and y.dtype == np.int64
    in_memory, same = load_csv(str(tmp_path / "d.csv"), label_column="label")
    np.testing.assert_allclose(x[np.arange(400)], in_memory, rtol=1e-6)
    np.testing.assert_array_equal(y, same)
    np.savez(tmp_path / "d.npz", x=X, y=Y)
    x, y = load_npz(str(tmp_path / "d.npz"), mmap=True)
    assert isinstance(x, NpyFile)
    np.testing.assert_array_equal(x[np.array([7, 0, 399])], X[[7, 0, 399]])
    trainer = build()
    trainer.fit(x, y, epochs=1, batch_size=BATCH, verbose=0)  # batches read from the archive
    np.savez_compressed(tmp_path / "c.npz", x=X, y=Y)
    with pytest.raises(
        tp.data.DataError, match=r"compressed \(np.savez_compressed\).*np.savez, or set mmap: false"
    ):
        load_npz(str(tmp_path / "c.npz"), mmap=True)


def test_a_users_grain_input_leaves_absl_flags_usable_in_a_fresh_interpreter():
    # With JAX importable, Grain reads an absl flag when its workers start, also those of a
    # user's own mp_prefetch or DataLoader: a program that never parsed absl flags must still
    # train, and one that parsed its own keeps their values.
    import subprocess
    import sys

    script = (
        "from absl import flags\n"
        "import sys\n"
        "flags.DEFINE_integer('mine', 1, 'a flag of the program')\n"
        "parse = sys.argv[1] == 'parse'\n"
        "if parse:\n"
        "    flags.FLAGS(['prog', '--mine=7'])\n"
        "import numpy as np, tapefit as tp\n"
        "import grain\n"
        "tp.data.sources.as_source(grain.MapDataset.range(8).batch(4))\n"
        "assert flags.FLAGS.is_parsed()\n"
        "print(flags.FLAGS.mine)\n"
    )
    for mode, expected in (("plain", "1"), ("parse", "7")):
        done = subprocess.run(
            [sys.executable, "-c", script, mode], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split()[-1] == expected


class BatchesByIndex:
    """Keras's PyDataset shape: len() batches, [i] each, on_epoch_end between epochs."""

    def __init__(self, x, y, batch_size):
        self.x, self.y, self.batch_size, self.epoch_ends = x, y, batch_size, 0

    def __len__(self):
        return -(-len(self.x) // self.batch_size)

    def __getitem__(self, index):
        rows = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return self.x[rows], self.y[rows]

    def on_epoch_end(self):
        self.epoch_ends += 1


def test_a_pydataset_style_object_is_read_by_index_and_resumes_exactly(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-1.0], [0.5]], np.float32)).astype(np.float32)

    def trainer(plugins=()):
        tp.random.set_seed(0)
        return tp.Trainer(tp.layers.Dense(1), tp.optimizers.SGD(0.1), "mse", plugins=list(plugins))

    data = BatchesByIndex(x, y, 6)
    reference = trainer()
    history = reference.fit(data, epochs=3, verbose=0)
    assert reference.step == 12 and data.epoch_ends == 2  # called before each later epoch
    # the same batches as arrays in order
    arrays = trainer()
    expected = arrays.fit(x, y, epochs=3, batch_size=6, shuffle=False, verbose=0)
    np.testing.assert_allclose(history.history["loss"], expected.history["loss"], rtol=1e-6)
    np.testing.assert_allclose(reference.predict(data), arrays.predict(x), rtol=1e-6)
    assert set(reference.evaluate(data)) == {"loss"}

    class StopMidEpoch:
        @tp.hookimpl
        def on_train_batch_start(self, step):
            if step == 5:  # epoch 2's second batch: the state before it is whole
                raise KeyboardInterrupt

    interrupted = trainer([StopMidEpoch(), {"type": "checkpoint", "dirpath": str(tmp_path)}])
    with pytest.raises(KeyboardInterrupt):
        interrupted.fit(BatchesByIndex(x, y, 6), epochs=3, verbose=0)
    resumed = trainer()
    again = resumed.fit(
        BatchesByIndex(x, y, 6), epochs=3, verbose=0, resume_from=tmp_path / "interrupted.npz"
    )
    assert again.history == history.history
    for a, b in zip(resumed.model.get_weights(), reference.model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_steps_per_epoch_goes_on_with_the_stream_where_the_last_epoch_stopped():
    # Keras's rule: a stream of 3 batches with steps_per_epoch=2 gives 0, 1 | 2 | 0, 1 | 2
    batches = [(X[i : i + 1], Y[i : i + 1]) for i in range(3)]
    seen = []

    class Recorded:
        def __iter__(self):
            for batch in batches:
                seen.append(int(np.flatnonzero((X == batch[0]).all(axis=1))[0]))
                yield batch

    trainer = build()
    history = trainer.fit(Recorded(), epochs=4, steps_per_epoch=2, verbose=0)
    assert seen == [0, 1, 2, 0, 1, 2] and trainer.step == 6 and history.epoch == [0, 1, 2, 3]
    seen.clear()
    build().fit(Recorded(), epochs=2, verbose=0)  # without steps_per_epoch every epoch starts over
    assert seen == [0, 1, 2, 0, 1, 2]
