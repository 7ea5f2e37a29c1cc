// A log-linear latency histogram in the style of HdrHistogram: exact below 256, then 128
// linear sub-buckets per power of two, so every recorded value is known to within 1/128
// (< 0.8%) of itself, from 1 ns up to ~2^47 ns (~39 hours). Fixed size, no allocation after
// construction, O(1) record, mergeable by adding counts.
//
// Thread-compatible: one histogram per load thread, merged after the run.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace tollgate::loadgen {

/// Log-linear histogram of non-negative 64-bit values (nanoseconds here). Core-local.
class histogram {
 public:
  static constexpr unsigned sub_bits = 8;                     ///< exact range is [0, 2^sub_bits)
  static constexpr std::uint64_t sub_count = 1u << sub_bits;  ///< 256
  static constexpr std::uint64_t half = sub_count / 2;        ///< 128 buckets per power of two
  static constexpr unsigned max_shift = 40;                   ///< values above ~2^48 saturate
  static constexpr std::size_t bucket_count = sub_count + max_shift * half;

  /// Adds one sample. Values past the top range land in the last bucket (max stays exact).
  void record(std::uint64_t v) noexcept {
    counts_[index_of(v)]++;
    total_++;
    sum_ += v;
    if (v > max_) {
      max_ = v;
    }
    if (v < min_) {
      min_ = v;
    }
  }

  /// Adds every sample of `o` to this histogram.
  void merge(const histogram& o) noexcept {
    for (std::size_t i = 0; i < bucket_count; i++) {
      counts_[i] += o.counts_[i];
    }
    total_ += o.total_;
    sum_ += o.sum_;
    if (o.max_ > max_) {
      max_ = o.max_;
    }
    if (o.min_ < min_) {
      min_ = o.min_;
    }
  }

  /// The value at quantile q in [0, 1]: the highest value equivalent to the bucket that holds
  /// the ceil(q * count)-th smallest sample, clamped to the exact max. 0 when empty.
  std::uint64_t quantile(double q) const noexcept {
    if (total_ == 0) {
      return 0;
    }
    if (q <= 0) {
      return min_;
    }
    auto rank = static_cast<std::uint64_t>(q * static_cast<double>(total_) + 0.999999999);
    if (rank < 1) {
      rank = 1;
    }
    if (rank > total_) {
      rank = total_;
    }
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < bucket_count; i++) {
      seen += counts_[i];
      if (seen >= rank) {
        std::uint64_t hi = highest_equivalent(i);
        return hi < max_ ? hi : max_;
      }
    }
    return max_;
  }

  std::uint64_t count() const noexcept { return total_; }
  std::uint64_t max() const noexcept { return max_; }
  std::uint64_t min() const noexcept { return total_ ? min_ : 0; }
  double mean() const noexcept {
    return total_ ? static_cast<double>(sum_) / static_cast<double>(total_) : 0.0;
  }

  /// Bucket index of a value (exposed for tests).
  static std::size_t index_of(std::uint64_t v) noexcept {
    if (v < sub_count) {
      return static_cast<std::size_t>(v);
    }
    // v in [half << e, sub_count << e) with e >= 1: bucket width 2^e.
    unsigned e = static_cast<unsigned>(std::bit_width(v)) - sub_bits;
    if (e > max_shift) {
      return bucket_count - 1;
    }
    return static_cast<std::size_t>(sub_count + (e - 1) * half + ((v >> e) - half));
  }

  /// The largest value that maps to bucket i (exposed for tests).
  static std::uint64_t highest_equivalent(std::size_t i) noexcept {
    if (i < sub_count) {
      return i;
    }
    std::size_t k = i - sub_count;
    unsigned e = static_cast<unsigned>(k / half) + 1;
    std::uint64_t sub = half + k % half;
    return ((sub + 1) << e) - 1;
  }

 private:
  std::array<std::uint64_t, bucket_count> counts_{};
  std::uint64_t total_ = 0;
  std::uint64_t sum_ = 0;
  std::uint64_t max_ = 0;
  std::uint64_t min_ = UINT64_MAX;
};

}  // namespace tollgate::loadgen
