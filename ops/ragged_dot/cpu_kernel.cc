// ragged_dot on CPU: kernel bodies (packing, K-blocked tile products, output conversion).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   tm, tn, tk   tile extents of M, N, K (from the work list)
//   nk     K blocks per task: ceil(K / tk)
//
// Each task owns an output tile [tm, tn] of one group and walks K in blocks of tk:
//   1. pack lhs[m tile, k block] -> lhs_tile [tm, tk] and rhs[g, k block, n tile] ->
//      rhs_tile [tk, tn], converting to the accumulation type once, so the inner loop runs on
//      contiguous, aligned floats whatever the storage dtype (bf16/f16 widening costs 1/tm of
//      the multiply-adds instead of one conversion per multiply-add);
//   2. acc_tile += lhs_tile @ rhs_tile in the micro-kernel;
//   3. after the last block, convert acc_tile to the output dtype (one rounding per output).
// The rhs panel (tk * tn accumulators) is sized by the heuristics to stay in L2 while every row
// of the tile streams over it; a few accumulator rows of tn stay in L1.
#include "ops/ragged_dot/cpu_kernel.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <new>
#include <string>
#include <type_traits>

#include "backends/cpu/thread_pool.h"
#include "ops/errors.h"

namespace tokamax {
namespace {

constexpr size_t kAlignment = 64;  // a cache line; also the widest SIMD register (AVX-512)

size_t round_up(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// Per-thread scratch that only grows. Pool threads are persistent, so after the first call a
// kernel launch allocates nothing: fresh multi-megabyte allocations would come from mmap and
// page-fault on first touch, a cost that shows up on every small call.
void* thread_scratch(size_t bytes) {
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buffer;
  if (bytes > buffer.bytes) {
    std::free(buffer.data);
    buffer.bytes = 0;
    buffer.data = std::aligned_alloc(kAlignment, round_up(bytes));
    if (buffer.data == nullptr) throw std::bad_alloc();
    buffer.bytes = round_up(bytes);
  }
  return buffer.data;
}

// Storage element -> accumulation type. bf16 widens by a shift (inline, unlike the library's
// out-of-line conversion); every bf16/f16 value is exact in f32, so packing loses nothing.
template <typename Acc, typename T>
inline Acc to_acc(T x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return static_cast<Acc>(std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16));
  } else if constexpr (std::is_same_v<T, f16>) {
    return static_cast<Acc>(f16_to_float(x));
  } else {
    return static_cast<Acc>(x);
  }
}

// Copies a [rows, cols] block of a row-major array into a packed tile, converting to Acc.
template <typename Acc, typename T>
void pack_tile(
    // Inputs.
    const T* src, int64_t src_stride,  // [rows, cols] block of a full array
    int64_t rows, int64_t cols,
    // Outputs.
    Acc* dst, int64_t dst_stride) {  // [rows, cols] packed tile
  for (int64_t r = 0; r < rows; ++r) {
    const T* src_row = src + r * src_stride;
    Acc* dst_row = dst + r * dst_stride;
    for (int64_t c = 0; c < cols; ++c) dst_row[c] = to_acc<Acc>(src_row[c]);
  }
}

// The micro-kernel: acc[m, n] += sum_k lhs[m, k] * rhs[k, n] over one K block, each output
// summing its terms in k order. This is the one function a SIMD version replaces.
//
// Four rows at a time: each rhs row loaded from L2/L1 feeds four accumulator rows, cutting
// loads per multiply-add from 2 to 1.25; the n loop is unit-stride over restrict pointers so the
// compiler vectorizes it at whatever width the build targets.
template <typename Acc>
void micro_kernel(
    // Inputs.
    const Acc* __restrict lhs, int64_t lhs_stride,  // [rows, depth] packed tile of [tm, tk]
    const Acc* __restrict rhs, int64_t rhs_stride,  // [depth, cols] packed tile of [tk, tn]
    int64_t rows, int64_t depth, int64_t cols,
    // Outputs.
    Acc* __restrict acc, int64_t acc_stride) {  // [rows, cols] tile of [tm, tn]
  int64_t m = 0;
  for (; m + 4 <= rows; m += 4) {
    Acc* __restrict c0 = acc + (m + 0) * acc_stride;
    Acc* __restrict c1 = acc + (m + 1) * acc_stride;
    Acc* __restrict c2 = acc + (m + 2) * acc_stride;
    Acc* __restrict c3 = acc + (m + 3) * acc_stride;
    for (int64_t k = 0; k < depth; ++k) {
      const Acc a0 = lhs[(m + 0) * lhs_stride + k];
      const Acc a1 = lhs[(m + 1) * lhs_stride + k];
      const Acc a2 = lhs[(m + 2) * lhs_stride + k];
      const Acc a3 = lhs[(m + 3) * lhs_stride + k];
      const Acc* __restrict b = rhs + k * rhs_stride;
      for (int64_t n = 0; n < cols; ++n) {
        c0[n] += a0 * b[n];
        c1[n] += a1 * b[n];
        c2[n] += a2 * b[n];
        c3[n] += a3 * b[n];
      }
    }
  }
  for (; m < rows; ++m) {  // the last rows of a group's partial tile
    Acc* __restrict c = acc + m * acc_stride;
    for (int64_t k = 0; k < depth; ++k) {
      const Acc a = lhs[m * lhs_stride + k];
      const Acc* __restrict b = rhs + k * rhs_stride;
      for (int64_t n = 0; n < cols; ++n) c[n] += a * b[n];
    }
  }
}

// One task of the work list.
template <typename Acc, typename In, typename Out>
void run_task(const RaggedDotTask& task, const RaggedDotWorkList& work, int64_t K, int64_t N,
              // Inputs.
              const In* lhs,  // [M, K], full array
              const In* rhs,  // [G, K, N], full array
              // Outputs.
              Out* out) {  // [M, N], full array
  const int64_t rows = task.m_end - task.m_start, cols = task.n_end - task.n_start;
  if (task.group == kZeroRowsTask) {
    // The zero tasks cover whole rows, so this is one contiguous fill (a memset: Out{} is +0.0).
    std::fill_n(out + task.m_start * N, rows * N, Out{});
    return;
  }
  const int64_t tm = work.tm, tn = work.tn, tk = work.tk;
  // Scratch.
  const size_t lhs_bytes = round_up(static_cast<size_t>(tm * tk) * sizeof(Acc));
  const size_t rhs_bytes = round_up(static_cast<size_t>(tk * tn) * sizeof(Acc));
  const size_t acc_bytes = round_up(static_cast<size_t>(tm * tn) * sizeof(Acc));
  char* scratch = static_cast<char*>(thread_scratch(lhs_bytes + rhs_bytes + acc_bytes));
  Acc* lhs_tile = reinterpret_cast<Acc*>(scratch);                          // [tm, tk]
  Acc* rhs_tile = reinterpret_cast<Acc*>(scratch + lhs_bytes);              // [tk, tn]
  Acc* acc_tile = reinterpret_cast<Acc*>(scratch + lhs_bytes + rhs_bytes);  // [tm, tn]

  std::fill(acc_tile, acc_tile + rows * tn, Acc(0));
  const In* rhs_g = rhs + task.group * K * N;
  // K outermost across blocks keeps each output's sum in k order (the order the error bound and
  // the reference assume) while only one [tk, tn] panel is live at a time.
  for (int64_t k_i = 0; k_i < work.nk; ++k_i) {
    const int64_t k_start = k_i * tk, depth = std::min(tk, K - k_start);
    pack_tile(lhs + task.m_start * K + k_start, K, rows, depth, lhs_tile, tk);
    pack_tile(rhs_g + k_start * N + task.n_start, N, depth, cols, rhs_tile, tn);
    micro_kernel(lhs_tile, tk, rhs_tile, tn, rows, depth, cols, acc_tile, tn);
  }
  for (int64_t m = 0; m < rows; ++m) {
    const Acc* acc_row = acc_tile + m * tn;
    Out* out_row = out + (task.m_start + m) * N + task.n_start;
    // from_double rounds to nearest even; an f32 accumulator widens to double exactly.
    for (int64_t n = 0; n < cols; ++n) out_row[n] = from_double<Out>(acc_row[n]);
  }
}

void check_shape(const HostTensor& tensor, const std::vector<int64_t>& dims, const char* name) {
  if (tensor.dims() != dims) {
    throw InvalidArgument(std::string("ragged_dot cpu kernel: ") + name + " is " +
                              tensor.spec().to_string() + ", which does not match the problem",
                          name);
  }
}

}  // namespace

