#include "compute/model/rvq_experts.h"

#include <algorithm>
#include <string>
#include <vector>

#include "shared/rvq/kernels.h"
#include "shared/util/error.h"
#include "shared/util/thread_pool.h"

namespace waste {

struct RvqExpertBatch::Impl {
  ExpertActivation act;
  const float* z = nullptr;
  int64_t n = 0;
  int hidden = 0;
  const float* books = nullptr;   // codebooks the built tables belong to
  std::vector<ExpertTables> tables;
  std::vector<bool> built;
  ExpertScratch scratch;
  std::vector<const ExpertTables*> selected;
  std::vector<const float*> build_inputs;  // rows of this call whose tables are not built yet
  std::vector<ExpertTables*> build_out;
};

RvqExpertBatch::RvqExpertBatch(bool situ, float beta, float beta_linear) : impl_(std::make_unique<Impl>()) {
  impl_->act.kind = situ ? ExpertActivation::Kind::SiTU : ExpertActivation::Kind::SiLU;
  impl_->act.beta = beta;
  impl_->act.beta_linear = beta_linear;
}

RvqExpertBatch::~RvqExpertBatch() = default;

void RvqExpertBatch::set_inputs(const float* z, int64_t n, int hidden) {
  impl_->z = z;
  impl_->n = n;
  impl_->hidden = hidden;
  impl_->books = nullptr;
  // Tables of earlier calls are kept and rebuilt in place: freeing and reallocating them per
  // layer (hundreds of KiB per row) made the allocator return and re-fault the memory (with
  // transparent huge pages, 2 MiB cleared per fault), which cost more than the experts
  // themselves at 8 rows. Beyond kKeptRows (a prefill) the surplus is freed again.
  constexpr size_t kKeptRows = 16;
  if (impl_->tables.size() < size_t(n)) impl_->tables.resize(size_t(n));
  else if (impl_->tables.size() > std::max(size_t(n), kKeptRows)) impl_->tables.resize(std::max(size_t(n), kKeptRows));
  impl_->built.assign(size_t(n), false);
}

void RvqExpertBatch::build_missing(const float* codebooks, const int64_t* rows, int64_t m) {
  Impl& s = *impl_;
  if (codebooks != s.books) {  // a layer shares its books; new books mean new tables
    s.books = codebooks;
    s.built.assign(size_t(s.n), false);
  }
  s.build_inputs.clear();
  s.build_out.clear();
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = rows ? rows[i] : i;
    require(r >= 0 && r < s.n, "VQ3R expert apply: row out of range");
    if (s.built[size_t(r)]) continue;
    s.build_inputs.push_back(s.z + r * s.hidden);
    s.build_out.push_back(&s.tables[size_t(r)]);
    s.built[size_t(r)] = true;
  }
  // On every thread: built one by one on this thread they left the pool idle (72 us a row for
  // gate and up on the Kimi-Linear shape, 2026-12-05).
  build_expert_tables_batch(s.build_inputs.data(), int(s.build_inputs.size()), s.hidden, codebooks,
                            s.build_out.data(), &ThreadPool::global());
}

void RvqExpertBatch::build_all(const float* codebooks) { build_missing(codebooks, nullptr, impl_->n); }

void RvqExpertBatch::apply_rows_alone(const ExpertView& v, const int64_t* rows, const float* weights, int64_t m,
                                      float* out) const {
  const Impl& s = *impl_;
  require(v.hidden == s.hidden, "VQ3R expert of width " + std::to_string(v.hidden) + " applied to rows of width " +
                                    std::to_string(s.hidden));
  require(v.codebooks == s.books, "VQ3R expert apply: the layer's tables were built for other codebooks");
  require(m >= 0 && m <= kThreadExpertRows, "VQ3R expert apply: " + std::to_string(m) + " rows on one thread (at most " +
                                            std::to_string(kThreadExpertRows) + ")");
  // Each thread's own, kept at its largest (kThreadExpertRows rows: the memory plan counts one
  // per thread), so concurrent calls share nothing but the read-only tables.
  thread_local ExpertScratch scratch;
  thread_local std::vector<const ExpertTables*> selected;
  selected.resize(size_t(m));
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = rows[i];
    require(r >= 0 && r < s.n && s.built[size_t(r)], "VQ3R expert apply: row out of range or its tables not built");
    selected[size_t(i)] = &s.tables[size_t(r)];
  }
  std::fill(out, out + size_t(m) * size_t(s.hidden), 0.0f);
  apply_expert_batch(v, selected.data(), weights, int(m), s.act, scratch, out, nullptr);
}

void RvqExpertBatch::apply_rows(const ExpertView& v, const int64_t* rows, const float* weights, int64_t m, float* out) {
  Impl& s = *impl_;
  require(v.hidden == s.hidden, "VQ3R expert of width " + std::to_string(v.hidden) + " applied to rows of width " +
                                    std::to_string(s.hidden));
  build_missing(v.codebooks, rows, m);
  s.selected.resize(size_t(m));
  for (int64_t i = 0; i < m; ++i) s.selected[size_t(i)] = &s.tables[size_t(rows[i])];
  std::fill(out, out + size_t(m) * size_t(s.hidden), 0.0f);
  // Row tiles of each expert matrix are spread over the pool (the result does not depend on
  // the split). The experts themselves run one after another, in the order they arrive.
  apply_expert_batch(v, s.selected.data(), weights, int(m), s.act, s.scratch, out, &ThreadPool::global());
}

}  // namespace waste
