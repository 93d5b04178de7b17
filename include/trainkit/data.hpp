#pragma once
// Data: the loader, samplers, datasets (in-memory, torch::data, MNIST,
// CIFAR) and batched transforms. Opt-in: trainkit.hpp has only the
// in-memory batches.
#include "trainkit/data/batch.hpp"
#include "trainkit/data/batch_view.hpp"
#include "trainkit/data/cifar.hpp"
#include "trainkit/data/collate.hpp"
#include "trainkit/data/curriculum_sampler.hpp"
#include "trainkit/data/distributed_sampler.hpp"
#include "trainkit/data/files.hpp"
#include "trainkit/data/loader.hpp"
#include "trainkit/data/mnist.hpp"
#include "trainkit/data/random_sampler.hpp"
#include "trainkit/data/repeat_factor_sampler.hpp"
#include "trainkit/data/seed.hpp"
#include "trainkit/data/sequential_sampler.hpp"
#include "trainkit/data/tensor_dataset.hpp"
#include "trainkit/data/torch_dataset.hpp"
#include "trainkit/data/transforms.hpp"
#include "trainkit/data/weighted_sampler.hpp"
