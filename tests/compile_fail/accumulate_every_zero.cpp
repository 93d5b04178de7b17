// Must not compile: zero micro-batches per step.
#include <trainkit/trainkit.hpp>

trainkit::accumulate::Every<0> zero;
