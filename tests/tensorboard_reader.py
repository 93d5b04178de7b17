#!/usr/bin/env python3
"""Reads trainkit's TensorBoard event files with TensorBoard's own
EventAccumulator: scalars, histograms, the config text and the HParams
session records. Exits 77 (CTest: skipped) when the `tensorboard` package is
absent. Usage: tensorboard_reader.py RUN_DIR (reads its newest event file)"""
import glob
import os
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2
except ImportError as e:
    print(f"SKIPPED: Python's tensorboard package is not installed ({e})")
    sys.exit(77)


def main(run_dir):
    newest = max(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")), key=os.path.getmtime)
    acc = EventAccumulator(newest, size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    problems = []
    for tag in ("train/loss", "train/lr", "train/samples_per_s", "epoch/val_loss"):
        if tag not in tags["scalars"]:
            problems.append(f"scalar {tag} missing (have {tags['scalars']})")
    if "train/loss" in tags["scalars"]:
        steps = [e.step for e in acc.Scalars("train/loss")]
        if steps != sorted(steps) or len(steps) < 2 or steps[0] != 10:
            problems.append(f"train/loss steps {steps}")
    if not any(t.startswith("weights/") for t in tags["histograms"]):
        problems.append(f"no weight histograms (have {tags['histograms']})")
    for h in acc.Histograms(tags["histograms"][0]) if tags["histograms"] else []:
        if sum(h.histogram_value.bucket) != h.histogram_value.num:
            problems.append(f"histogram buckets do not add up at step {h.step}")
    if "config" not in tags["tensors"]:
        problems.append(f"no config text (tensors: {tags['tensors']})")
    else:
        text = acc.Tensors("config")[0].tensor_proto.string_val[0].decode()
        if "trainkit::optim::AdamW" not in text:
            problems.append(f"config text: {text[:200]}")
    meta = acc.SummaryMetadata("_hparams_/session_start_info")
    data = plugin_data_pb2.HParamsPluginData.FromString(meta.plugin_data.content)
    if meta.plugin_data.plugin_name != "hparams" or "lr" not in data.session_start_info.hparams:
        problems.append(f"hparams session start: {data}")
    end = plugin_data_pb2.HParamsPluginData.FromString(
        acc.SummaryMetadata("_hparams_/session_end_info").plugin_data.content)
    if end.session_end_info.status != 1:
        problems.append(f"hparams session end: {end}")
    for p in problems:
        print("FAIL:", p)
    if problems:
        sys.exit(1)
    print(f"ok: {len(tags['scalars'])} scalar tags, {len(tags['histograms'])} histograms, "
          "config text and hparams session records read by TensorBoard's EventAccumulator")


if __name__ == "__main__":
    main(sys.argv[1])
