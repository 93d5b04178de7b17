#pragma once
// memory::CpuMeter: how many bytes CPU tensors hold, now and at the peak,
// while it exists, and optionally a limit past which allocations fail as a
// device's do when it is full (c10::OutOfMemoryError). LibTorch's CPU
// allocator keeps no statistics (CUDA's caching allocator does), so the
// meter puts a counting allocator in front of the current one and takes it
// out again when it goes. Tensors allocated while it counted are uncounted
// when freed, whenever that is.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <new>

#include "trainkit/detail/compat.hpp"
#include "trainkit/error.hpp"

namespace trainkit::memory {

namespace detail {

// LibTorch 2.3 made Allocator::allocate non-const and added copy_data
// (compiled against 1.13 and 2.6).
#if TRAINKIT_TORCH_AT_LEAST(2, 3)
#define TRAINKIT_ALLOCATE_CONST
#else
#define TRAINKIT_ALLOCATE_CONST const
#endif

class CountingAllocator final : public c10::Allocator {
 public:
  static CountingAllocator& instance() {
    static auto* a = new CountingAllocator;  // never destroyed: deleters outlive meters
    return *a;
  }
  c10::DataPtr allocate(size_t n) TRAINKIT_ALLOCATE_CONST override {
    const auto bytes = static_cast<int64_t>(n);
    // Counted before the check, so threads allocating at once cannot pass the limit together.
    const int64_t now = now_.fetch_add(bytes) + bytes;
    const int64_t limit = limit_.load();
    if (limit >= 0 && now > limit) {
      now_.fetch_sub(bytes);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "trainkit: memory::CpuMeter: allocating ", n,
                       " bytes would go past the meter's limit of ", limit - limit_base_.load(),
                       " bytes (", now - bytes - limit_base_.load(), " held)");
    }
    for (int64_t peak = peak_.load(); now > peak && !peak_.compare_exchange_weak(peak, now);) {
    }
    try {
      if (base_->raw_deleter() != nullptr) {
        // ATen's kernels take scratch memory through raw_allocate, which
        // needs a pointer that is its own context: the count goes in a
        // header before the data.
        auto* block = static_cast<char*>(base_->raw_allocate(n + kHeader));
        new (block) Header{bytes, base_->raw_deleter()};
        return {block + kHeader, block + kHeader, &release_raw, c10::Device(c10::kCPU)};
      }
      c10::DataPtr inner = base_->allocate(n);
      void* data = inner.get();
      const auto device = inner.device();
      return {data, new Held{std::move(inner), bytes}, &release, device};
    } catch (...) {
      now_.fetch_sub(bytes);
      throw;
    }
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return base_->raw_deleter() != nullptr ? &release_raw : nullptr;
  }
#if TRAINKIT_TORCH_AT_LEAST(2, 3)
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

  int64_t now() const {
    return now_.load();
  }
  int64_t peak() const {
    return peak_.load();
  }
  void reset_peak() {
    peak_.store(now_.load());
  }
  /// Allocations past `base + bytes` held fail; a negative `bytes`: none do.
  void set_limit(int64_t base, int64_t bytes) {
    limit_base_.store(base);
    const int64_t most = std::numeric_limits<int64_t>::max();
    limit_.store(bytes < 0 ? -1 : bytes > most - base ? most : base + bytes);
  }
  c10::Allocator* base() const {
    return base_;
  }
  void set_base(c10::Allocator* base) {
    base_ = base;
  }

 private:
  struct Held {
    c10::DataPtr inner;
    int64_t bytes;
  };
  static void release(void* ctx) {
    auto* held = static_cast<Held*>(ctx);
    instance().now_.fetch_sub(held->bytes);
    delete held;  // frees through the inner allocator's deleter
  }
  struct Header {
    int64_t bytes;
    c10::DeleterFnPtr free_block;  ///< the base allocator's raw deleter
  };
  static constexpr size_t kHeader = 64;  // keeps the data at the base's 64-byte alignment
  static_assert(sizeof(Header) <= kHeader);
  static void release_raw(void* data) {
    auto* block = static_cast<char*>(data) - kHeader;
    const auto header = *reinterpret_cast<Header*>(block);
    instance().now_.fetch_sub(header.bytes);
    header.free_block(block);
  }
  c10::Allocator* base_ = nullptr;
  // allocate() is const before LibTorch 2.3
  mutable std::atomic<int64_t> now_{0}, peak_{0}, limit_{-1}, limit_base_{0};
};
#undef TRAINKIT_ALLOCATE_CONST

}  // namespace detail

/// Counts CPU tensor bytes from construction to destruction. One at a time
/// per process (the CPU allocator is process-wide).
class CpuMeter {
 public:
  CpuMeter() : counter_(detail::CountingAllocator::instance()) {
    if (c10::GetCPUAllocator() == &counter_)
      throw Error("trainkit: memory::CpuMeter: another meter is counting already");
    counter_.set_base(c10::GetCPUAllocator());
    start_ = counter_.now();
    counter_.reset_peak();
    c10::SetCPUAllocator(&counter_, kPriority);
  }
  ~CpuMeter() {
    counter_.set_limit(0, -1);
    c10::SetCPUAllocator(counter_.base(), kPriority);
  }
  CpuMeter(const CpuMeter&) = delete;
  CpuMeter& operator=(const CpuMeter&) = delete;

  /// Bytes allocated since the meter began and not yet freed.
  int64_t bytes() const { return counter_.now() - start_; }
  /// The most `bytes()` has been since the meter began (or reset_peak()).
  int64_t peak_bytes() const { return std::max<int64_t>(0, counter_.peak() - start_); }
  /// Starts the peak again from the bytes held now.
  void reset_peak() { counter_.reset_peak(); }
  /// From now on an allocation that would take bytes() past `bytes` throws
  /// c10::OutOfMemoryError instead (a negative `bytes`: no limit, the
  /// default). Process-wide, as the meter is: every thread's CPU tensors
  /// count and can fail.
  void set_limit(int64_t bytes) { counter_.set_limit(start_, bytes); }

 private:
  // Above the default allocator's registration (0), so it takes effect; the
  // base goes back with the same priority.
  static constexpr uint8_t kPriority = 1;
  detail::CountingAllocator& counter_;
  int64_t start_ = 0;
};

}  // namespace trainkit::memory
