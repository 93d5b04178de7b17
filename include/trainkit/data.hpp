#pragma once
// Batches, in-memory datasets, the demo glyphs and MNIST.
#include "trainkit/data/batch.hpp"
#include "trainkit/data/batch_view.hpp"
#include "trainkit/data/glyphs.hpp"
#include "trainkit/data/mnist.hpp"
#include "trainkit/data/tensor_dataset.hpp"
