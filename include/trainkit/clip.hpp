#pragma once
// Gradient clipping policies.
#include "trainkit/clip/none.hpp"
#include "trainkit/clip/norm.hpp"
#include "trainkit/clip/value.hpp"
