#pragma once
// Precision policies: fp32, bf16 autocast, fp16 autocast with loss scaling.
#include "trainkit/precision/bf16.hpp"
#include "trainkit/precision/fp16.hpp"
#include "trainkit/precision/fp32.hpp"
#include "trainkit/precision/grad_scaler.hpp"
#include "trainkit/precision/unscaled.hpp"
