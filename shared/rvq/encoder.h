// VQ3R encoder: codebook training and matrix encoding (3 stages x 256 entries x 8 dims per
// layer and matrix kind, one f16 scale per row; layout in shared/container/format.h).
//
// Rows are normalised to unit RMS before training and assignment (the f16 row scale carries
// the magnitude), so one codebook set serves every expert of a layer whatever its row norms.
// Everything is deterministic for a given seed, whatever the thread count.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace waste {

class ThreadPool;

enum class RvqEffort {
  Greedy = 0,  // stage by stage nearest entry (fast; converter default)
  Beam = 1,    // beam search over the stages, then `refine_passes` of per-stage re-assignment
};

struct RvqOptions {
  RvqEffort effort = RvqEffort::Greedy;
  int beam_width = 8;        // Beam: candidates kept after each stage
  int refine_passes = 2;     // Beam: re-assign one stage given the other two, per pass
  int kmeans_iters = 10;     // Lloyd iterations per stage when training
  int train_refine_passes = 2;  // training: (assign all stages, least-squares codebook update) rounds
  size_t max_train_vectors = size_t(1) << 18;  // training sample cap (vectors of 8), drawn by seed
  uint64_t seed = 0x5eed;
  bool optimize_scale = true;  // row scale = least-squares fit of the coded row (not just its RMS)
  ThreadPool* pool = nullptr;  // nullptr: ThreadPool::global()
};

struct EncodeStats {
  double sum_sq_error = 0;  // sum over weights of (W - decoded)^2
  double sum_sq = 0;        // sum over weights of W^2
  double relative_mse() const { return sum_sq > 0 ? sum_sq_error / sum_sq : 0.0; }
};

// Trains the three stage codebooks of one matrix kind on `n_rows` rows of width `cols`
// (cols % 8 == 0), e.g. rows sampled from several experts of a layer. Returns kCodebookFloats
// floats, stage-major [3][256][8].
std::vector<float> train_codebooks(const float* rows_sample, size_t n_rows, int cols, const RvqOptions& opt);

// Encodes W [rows, cols] (row-major f32) against `books` (kCodebookFloats floats).
// codes: vq3r_code_bytes(rows, cols) bytes (tile-blocked, see format.h; padding rows of the last
// tile are written as 0); scales: `rows` f16 values.
EncodeStats encode_matrix(const float* W, int rows, int cols, const float* books, const RvqOptions& opt,
                          uint8_t* codes, uint16_t* scales);

// The inverse: W[r] = scale[r] * sum_s books[s][idx_s] (tests, tools, error reports).
void decode_matrix(const uint8_t* codes, const uint16_t* scales, int rows, int cols, const float* books, float* W);

// Decodes one row into out[cols].
void decode_row(const uint8_t* codes, const uint16_t* scales, int row, int cols, const float* books, float* out);

}  // namespace waste
