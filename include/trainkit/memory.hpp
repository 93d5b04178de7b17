#pragma once
// Memory for speed (opt-in): activation checkpointing (a function, or a
// Sequential in checkpointed segments), a meter of CPU tensor bytes, and
// the bytes a trainer holds between steps.
#include "trainkit/memory/checkpoint.hpp"
#include "trainkit/memory/cpu_meter.hpp"
#include "trainkit/memory/footprint.hpp"
