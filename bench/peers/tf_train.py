#!/usr/bin/env python3
"""TensorFlow peer of drtrain for the training-throughput benchmark (bench/train_throughput.sh).

One process (TensorFlow has no parameter-server mode that a user would pick on one host), the
same models as bench/peers/torch_train.py (mlp, mlp:784-H1-...-10, cnn; images NHWC, the layout
TensorFlow's CPU kernels want), the same loss (cross entropy, mean over the batch), optimizer
(SGD with momentum), data (synthetic, or Fashion-MNIST from the IDX .gz files, pixels / 255) and
per-epoch seeded order, and one JSON line with the measured samples/s:

  {"peer":"tf","model":..,"dataset":..,"ranks":1,"threads":..,"batch_size":..,"samples_per_s":..,"tf":..}

Its best settings are flags: --steps-per-call K runs K steps in one tf.function call (a graph
loop: no Python between the steps, as Keras' steps_per_execution), --xla compiles that function
with XLA (jit_compile=True). Each step gathers its batch from the data set in memory inside the
graph (as drtrain assembles its batches), so that cost is timed too.

samples/s = samples of the timed steps / their wall time; --warmup steps run first (rounded up to
whole calls, which also compiles the function) and are not timed; --steps is rounded up to whole
calls.

Run with the venv's interpreter: python=$(bench/peers/make_venv.sh tf); $python bench/peers/tf_train.py --help
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train import add_data_args, load_data, set_thread_env  # noqa: E402  (torch is not imported)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_data_args(p, "mlp | cnn | mlp:784-H1-...-10")
    p.add_argument("--threads", type=int, default=1, help="intra-op and inter-op threads")
    p.add_argument("--steps-per-call", type=int, default=1,
                   help="training steps per tf.function call (--steps and --warmup are rounded up to whole calls)")
    p.add_argument("--xla", action="store_true", help="compile the training function with XLA")
    a = p.parse_args(argv)
    if a.threads < 1 or a.steps < 1 or a.warmup < 0 or a.steps_per_call < 1 or a.batch_size < 1:
        p.error("--threads, --steps, --steps-per-call and --batch-size must be >= 1, --warmup >= 0")
    return a


def make_model(tf, name):
    layers = tf.keras.layers
    if name == "mlp":
        name = "mlp:784-512-256-10"
    if name.startswith("mlp:"):
        widths = [int(w) for w in name[4:].split("-")]
        body = [layers.Dense(w, activation="relu") for w in widths[1:-1]] + [layers.Dense(widths[-1])]
        return tf.keras.Sequential([tf.keras.Input(shape=(widths[0],))] + body)
    if name != "cnn":
        raise SystemExit(f"unknown --model {name} (the TensorFlow peer has mlp and cnn)")
    return tf.keras.Sequential([
        tf.keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(32, 5, padding="same", activation="relu"), layers.MaxPool2D(2),
        layers.Conv2D(64, 5, padding="same", activation="relu"), layers.MaxPool2D(2),
        layers.Flatten(), layers.Dense(512, activation="relu"), layers.Dense(10)])


def main():
    a = parse_args()
    set_thread_env(a.threads)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    tf.keras.utils.set_random_seed(a.seed)

    pixels, labels = load_data(a)
    if a.model == "cnn":
        pixels = pixels.reshape(-1, 28, 28, 1)
    images = tf.constant(pixels)
    targets = tf.constant(labels.astype(np.int32))
    count, batch, per_call = pixels.shape[0], a.batch_size, a.steps_per_call
    steps_per_epoch = count // batch  # the last partial batch of an epoch is dropped
    if steps_per_epoch < 1:
        raise SystemExit(f"{count} images are fewer than one batch of {batch}")

    model = make_model(tf, a.model)
    opt = tf.keras.optimizers.SGD(learning_rate=a.lr, momentum=a.momentum)
    loss_of = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt.build(model.trainable_variables)

    @tf.function(jit_compile=a.xla)
    def run_steps(indices):  # int32 [steps per call, batch]: the samples of each step
        loss = tf.constant(0.0)
        for k in tf.range(per_call):
            idx = indices[k]
            x, y = tf.gather(images, idx), tf.gather(targets, idx)
            with tf.GradientTape() as tape:
                loss = loss_of(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    perm, perm_epoch = None, -1

    def indices(first_step):
        nonlocal perm, perm_epoch
        rows = []
        for step in range(first_step, first_step + per_call):
            epoch, s = divmod(step, steps_per_epoch)
            if epoch != perm_epoch:
                perm = np.random.default_rng([a.seed, epoch]).permutation(count).astype(np.int32)
                perm_epoch = epoch
            rows.append(perm[s * batch:(s + 1) * batch])
        return tf.constant(np.stack(rows))

    warm_calls = -(-a.warmup // per_call) if a.warmup else 0
    timed_calls = -(-a.steps // per_call)
    step = 0
    for _ in range(max(warm_calls, 1)):  # at least one call: tracing and compiling are not timed
        float(run_steps(indices(step)))
        step += per_call
    t0 = time.perf_counter()
    loss = None
    for _ in range(timed_calls):
        loss = run_steps(indices(step))
        step += per_call
    final_loss = float(loss)  # waits for the last call
    wall = time.perf_counter() - t0
    timed = timed_calls * per_call
    print(json.dumps({
        "peer": "tf", "model": a.model, "dataset": a.dataset, "ranks": 1, "threads": a.threads,
        "batch_size": batch, "samples_per_s": timed * batch / wall, "tf": tf.__version__,
        "keras": tf.keras.__version__ if hasattr(tf.keras, "__version__") else "",
        "step_ms": 1e3 * wall / timed, "steps": timed, "warmup": max(warm_calls, 1) * per_call,
        "steps_per_call": per_call, "xla": a.xla, "wall_s": wall, "last_loss": final_loss,
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
    }), flush=True)


if __name__ == "__main__":
    main()
