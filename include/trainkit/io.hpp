#pragma once
// Files: atomic replacement and the safetensors format.
#include "trainkit/io/atomic_file.hpp"
#include "trainkit/io/checkpoint.hpp"
#include "trainkit/io/safetensors.hpp"
