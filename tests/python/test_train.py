"""reckon.train: the CLI's run from Python (same options, same numbers with the same seed), a callback
per step that can stop the run, and the CLI's errors."""
import json
import os

import pytest

import reckon
from conftest import cli


def metrics(out, kind):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["kind"] == kind]


def test_train_reaches_the_clis_accuracy_with_the_same_seed(tmp_path):
    # One thread: the kernels' sums then run in one order, so the two runs are the same run.
    args = dict(epochs=1, batch=128, seed=7, threads=1)
    cli("train", "lenet5", "--epochs", "1", "--batch", "128", "--seed", "7", "--threads", "1", "--out",
        str(tmp_path / "cli"), "--quiet")
    steps = []
    r = reckon.train("lenet5", out=str(tmp_path / "py"), verbose=0, callback=steps.append, **args)
    want = metrics(tmp_path / "cli", "test")[-1]
    got = metrics(tmp_path / "py", "test")[-1]
    assert got["accuracy"] == want["accuracy"] and got["loss"] == want["loss"]
    assert r.test_accuracy == pytest.approx(want["accuracy"], abs=1e-9)
    assert r.test_accuracy > 0.75  # lenet5 learns Fashion-MNIST in one epoch (chance is 0.10)
    # The callback saw every step, in order, with the loss the run recorded.
    assert [s["step"] for s in steps] == list(range(1, r.steps + 1))
    assert [s["loss"] for s in steps] == pytest.approx(r.losses)
    assert steps[-1]["epoch"] == 1 and steps[-1]["batch"] == steps[-1]["batches"] == r.steps
    assert os.path.exists(r.checkpoint)
    assert "final test accuracy" in str(r)


def test_a_callback_returning_false_stops_with_a_checkpoint_and_resume_goes_on(tmp_path):
    out = str(tmp_path / "run")
    seen = []

    def stop_at_5(s):
        seen.append(s["step"])
        return s["step"] < 5

    r = reckon.train("lenet5", data="synthetic:1x28x28:512", epochs=1, batch=32, out=out, verbose=0,
                     callback=stop_at_5)
    assert r.stopped and r.steps == 5 and seen == [1, 2, 3, 4, 5]
    assert os.path.exists(r.checkpoint)
    r2 = reckon.train("lenet5", out=out, resume=True, verbose=0)
    assert r2.first_step == 5 and r2.steps == 512 // 32 and not r2.stopped
    # The ledger's prediction of the run, beside what it measured (11 steps: the median after 3).
    assert r2.predicted_step_s > 0 and r2.measured_step_s > 0
    assert r2.predicted_process_peak_bytes > 0
    assert r2.measured_process_peak_bytes >= r2.dataset_bytes


def test_a_callbacks_exception_ends_the_run_and_is_raised(tmp_path):
    def boom(s):
        raise ValueError(f"stop at {s['step']}")

    with pytest.raises(ValueError, match="stop at 1"):
        reckon.train("lenet5", data="synthetic:1x28x28:256", epochs=1, batch=32, out=str(tmp_path / "r"), verbose=0,
                     callback=boom)


def test_options_are_the_clis():
    opts = reckon.train_options()
    for name in ("data", "epochs", "batch", "lr", "optimizer", "precision", "accum", "max_memory", "val_split"):
        assert name in opts
    assert opts["epochs"][0] == 5 and opts["optimizer"][0] == "sgd"


def test_bad_options_are_named(tmp_path):
    with pytest.raises(TypeError, match="nosuch"):
        reckon.train("lenet5", nosuch=1)
    with pytest.raises(TypeError, match="epochs"):
        reckon.train("lenet5", epochs="many")
    with pytest.raises(reckon.Error, match="--batch"):
        reckon.train("lenet5", batch=0, out=str(tmp_path / "b"), verbose=0)
    # A budget nothing fits: refused before the run, with the ladder.
    with pytest.raises(reckon.Error, match="fits"):
        reckon.train("lenet5", data="synthetic:1x28x28:64", max_memory="64KiB", out=str(tmp_path / "m"), verbose=0)


def test_ctrl_c_stops_with_a_checkpoint_and_raises_keyboard_interrupt(tmp_path):
    import signal
    import subprocess
    import sys
    out = str(tmp_path / "run")
    code = ("import sys, reckon\n"
            "def cb(s):\n"
            "    if s['step'] == 1: print('started', flush=True)\n"
            f"reckon.train('lenet5', data='synthetic:1x28x28:4096', epochs=50, batch=32, out={out!r}, verbose=0,"
            " callback=cb)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "started"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    assert os.path.exists(os.path.join(out, "last.safetensors"))
    r = reckon.train("lenet5", out=out, resume=True, epochs=1, verbose=0, stop_after=1)
    assert r.first_step >= 1
