#pragma once
// Memory for speed (opt-in): activation checkpointing (a function, or a
// Sequential in checkpointed segments) and a meter of CPU tensor bytes.
#include "trainkit/memory/checkpoint.hpp"
#include "trainkit/memory/cpu_meter.hpp"
