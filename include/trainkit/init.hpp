#pragma once
// Weight initialisation (opt-in): schemes for a tensor (Kaiming, Xavier,
// orthogonal, truncated normal; torch.nn.init's draws), a whole model by
// module type, the zero-initialised last norm of a residual block and a
// classifier's bias prior.
#include "trainkit/init/model.hpp"
#include "trainkit/init/schemes.hpp"
