// Images in a prompt below the processes: a placeholder expands into one position per image
// token and counts must agree (errors name the field); input rows go where the runs are, in
// prompt order, across chunk boundaries; the prompt cache's key tells images apart; and the
// model fed input rows equal to the embedding table's rows gives the same logits bit for bit
// as the ids themselves, while other rows change them (so the rows really are the inputs).
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/support/checkpoint_weights.h"
#include "compute/model/model.h"
#include "compute/vision/media_prompt.h"
#include "shared/hf/checkpoint.h"
#include "shared/util/error.h"
#include "tests/support/error_of.h"
#include "tests/unit/fixture_dir.h"

using namespace waste;
using waste::test::error_of;

namespace {

std::shared_ptr<const std::vector<float>> rows_of(int64_t n, int64_t hidden, float base) {
  auto v = std::make_shared<std::vector<float>>(size_t(n * hidden));
  for (size_t i = 0; i < v->size(); ++i) (*v)[i] = base + float(i);
  return v;
}

}  // namespace

TEST_CASE("expand_media: each placeholder becomes its image's positions, in order") {
  const std::vector<int32_t> ids = {1, 9, 2, 3, 9, 4};
  const std::vector<int64_t> counts = {3, 2};
  const MediaPrompt p = expand_media(ids, 9, counts, "messages");
  CHECK(p.ids == std::vector<int32_t>{1, 9, 9, 9, 2, 3, 9, 9, 4});
  REQUIRE(p.images.size() == 2);
  CHECK(p.images[0].at == 1);
  CHECK(p.images[0].tokens == 3);
  CHECK(p.images[1].at == 6);
  CHECK(p.images[1].tokens == 2);
  CHECK(p.image_tokens() == 5);
  CHECK(expand_media(ids, -1, {}, "f").ids == ids);  // no placeholder id: nothing expands

  const std::vector<int64_t> one = {3}, three = {1, 1, 1};
  CHECK(error_of([&] { expand_media(ids, 9, one, "messages"); }).find("messages: the prompt has more image placeholders") == 0);
  CHECK(error_of([&] { expand_media(ids, 9, three, "images"); }).find("images: 3 images given but the prompt has 2") == 0);
}

TEST_CASE("image_inputs: rows where the runs are, across chunk boundaries; none outside") {
  const int64_t D = 4;
  std::vector<ImageRun> runs = {{2, 3, rows_of(3, D, 100), 1}, {7, 1, rows_of(1, D, 500), 2}};
  std::vector<const float*> in;
  image_inputs(runs, 0, 2, D, in);
  CHECK(in.empty());  // no image in [0, 2)
  image_inputs(runs, 0, 4, D, in);
  REQUIRE(in.size() == 4);
  CHECK(in[0] == nullptr);
  CHECK(in[1] == nullptr);
  CHECK(in[2] == runs[0].rows->data());
  CHECK(in[3] == runs[0].rows->data() + D);
  image_inputs(runs, 4, 4, D, in);  // the first run's last row, then the second run
  REQUIRE(in.size() == 4);
  CHECK(in[0] == runs[0].rows->data() + 2 * D);
  CHECK(in[1] == nullptr);
  CHECK(in[3] == runs[1].rows->data());
  shift_images(runs, 1);
  image_inputs(runs, 2, 1, D, in);
  CHECK(in.empty());  // moved by the token fed in front
  runs[0].rows.reset();
  CHECK(error_of([&] { image_inputs(runs, 0, 8, D, in); }).find("missing") != std::string::npos);
}

TEST_CASE("cache_key: image positions compare by image, never equal a vocabulary id") {
  const std::vector<int32_t> ids = {1, 9, 9, 2};
  std::vector<ImageRun> a = {{1, 2, nullptr, 111}}, b = {{1, 2, nullptr, 222}};
  const std::vector<int32_t> ka = cache_key(ids, a), kb = cache_key(ids, b);
  CHECK(ka[0] == 1);
  CHECK(ka[3] == 2);
  CHECK(ka[1] < 0);
  CHECK(ka[2] < 0);
  CHECK(ka[1] != ka[2]);  // positions inside an image differ too
  CHECK(ka != kb);
  CHECK(cache_key(ids, a) == ka);  // deterministic
}

TEST_CASE("placeholder_rows: the i-th placeholder takes row i, counts must agree") {
  const std::vector<int32_t> ids = {5, 9, 6, 9};
  const std::vector<float> rows = {1, 2, 3, 4};
  const std::vector<ImageRun> r = placeholder_rows(ids, 9, rows, 2, "E");
  REQUIRE(r.size() == 2);
  CHECK(r[0].at == 1);
  CHECK((*r[1].rows)[0] == 3);
  CHECK(error_of([&] { placeholder_rows(ids, 9, std::vector<float>{1, 2}, 2, "E"); }).find("E: 1 rows") == 0);
  CHECK(error_of([&] { placeholder_rows(ids, 9, std::vector<float>{1, 2, 3}, 2, "E"); }).find("whole rows") != std::string::npos);
}

TEST_CASE("Model::forward with input rows: the table's own rows change nothing, other rows change the logits") {
  for (const std::string name : {"kimi-k3", "kimi-linear"}) {
    CAPTURE(name);
    Checkpoint ckpt = Checkpoint::open(fixture_dir(name.c_str()));
    CheckpointWeights weights(ckpt);
    CheckpointExperts experts(ckpt);
    Model model = Model::create(weights, experts, ckpt.config());
    const int64_t D = ckpt.config().hidden, V = ckpt.config().vocab;
    const std::vector<int32_t> ids = {1, 17, 33, 5, 8, 13};
    std::vector<float> table(size_t(ids.size() * D));
    for (size_t t = 0; t < ids.size(); ++t) weights.embedding_row(ids[t], &table[t * size_t(D)]);

    std::vector<float> plain(size_t(ids.size() * V)), fed(plain.size()), other(plain.size());
    Session a = model.new_session(64), b = model.new_session(64), c = model.new_session(64);
    model.forward(a, ids, plain.data(), LogitRows::All);
    std::vector<const float*> in(ids.size(), nullptr);
    for (size_t t : {2, 3}) in[t] = &table[t * size_t(D)];
    model.forward(b, ids, in, fed.data(), LogitRows::All);
    CHECK(std::memcmp(plain.data(), fed.data(), plain.size() * sizeof(float)) == 0);

    std::vector<float> swapped(table);
    std::swap_ranges(swapped.begin() + 2 * D, swapped.begin() + 3 * D, swapped.begin() + 4 * D);  // rows 2 and 4
    for (size_t t : {2, 3}) in[t] = &swapped[t * size_t(D)];
    model.forward(c, ids, in, other.data(), LogitRows::All);
    // Rows before the replaced position are untouched (causal), from it on they differ.
    CHECK(std::memcmp(plain.data(), other.data(), size_t(2 * V) * sizeof(float)) == 0);
    CHECK(std::memcmp(plain.data() + 2 * V, other.data() + 2 * V, size_t(V) * sizeof(float)) != 0);

    std::vector<const float*> wrong(2, nullptr);
    Session d = model.new_session(64);
    CHECK(error_of([&] { model.forward(d, ids, wrong, plain.data(), LogitRows::Last); }).find("2 input rows for 6 tokens") !=
          std::string::npos);
  }
}
