# tests/fuzz/targets.sh — what run.sh and long.sh share (sourced).
# The targets, and each one's input size cap: 64 KiB, but 8 KiB for zmtp,
# whose inputs go through a real socket (a 28 KiB input took ~30 ms
# against ~0.1 ms for short ones, and reaches no state a short one misses;
# frames of 64 KiB and more, read into their own buffers, are unit.zmtp's).
fuzz_targets=(wire sched compute zmtp npy mtx plink zarr tsv)
max_len() { if [ "$1" = zmtp ]; then echo 8192; else echo 65536; fi; }
