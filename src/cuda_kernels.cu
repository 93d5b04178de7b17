// trainkit's compiled CUDA part (target trainkit_cuda_kernels, opt-in): the
// kernels that a header cannot give a C++ compiler. Linking the target
// defines TRAINKIT_HAS_FUSED_KERNELS, which turns their use on in the headers.
#include "trainkit/layers/detail/batch_norm_act_kernels.cuh"
