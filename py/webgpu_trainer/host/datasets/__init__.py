"""Dataset preparation (CPython: numpy, Pillow): readers return ``Arrays``; ``store`` writes a
dataset folder (manifest + shards). See /work/wt/DATASETS.md's "Preparation side"."""
