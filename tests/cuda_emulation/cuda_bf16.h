#pragma once
// See cuda_fp16.h here: it emulates both types.
#include "cuda_fp16.h"
