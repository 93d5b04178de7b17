# Whether epoch 0 trained each sample once across a restart:
#   awk -v step=S -v samples=N -f trained_once.awk OUT/seen.0.* OUT/seen.1.*
# Files: tests/hosts/fault_worker.cpp's records, a line per step, ` i i ... |
# STEP EPOCH`; seen.0.* the first attempt's, which counts up to the
# checkpoint at STEP only, the others the restarted attempt's.
FNR == 1 { restarted = FILENAME !~ /seen\.0\.[0-9]+$/ }
{
  if (split($0, half, "|") != 2) next  # a step cut short by the kill
  split(half[2], at, " ")
  if (at[2] != 0 || (!restarted && at[1] > step)) next
  k = split(half[1], indices, " ")
  for (i = 1; i <= k; ++i) count[indices[i]]++
}
END {
  for (i = 0; i < samples; ++i) {
    if (count[i] != 1 && ++bad <= 4) print "sample", i, "trained", count[i] + 0, "times"
  }
  for (i in count) ++distinct
  exit bad > 0 || distinct != samples
}