void ragged_dot_cpu_kernel(const RaggedDotProblem& p, const RaggedDotWorkList& work,
                           int num_threads, const HostTensor& lhs, const HostTensor& rhs,
                           HostTensor& out) {
  const int64_t G = p.G, M = p.M, K = p.K, N = p.N;
  check_shape(lhs, {M, K}, "lhs");
  check_shape(rhs, {G, K, N}, "rhs");
  check_shape(out, {M, N}, "out");
  if (lhs.dtype() != rhs.dtype()) {
    throw NotImplemented("cpu kernel needs lhs and rhs of one dtype");
  }
  dispatch_float(lhs.dtype(), [&](auto in_type) {
    using In = decltype(in_type);
    dispatch_float(out.dtype(), [&](auto out_type) {
      using Out = decltype(out_type);
      // f64 outputs accumulate in f64, like the reference; everything else in f32.
      using Acc = std::conditional_t<std::is_same_v<Out, double>, double, float>;
      if constexpr (std::is_same_v<In, double> && !std::is_same_v<Out, double>) {
        throw NotImplemented("cpu kernel: f64 inputs need an f64 output");
      } else {
        const In* lhs_data = lhs.data<In>();
        const In* rhs_data = rhs.data<In>();
        Out* out_data = out.data<Out>();
        cpu::parallel_for(static_cast<int64_t>(work.tasks.size()), num_threads,
                          [&](int64_t task, int /*thread*/) {
                            run_task<Acc>(work.tasks[static_cast<size_t>(task)], work, K, N,
                                          lhs_data, rhs_data, out_data);
                          });
      }
    });
  });
}

}  // namespace tokamax
