// Internal to shared/kernels: the token-lane Q4G matmul of the AVX-512 VNNI path, for calls
// with many tokens (matvec_int8_avx512_tokens.cpp says how; same bits as matvec_int8.h's
// definition).
#pragma once
#include <cstdint>

#include "shared/kernels/matvec.h"

namespace waste {

class ThreadPool;

// Below this many tokens a call keeps the row-lane path: a block of 16 token lanes is only
// full from 16 tokens on.
constexpr int64_t kInt8TokensMinTokens = 16;

// True when the token-lane path takes this call (Q4G, n >= kInt8TokensMinTokens).
bool int8_tokens_handles(const MatrixView& w, int64_t n);
void matmul_int8_avx512_tokens(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool);

}  // namespace waste
