"""TensorFlow 2.x (Keras, CPU) peer of train_bench: the same model, batch and thread
count in NHWC (TensorFlow's CPU layout), softmax cross-entropy and a plain SGD step
compiled into one graph (tf.function); at bf16 Keras' mixed_bfloat16 policy.
Usage: tf_bench.py MODEL BATCH THREADS STEPS [WARMUP [PRECISION]]"""
import os
import sys

from peer_steps import time_steps

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402
from tensorflow import keras  # noqa: E402
from tensorflow.keras import layers  # noqa: E402


def shortcut_a(x, planes, stride):
    pad = (planes - x.shape[-1]) // 2
    return layers.Lambda(lambda t: tf.pad(t[:, ::stride, ::stride, :], [[0, 0], [0, 0], [0, 0], [pad, pad]]))(x)


def conv_bn(x, planes, stride, relu):
    x = layers.Conv2D(planes, 3, stride, padding="same", use_bias=False)(x)
    x = layers.BatchNormalization(epsilon=1e-5, momentum=0.9)(x)
    return layers.ReLU()(x) if relu else x


def cifar_resnet(n, classes=10):
    inp = keras.Input((32, 32, 3))
    h = conv_bn(inp, 16, 1, True)
    cin = 16
    for stage in range(3):
        planes = 16 << stage
        for b in range(n):
            stride = 2 if b == 0 and stage > 0 else 1
            r = conv_bn(conv_bn(h, planes, stride, True), planes, 1, False)
            sc = shortcut_a(h, planes, stride) if stride != 1 or cin != planes else h
            h = layers.ReLU()(layers.Add()([r, sc]))
            cin = planes
    h = layers.GlobalAveragePooling2D()(h)
    out = layers.Dense(classes, dtype="float32")(h)
    return keras.Model(inp, out)


def model(name):
    if name == "resnet50":
        return keras.applications.ResNet50(weights=None, input_shape=(224, 224, 3), classes=1000,
                                           classifier_activation=None), (224, 224, 3), 1000
    if name == "resnet20":
        return cifar_resnet(3), (32, 32, 3), 10
    if name == "mnist_cnn":
        return keras.Sequential([
            keras.Input((28, 28, 1)), layers.Conv2D(32, 3, activation="relu"),
            layers.Conv2D(64, 3, activation="relu"), layers.MaxPooling2D(2), layers.Dropout(0.25),
            layers.Flatten(), layers.Dense(128, activation="relu"), layers.Dropout(0.5),
            layers.Dense(10, dtype="float32")]), (28, 28, 1), 10
    raise SystemExit(f"tf_bench: no peer for model {name}")


def main():
    name, batch, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    warmup = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    precision = sys.argv[6] if len(sys.argv) > 6 else "f32"
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    if precision == "bf16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    tf.random.set_seed(1)
    net, shape, classes = model(name)
    n = batch * shape[0] * shape[1] * shape[2]
    x = tf.reshape(tf.sin(tf.range(n, dtype=tf.float32) * 0.37), (batch, *shape))
    y = tf.range(batch) % classes
    opt = keras.optimizers.SGD(learning_rate=1e-4)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, net(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
        return loss

    time_steps(lambda: float(step(x, y)), batch, steps, warmup, f"tensorflow {tf.__version__}")


main()
