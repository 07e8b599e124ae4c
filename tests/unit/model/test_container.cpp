// The forward pass on a .waste container: trunk resident in RAM (BF16 matrices, f32 vectors),
// embedding read a row per token from trunk.bin, experts read as BF16 records. The fixtures'
// weights are bf16 (MXFP4 for K3's experts, also exact in bf16), so this storage is lossless
// and the reference tolerance applies unchanged.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/model/container_weights.h"
#include "compute/model/model.h"
#include "shared/container/reader.h"
#include "shared/hf/checkpoint.h"
#include "shared/util/file.h"
#include "tests/support/fixture_container.h"
#include "tests/support/temp_dir.h"

using namespace waste;

TEST_CASE("forward on a lossless container (BF16 trunk and experts) matches the reference logits") {
  const char* root = std::getenv("WASTE_SHARED_DIR");
  REQUIRE(root != nullptr);
  const test::TempDir tmp("waste-unit-model");
  for (const char* name : {"kimi-linear", "kimi-k3", "deepseek-v3"}) {
    CAPTURE(name);
    const std::string dir = std::string(root) + "/fixtures/" + name;
    const std::string out = tmp / name;
    {
      Checkpoint ck = Checkpoint::open(dir);
      test::write_fixture_container(ck, out, test::FixtureStorage::Lossless, "unit-model test");
    }
    Container container = Container::open(out);
    Trunk trunk(container, {"model.embed_tokens.weight"}, true);
    TrunkWeights weights(container, trunk);
    ContainerExperts experts(container);
    Model model = Model::create(weights, experts, container.config());

    const auto ids =
        nlohmann::json::parse(read_file_text(dir + "/tokens.json", 1 << 20)).at("input_ids").get<std::vector<int32_t>>();
    const std::vector<uint8_t> ref_bytes = read_file_bytes(dir + "/reference_logits.f32", 16 << 20);
    const int64_t V = container.config().vocab, n = int64_t(ids.size());
    REQUIRE(int64_t(ref_bytes.size()) == n * V * 4);
    std::vector<float> ref(size_t(n * V)), logits(size_t(n * V));
    std::memcpy(ref.data(), ref_bytes.data(), ref_bytes.size());
    Session s = model.new_session(n);
    model.forward(s, ids, logits.data(), LogitRows::All);
    double diff = 0;
    int argmax_mismatch = 0;
    for (int64_t t = 0; t < n; ++t) {
      const float* a = &logits[size_t(t * V)];
      const float* b = &ref[size_t(t * V)];
      for (int64_t i = 0; i < V; ++i) diff = std::max(diff, double(std::fabs(a[i] - b[i])));
      if (std::max_element(a, a + V) - a != std::max_element(b, b + V) - b) ++argmax_mismatch;
    }
    MESSAGE(std::string(name), " from a BF16 container: max |logit diff| ", diff);
    CHECK(diff <= 1e-3);
    CHECK(argmax_mismatch == 0);
  }
}
