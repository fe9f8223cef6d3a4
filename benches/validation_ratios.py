#!/usr/bin/env python3
"""The validator bench's ratios from criterion's own samples, robust to a noisy machine.

criterion reports each contender's mean; on a shared or throttled machine a
burst of interference during one contender's samples moves that mean, and
so the ratio between two contenders, by a fifth or more from run to run.
Each of criterion's samples is a batch of iterations timed together
(`sample.json`: `iters` and `times`); the fastest batch of each contender
is the one least disturbed, so the ratio of the fastest batches moves far
less. This prints both, for every body of `conversion_validation`:

    VALIDATION_BENCH_CPU_TIME=1 cargo bench --bench validation -- conversion_validation \\
        --warm-up-time 2 --measurement-time 5
    python3 benches/validation_ratios.py [CRITERION_DIR]

CRITERION_DIR defaults to `$CARGO_TARGET_DIR/criterion`, else
`target/criterion`.
"""

import json
import os
import statistics
import sys

GROUP = "conversion_validation"
BODIES = ["minimal", "typical", "full", "invalid"]


def per_iteration(directory, contender, body):
    """The nanoseconds an iteration took in each sample of the last run."""
    path = os.path.join(directory, GROUP, contender, body, "new", "sample.json")
    with open(path) as file:
        sample = json.load(file)
    return [time / iters for iters, time in zip(sample["iters"], sample["times"])]


def main():
    default = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "criterion")
    directory = sys.argv[1] if len(sys.argv) > 1 else default
    print("| body | validate (fastest, median) | IgnoredAny (fastest, median) "
          "| vs IgnoredAny (fastest, median) | faster than jsonschema (fastest, median) |")
    print("|---|---|---|---|---|")
    for body in BODIES:
        ours = per_iteration(directory, "validate_conversion", body)
        floor = per_iteration(directory, "ignored_any", body)
        schema = per_iteration(directory, "serde_value+jsonschema", body)
        fastest = [min(ours), min(floor), min(schema)]
        median = [statistics.median(ours), statistics.median(floor), statistics.median(schema)]
        print(f"| {body} | {fastest[0]:.0f} ns, {median[0]:.0f} ns "
              f"| {fastest[1]:.0f} ns, {median[1]:.0f} ns "
              f"| {fastest[0] / fastest[1]:.2f}x, {median[0] / median[1]:.2f}x "
              f"| {fastest[2] / fastest[0]:.1f}x, {median[2] / median[0]:.1f}x |")


if __name__ == "__main__":
    main()
