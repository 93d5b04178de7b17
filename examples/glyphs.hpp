#pragma once
// The examples' built-in dataset (not part of the library): 10 classes of 28x28 digit-like glyphs,
// drawn as anti-aliased strokes under a random affine map (rotation, scale, shear, shift), random
// stroke width and intensity, jittered vertices, a stray stroke, and Gaussian noise. Deterministic
// for a seed on every platform (own PRNG, one stream per sample), hard enough that a linear model
// trails a small CNN clearly.
#include <ATen/Parallel.h>
#include <torch/types.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <utility>
#include <vector>

#include <trainkit/data/tensor_dataset.hpp>

namespace examples {

namespace detail {

struct Rng {  // splitmix64: tiny, portable, good enough for augmentation
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform(double lo = 0.0, double hi = 1.0) {
    return lo + (hi - lo) * double(next() >> 11) * 0x1.0p-53;
  }
  double normal() {
    const double u = uniform(1e-12, 1.0), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * v);
  }
};

struct Point {
  double x, y;
};
using Stroke = std::vector<Point>;

inline Stroke ellipse(double cx, double cy, double rx, double ry, int n = 16) {
  Stroke s;
  for (int i = 0; i <= n; ++i) {
    const double a = 2.0 * std::numbers::pi * i / n;
    s.push_back({cx + rx * std::cos(a), cy + ry * std::sin(a)});
  }
  return s;
}

/// Strokes of each class in the unit square (x right, y down).
inline const std::array<std::vector<Stroke>, 10>& glyph_strokes() {
  static const std::array<std::vector<Stroke>, 10> glyphs = {{
      {ellipse(0.5, 0.5, 0.27, 0.38)},
      {{{0.35, 0.25}, {0.5, 0.12}, {0.5, 0.88}}, {{0.35, 0.88}, {0.65, 0.88}}},
      {{{0.25, 0.3},
        {0.38, 0.15},
        {0.6, 0.13},
        {0.75, 0.3},
        {0.7, 0.45},
        {0.25, 0.88},
        {0.78, 0.88}}},
      {{{0.25, 0.18}, {0.6, 0.12}, {0.75, 0.28}, {0.55, 0.48}, {0.42, 0.48}},
       {{0.55, 0.48}, {0.77, 0.66}, {0.62, 0.86}, {0.25, 0.84}}},
      {{{0.62, 0.88}, {0.62, 0.12}, {0.22, 0.65}, {0.8, 0.65}}},
      {{{0.75, 0.12},
        {0.3, 0.12},
        {0.28, 0.45},
        {0.55, 0.42},
        {0.75, 0.58},
        {0.7, 0.82},
        {0.45, 0.88},
        {0.25, 0.8}}},
      {{{0.7, 0.15},
        {0.45, 0.2},
        {0.3, 0.45},
        {0.28, 0.7},
        {0.45, 0.88},
        {0.68, 0.8},
        {0.72, 0.62},
        {0.55, 0.5},
        {0.3, 0.58}}},
      {{{0.22, 0.12}, {0.78, 0.12}, {0.42, 0.88}}},
      {ellipse(0.5, 0.3, 0.2, 0.17), ellipse(0.5, 0.68, 0.25, 0.2)},
      {ellipse(0.5, 0.33, 0.22, 0.2), {{0.72, 0.33}, {0.68, 0.88}}},
  }};
  return glyphs;
}

inline double segment_distance(Point p, Point a, Point b) {
  const double dx = b.x - a.x, dy = b.y - a.y;
  const double len2 = dx * dx + dy * dy;
  double t = len2 > 0 ? ((p.x - a.x) * dx + (p.y - a.y) * dy) / len2 : 0.0;
  t = std::clamp(t, 0.0, 1.0);
  const double ex = a.x + t * dx - p.x, ey = a.y + t * dy - p.y;
  return std::sqrt(ex * ex + ey * ey);
}

inline void draw_glyph(float* image, int label, uint64_t sample_seed) {
  constexpr int side = 28;
  Rng rng{sample_seed};
  const double angle = rng.uniform(-0.35, 0.35), scale = rng.uniform(0.75, 1.15);
  const double aspect = rng.uniform(0.85, 1.15), shear = rng.uniform(-0.3, 0.3);
  const double tx = rng.uniform(-0.12, 0.12), ty = rng.uniform(-0.12, 0.12);
  const double width = rng.uniform(0.9, 2.6), ink = rng.uniform(0.6, 1.0);
  const double noise = rng.uniform(0.05, 0.25);
  const double c = std::cos(angle), s = std::sin(angle);
  const double a11 = scale * aspect * c, a12 = scale * (shear * c - s);
  const double a21 = scale * aspect * s, a22 = scale * (shear * s + c);
  auto to_pixels = [&](Point p) {
    const double x = p.x - 0.5 + rng.normal() * 0.02, y = p.y - 0.5 + rng.normal() * 0.02;
    return Point{(a11 * x + a12 * y + 0.5 + tx) * side, (a21 * x + a22 * y + 0.5 + ty) * side};
  };
  std::vector<std::pair<Point, Point>> segments;
  for (const auto& stroke : glyph_strokes()[label]) {
    Point prev = to_pixels(stroke.front());
    for (size_t i = 1; i < stroke.size(); ++i) {
      const Point next = to_pixels(stroke[i]);
      segments.emplace_back(prev, next);
      prev = next;
    }
  }
  const Point stray_a{rng.uniform(0, side), rng.uniform(0, side)};
  const Point stray_b{stray_a.x + rng.uniform(-8, 8), stray_a.y + rng.uniform(-8, 8)};
  const double stray_ink = rng.uniform() < 0.5 ? rng.uniform(0.3, 0.7) : 0.0;
  for (int py = 0; py < side; ++py) {
    for (int px = 0; px < side; ++px) {
      const Point p{px + 0.5, py + 0.5};
      double d = 1e9;
      for (const auto& [a, b] : segments) d = std::min(d, segment_distance(p, a, b));
      double v = ink * std::clamp(width / 2 + 0.5 - d, 0.0, 1.0);
      v = std::max(v,
                   stray_ink * std::clamp(1.0 - segment_distance(p, stray_a, stray_b), 0.0, 1.0));
      v += noise * rng.normal();
      image[py * side + px] = static_cast<float>((std::clamp(v, 0.0, 1.0) - 0.2) / 0.3);
    }
  }
}

}  // namespace detail

/// `n` glyph images [n, 1, 28, 28] (roughly zero mean, unit variance) with
/// labels [n] (int64, balanced); sample i depends only on (seed, i).
inline trainkit::data::TensorDataset make_glyphs(int64_t n, uint64_t seed = 0) {
  auto images = at::empty({n, 1, 28, 28}, at::kFloat);
  auto labels = at::empty({n}, at::kLong);
  float* img = images.data_ptr<float>();
  int64_t* lab = labels.data_ptr<int64_t>();
  at::parallel_for(0, n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      detail::Rng mix{seed * 0x2545F4914F6CDD1DULL + static_cast<uint64_t>(i)};
      const uint64_t sample_seed = mix.next();
      const int label = static_cast<int>(sample_seed % 10);
      lab[i] = label;
      detail::draw_glyph(img + i * 28 * 28, label, sample_seed);
    }
  });
  return {images, labels};
}

}  // namespace examples
