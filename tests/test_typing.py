"""Type checkers see the whole public API: a small user script checks clean with mypy."""

import ast
import textwrap
from pathlib import Path

import pytest

import tapefit.core
import tapefit.core.ops

ROOT = Path(__file__).resolve().parents[1]

USER_SCRIPT = textwrap.dedent(
    """
    from typing import Any

    import tapefit as tp

    x = tp.Variable([1.0, 2.0], name="x")
    with tp.GradientTape() as tape:
        y = tp.reduce_sum(tp.exp(x) * tp.sin(x) + tp.square(x))
    g = tape.gradient(y, x)
    t: tp.Tensor = tp.nn.relu(tp.matmul(tp.ones((2, 2)), tp.reshape(x, (2, 1))))
    z: tp.Tensor = tp.clip_by_value(tp.concat([t, t], axis=0), 0.0, 1.0)

    model = tp.layers.Sequential([tp.layers.Dense(4, activation="relu"), tp.layers.Dense(2)])
    optimizer = tp.optimizers.Adam(learning_rate=0.01)
    data = tp.random.normal((8, 3)).numpy()
    labels = tp.constant([0, 1, 0, 1, 0, 1, 0, 1]).numpy()
    with tp.GradientTape() as tape:
        loss = tp.reduce_mean(
            tp.nn.sparse_softmax_cross_entropy_with_logits(labels, model(data, training=True))
        )
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


    class Counter:
        def __init__(self) -> None:
            self.batches = 0

        @tp.hookimpl
        def on_train_batch_end(self, trainer: Any, step: int, logs: dict[str, float]) -> None:
            self.batches += 1


    trainer = tp.Trainer(model, "sgd", "sparse_categorical_crossentropy", plugins=[Counter()])
    history = trainer.fit(data, labels, epochs=1, batch_size=4)
    losses: list[float] = history.history["loss"]
    """
)


def test_every_op_is_listed_explicitly_in_core():
    # A star import inside the tapefit.core <-> tapefit.core.ops cycle hides names from mypy.
    tree = ast.parse(Path(tapefit.core.__file__).read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "tapefit.core.ops"
        for alias in node.names
    }
    missing = sorted(set(tapefit.core.ops.__all__) - imported)
    assert not missing, f"add these ops to the explicit import list in tapefit/core/__init__.py: {missing}"
    assert set(tapefit.core.ops.__all__) <= set(tapefit.core.__all__)


def test_a_user_script_type_checks_with_mypy(tmp_path, request):
    api = pytest.importorskip("mypy.api", reason="mypy comes with the dev extra")
    script = tmp_path / "user_script.py"
    script.write_text(USER_SCRIPT + "\nreveal_type(tp.exp)\n")
    config = tmp_path / "mypy.ini"
    # The package is read for its types only (follow_imports=silent): this checks what a user
    # sees, not the package's own internals.
    # NumPy's and the other dependencies' stubs are skipped (read as Any) to keep this fast.
    config.write_text(
        f"[mypy]\nmypy_path = {ROOT}\nfollow_imports = silent\nignore_missing_imports = True\n"
        "[mypy-numpy.*,pluggy.*,tqdm.*,yaml.*,tensorboardX.*,safetensors.*,threadpoolctl.*]\n"
        "follow_imports = skip\n"
    )
    cache = (
        request.config.cache.mkdir("mypy") if getattr(request.config, "cache", None) else tmp_path / "cache"
    )
    stdout, stderr, status = api.run([str(script), "--config-file", str(config), "--cache-dir", str(cache)])
    assert status == 0, stdout + stderr
    assert "Success: no issues found" in stdout
    # Not Any: mypy really sees the op and its signature.
    assert 'Revealed type is "def (Any) -> tapefit.core.tensor.Tensor"' in stdout, stdout
