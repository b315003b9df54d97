// The CPU backend's sequence operations (internal; contracts in backend.hpp): layer
// normalisation and the token embedding (cpu_sequence.cpp), causal self-attention
// (cpu_attention.cpp). Loops built for the CPU's vector width (DRT_SIMD_CLONES) and split over
// the threads (cpu_parallel.hpp) so that the result does not depend on the thread count.
#pragma once

#include "drtrain/backend/backend.hpp"

namespace drt::backend::cpu {

void layernorm_forward(const LayerNormShape& s, const float* x, const float* gamma, const float* beta, float* y,
                       float* mean, float* inv_std);
void layernorm_backward(const LayerNormShape& s, const float* x, const float* dy, const float* gamma, const float* mean,
                        const float* inv_std, float* dx, float* dgamma, float* dbeta);

void embedding_forward(const EmbeddingShape& s, const float* ids, const float* table, float* y);
void embedding_backward(const EmbeddingShape& s, const float* ids, const float* dy, float* dtable, bool accumulate);

// `onednn`: which library the GEMMs of the tiles go to (cpu_gemm.hpp).
void attention_forward(bool onednn, const AttentionShape& s, const float* qkv, float* y, float* lse);
void attention_backward(bool onednn, const AttentionShape& s, const float* qkv, const float* y, const float* lse,
                        const float* dy, float* dqkv);

// The attention tiles' defaults (AttentionShape::tile_q/tile_k = 0).
constexpr int kAttentionTileQ = 64, kAttentionTileK = 128;

}  // namespace drt::backend::cpu
