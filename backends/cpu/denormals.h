// Denormal numbers flushed to zero on the calling thread for a scope.
//
// The chunked delta rule (ops/common/delta_rule_chunk.h) multiplies decay factors down to e^-86
// into its operands, so its products pass through the denormal range, where every x86 multiply
// that produces or reads one takes a microcode assist of about a hundred cycles: one
// kimi_delta_attention prefill ran 2.7x slower than token by token until its tasks flushed them.
// Values below 1.2e-38 next to the O(1) terms they are summed with change no result that a
// tolerance can see.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace tokamax::cpu {

class ScopedFlushDenormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  // MXCSR's FTZ (bit 15: results flushed) and DAZ (bit 6: operands read as zero).
  ScopedFlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~ScopedFlushDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#else
  ScopedFlushDenormals() = default;
#endif
 public:
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;
};

}  // namespace tokamax::cpu
