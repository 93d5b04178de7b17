#pragma once
// Files: atomic replacement, checkpoints, safetensors, PyTorch's torch.save
// format, and pretrained weights from any of them.
#include "trainkit/io/atomic_file.hpp"
#include "trainkit/io/checkpoint.hpp"
#include "trainkit/io/safetensors.hpp"
#include "trainkit/io/torch_save.hpp"
#include "trainkit/io/weights.hpp"
