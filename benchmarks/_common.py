"""Machine description and result writing shared by the benchmark scripts."""

import json
import os
import platform


def machine():
    """What the numbers were measured on."""
    import tensorflow as tf

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "gpu": [d.name for d in tf.config.list_physical_devices("GPU")],
    }


def write_json(name, payload):
    folder = os.path.join(os.path.dirname(__file__), "results")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.json")
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    return path
