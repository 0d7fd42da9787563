"""Many shapes: an autoregressive decode whose every ``predict`` has a new shape.

A small Keras 2 LSTM language model (an embedding of 64 tokens, an LSTM of 64 units over
sequences of unknown length, a softmax over the tokens) decodes :data:`TOKENS` tokens
greedily: each step calls ``model.predict`` on the sequences so far, one token longer than
the last call's, and drops the sequences that emitted the end token, so the batch shrinks
too. Every call has a shape no earlier call had. Each side runs in a fresh process (no
persistent compilation cache), the same weights (saved by jaxkeras, loaded by TF-Keras) and
the same prompts; the decoded tokens must agree.

- jaxkeras: Keras 2.3.1 with ``KERAS_BACKEND=jaxkeras`` (each new shape traces and compiles
  the predict function once);
- TF-Keras 2.x (``.venv-bench``): its ``predict`` retraces a ``tf.function`` for new shapes
  and relaxes them after a few.

Row: the whole decode's wall time (build excluded), jaxkeras over TF-Keras, goal ≤ 1x. Run
``python benchmarks/bench_decode.py [--quick]``, or ``--side jaxkeras|tf_keras --data FILE``
for one side (prints JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_keras2 import _keras
from common import Row, json_of_process, markdown_table, ratio_row

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 64
UNITS = 64
TOKENS = 32
PROMPTS = 16
END = 0  # the token that ends a sequence


def _model(keras):
    inputs = keras.layers.Input((None,), dtype="int32")
    h = keras.layers.Embedding(VOCAB, 32)(inputs)
    h = keras.layers.LSTM(UNITS)(h)
    outputs = keras.layers.Dense(VOCAB, activation="softmax")(h)
    return keras.models.Model(inputs, outputs)


def decode(model, prompts: np.ndarray, tokens: int) -> tuple[list[list[int]], list[float]]:
    """Greedy decoding: each step predicts the next token of every live sequence.

    Returns:
        Every sequence's tokens and each step's seconds.
    """
    live = list(range(len(prompts)))
    sequences = [[int(t) for t in p] for p in prompts]
    times = []
    for _ in range(tokens):
        if not live:
            break
        batch = np.array([sequences[i] for i in live], dtype="int32")
        start = time.perf_counter()
        probs = model.predict(batch, batch_size=len(live))
        times.append(time.perf_counter() - start)
        nxt = np.argmax(probs, axis=-1)
        for i, token in zip(list(live), nxt):
            sequences[i].append(int(token))
            if token == END:
                live.remove(i)
    return sequences, times


def run_side(side: str, data: str, tokens: int) -> dict:
    """One side: jaxkeras builds the model and saves its weights and prompts to ``data``;
    TF-Keras loads them. Both decode.

    Returns:
        The sequences, the decode's total seconds and its steps' seconds.
    """
    keras = _keras(side)
    np.random.seed(0)
    model = _model(keras)
    if side == "jaxkeras":
        rng = np.random.default_rng(0)
        prompts = rng.integers(1, VOCAB, (PROMPTS, 4)).astype("int32")
        weights = model.get_weights()
        np.savez(
            data, prompts=prompts, count=len(weights), **{f"w{i}": w for i, w in enumerate(weights)}
        )
    else:
        saved = np.load(data)
        prompts = saved["prompts"]
        model.set_weights([saved[f"w{i}"] for i in range(int(saved["count"]))])
    start = time.perf_counter()
    sequences, times = decode(model, prompts, tokens)
    return {"total_s": time.perf_counter() - start, "steps_s": times, "sequences": sequences}


def main(quick: bool = False) -> list[Row]:
    """Both sides, alternated over rounds (one round with ``quick``).

    Returns:
        The decode's row.

    Raises:
        AssertionError: the two sides decoded different tokens.
    """
    ours_python = Path(sys.executable)  # the interpreter running the benchmark
    theirs_python = Path(os.environ.get("BENCH_TF_PYTHON", ROOT / ".venv-bench" / "bin" / "python"))
    tokens = TOKENS // 2 if quick else TOKENS
    ours, theirs = [], []
    for _ in range(1 if quick else 2):
        with tempfile.TemporaryDirectory() as folder:
            data = str(Path(folder) / "decode.npz")
            args = ["--data", data, "--tokens", str(tokens)]
            env = {"JAX_PLATFORMS": "cpu"}
            a = json_of_process([ours_python, __file__, "--side", "jaxkeras", *args], env)
            b = json_of_process([theirs_python, __file__, "--side", "tf_keras", *args], env)
        assert a["sequences"] == b["sequences"], "jaxkeras and TF-Keras decoded different tokens"
        ours.append(a["total_s"])
        theirs.append(b["total_s"])
    calls = len(a["steps_s"])
    return [
        ratio_row(
            f"decode: {calls} `predict` calls of a new shape each (LSTM {UNITS}, {PROMPTS} "
            f"prompts, {tokens} tokens)",
            ours,
            theirs,
            1.0,
            "fresh processes, no compilation cache; vs TF-Keras's predict; build excluded",
        )
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--side", choices=["jaxkeras", "tf_keras"])
    parser.add_argument("--data")
    parser.add_argument("--tokens", type=int, default=TOKENS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(run_side(args.side, args.data, args.tokens)))
    else:
        print(markdown_table(main(args.quick)))
