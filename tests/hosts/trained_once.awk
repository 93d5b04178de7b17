# Whether epoch 0 trained each sample once across restarts:
#   awk -v samples=N -f trained_once.awk OUT/seen.*
# Files: tests/hosts/fault_worker.cpp's records, OUT/seen.A.W.S.R for rank R
# of a run segment (attempt A, world size W, resumed at step S), a line per
# step: ` i i ... | STEP EPOCH`. A segment's steps count up to the step the
# next segment resumed at: the later steps went with it. Segments follow
# each other in the order of (A, S, W): restarts raise A, checkpoints S, and
# within an attempt the world only grows (a host joining late makes torchrun
# restart its group without counting an attempt).
FNR == 1 {
  n = split(FILENAME, part, ".")
  segment = part[n - 3] "." part[n - 2] "." part[n - 1]
  if (!(segment in start)) {
    attempt[segment] = part[n - 3] + 0
    world[segment] = part[n - 2] + 0
    start[segment] = part[n - 1] + 0
    ++segments
  }
}
{
  if (split($0, half, "|") != 2) next  # a step cut short by the kill
  split(half[2], at, " ")
  if (at[2] != 0) next
  ++records
  record_segment[records] = segment
  record_step[records] = at[1] + 0
  record_indices[records] = half[1]
}
function before(s, t) {  # whether segment s ran before segment t
  if (attempt[s] != attempt[t]) return attempt[s] < attempt[t]
  if (start[s] != start[t]) return start[s] < start[t]
  return world[s] < world[t]
}
END {
  last = ""
  for (s in start) {
    until[s] = -1  # the last segment: to the end
    for (t in start) {
      if (t != s && before(s, t) && (until[s] < 0 || start[t] < until[s])) until[s] = start[t]
    }
    if (last == "" || before(last, s)) last = s
  }
  for (s in start) {
    if (until[s] < start[s] && until[s] >= 0) {
      print "segment", s, "resumed at step", start[s], "but its successor at", until[s]
      exit 1
    }
  }
  for (r = 1; r <= records; ++r) {
    s = record_segment[r]
    if (until[s] >= 0 && record_step[r] > until[s]) continue
    if (s == last) last_trained_epoch_0 = 1
    k = split(record_indices[r], indices, " ")
    for (i = 1; i <= k; ++i) count[indices[i]]++
  }
  for (s in start) {
    printf "segment: attempt %d, %d ranks, from step %d to %s\n", attempt[s], world[s], start[s],
           until[s] < 0 ? "the end" : "step " until[s]
  }
  if (segments < 2) {
    print "one segment only: nothing was interrupted"
    exit 1
  }
  if (!last_trained_epoch_0) {
    print "the last segment trained no step of epoch 0: the interruption was not mid-epoch"
    exit 1
  }
  for (i = 0; i < samples; ++i) {
    if (count[i] != 1 && ++bad <= 4) print "sample", i, "trained", count[i] + 0, "times"
  }
  for (i in count) ++distinct
  exit bad > 0 || distinct != samples
}
