"""A Keras 2 fit with ``BackupAndRestore`` that kills itself, run by tests/test_keras2_backup.py.

``python keras2_backup_worker.py OUT.npz BACKUP_DIR SAVE_FREQ KILL_AT KILL_IN_WRITE`` trains a
small MLP with Dropout (``shuffle=True``) and writes its final weights and last epoch's logs
to OUT.npz (and, as ``start``, the optimizer's step count when training began: where it
resumed). ``SAVE_FREQ``: ``epoch``, an int, or ``none`` (no ``BackupAndRestore``: the
uninterrupted reference). ``KILL_AT``: a global batch position (epoch * batches per epoch +
batch) after which the process sends itself SIGKILL, or ``-1``. ``KILL_IN_WRITE``: the n-th
backup written in this process is killed after its files are written and before its folder
is renamed, or ``-1``. The test sets ``JAXKERAS_TIERED_COMPILATION=0`` (bit-for-bit
deterministic on CPU).
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np

OUT, BACKUP_DIR, SAVE_FREQ = sys.argv[1], sys.argv[2], sys.argv[3]
KILL_AT, KILL_IN_WRITE = int(sys.argv[4]), int(sys.argv[5])
SAMPLES, BATCH, EPOCHS = 100, 16, 5
BATCHES = -(-SAMPLES // BATCH)  # 7: the last batch has 4 samples

import keras  # noqa: E402

import jaxkeras as K  # noqa: E402
from jaxkeras import _keras2_backup  # noqa: E402


def kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Killer(keras.callbacks.Callback):
    """Kills the process after the batch at global position KILL_AT."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch = 0

        self.start = None

    def on_train_begin(self, logs=None):
        self.start = K.get_value(self.model.optimizer.iterations)  # after a restore

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch * BATCHES + batch == KILL_AT:
            kill()


if KILL_IN_WRITE >= 0:
    publish, writes = _keras2_backup._publish, [0]

    def publish_or_die(temporary: str, final: str) -> None:
        writes[0] += 1
        if writes[0] == KILL_IN_WRITE:
            kill()
        publish(temporary, final)

    _keras2_backup._publish = publish_or_die

np.random.seed(1)
K.set_random_seed(1)
data = np.random.default_rng(0)
x = data.normal(size=(SAMPLES, 6)).astype("float32")
y = (x[:, :3].sum(axis=1, keepdims=True) > 0).astype("float32")
model = keras.models.Sequential(
    [
        keras.layers.Dense(12, activation="relu", input_shape=(6,)),
        keras.layers.Dropout(0.3),
        keras.layers.Dense(1, activation="sigmoid"),
    ]
)
model.compile(keras.optimizers.Adam(0.01), "binary_crossentropy", metrics=["accuracy"])
callbacks = [Killer()]
if SAVE_FREQ != "none":
    freq = SAVE_FREQ if SAVE_FREQ == "epoch" else int(SAVE_FREQ)
    callbacks.insert(0, keras.callbacks.BackupAndRestore(BACKUP_DIR, save_freq=freq))
history = model.fit(
    x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=True, callbacks=callbacks, verbose=0
)
last = {k: np.asarray(v[-1]) for k, v in history.history.items()}
weights = model.get_weights() + model.optimizer.get_weights()
np.savez(OUT, *weights, start=callbacks[-1].start, **{f"log_{k}": v for k, v in last.items()})
