"""A real ``tensorboard`` server reads the plugin's files: runs, scalars, graph and hparams over HTTP.

Starts TensorBoard (from the ``dev`` extra) on a free port on 127.0.0.1 and always stops it.
Marked ``slow`` (a few seconds) so it is easy to find; it runs in the default test command.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tapefit.plugins import TensorBoard

pytestmark = pytest.mark.slow

N, BATCH, EPOCHS = 22, 5, 2
STEPS = math.ceil(N / BATCH) * EPOCHS
START_TIMEOUT = 60.0  # seconds; a bound, not a timing assert


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(base: str, path: str, body: dict | None = None) -> bytes:
    data = None if body is None else json.dumps(body).encode()
    headers = {} if body is None else {"Content-Type": "application/json", "X-XSRF-Protected": "1"}
    request = urllib.request.Request(base + path, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read()


def test_a_tensorboard_server_shows_runs_scalars_graph_and_hparams(tmp_path, make_trainer, make_data):
    x, y = make_data(N)
    trainer = make_trainer([TensorBoard(log_dir=str(tmp_path / "tb"))])
    trainer.config = {
        "trainer": {"epochs": EPOCHS, "batch_size": BATCH},
        "optimizer": {"type": "adam", "learning_rate": 0.01},
        "plugins": [{"type": "tensorboard"}],
    }
    trainer.fit(x, y, epochs=EPOCHS, batch_size=BATCH, validation_data=make_data(7, seed=1))

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from tensorboard.main import run_main; run_main()",
            "--logdir",
            str(tmp_path / "tb"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--load_fast=false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        runs: list[str] = []
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"tensorboard exited with {process.returncode}: {process.stderr.read().decode()}")
            try:
                runs = json.loads(get(base, "/data/runs"))
                if len(runs) == 3:  # every run loaded
                    scalars = json.loads(get(base, "/data/plugin/scalars/scalars?run=train&tag=step/loss"))
                    if len(scalars) == STEPS:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.2)
        assert sorted(runs) == ["hparams", "train", "val"]

        # every step exactly once, in order, with the values the fit logged
        steps = [
            step
            for _, step, _ in json.loads(get(base, "/data/plugin/scalars/scalars?run=train&tag=step/loss"))
        ]
        assert steps == list(range(STEPS))
        epochs = json.loads(get(base, "/data/plugin/scalars/scalars?run=val&tag=epoch/loss"))
        assert [step for _, step, _ in epochs] == list(range(EPOCHS))
        assert epochs[-1][2] == pytest.approx(trainer.history.history["val_loss"][-1], rel=1e-6)

        graph = get(base, "/data/plugin/graphs/graph?run=train").decode()
        root, first = trainer.model.name, trainer.model.layers[0].name
        assert f'name: "{root}/{first}/' in graph and 'op: "Placeholder"' in graph
        assert "_output_shapes" in graph

        experiment = json.loads(get(base, "/data/plugin/hparams/experiment", {"experimentName": ""}))
        names = sorted(info["name"] for info in experiment["hparamInfos"])
        assert names == [
            "optimizer.learning_rate",
            "optimizer.type",
            "plugins.0.type",
            "trainer.batch_size",
            "trainer.epochs",
        ]
        metrics = {info["name"]["tag"] for info in experiment["metricInfos"]}
        assert {"hparam/loss", "hparam/val_loss"} <= metrics
        groups = json.loads(
            get(
                base,
                "/data/plugin/hparams/session_groups",
                {
                    "experimentName": "",
                    "allowedStatuses": [
                        "STATUS_SUCCESS",
                        "STATUS_UNKNOWN",
                        "STATUS_FAILURE",
                        "STATUS_RUNNING",
                    ],
                    "colParams": [],
                    "startIndex": 0,
                    "sliceSize": 10,
                },
            )
        )
        (group,) = groups["sessionGroups"]
        assert group["hparams"] == {
            "optimizer.learning_rate": 0.01,
            "optimizer.type": "adam",
            "plugins.0.type": "tensorboard",
            "trainer.batch_size": BATCH,
            "trainer.epochs": EPOCHS,
        }
        (session,) = group["sessions"]
        assert session["startTimeSecs"] > 1e9 and session["status"] == "STATUS_SUCCESS"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()
