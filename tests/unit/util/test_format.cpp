#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "shared/container/format.h"
#include "shared/util/error.h"

using namespace waste;

TEST_CASE("Kimi-Linear VQ3R record: 3 bits per weight plus row scales, 4 KiB stride") {
  RecordLayout l = record_layout(TensorFormat::VQ3R, 2304, 1024);
  CHECK_EQ(l.matrix_bytes(ExpertMatrix::Gate), 1024ull * 2304 * 3 / 8);
  CHECK_EQ(l.matrix_bytes(ExpertMatrix::Down), 2304ull * 1024 * 3 / 8);
  CHECK_EQ(l.stride % 4096, 0u);
  CHECK_EQ(l.stride, 2666496u);  // 64 header + 2,654,208 codes + 8,704 scale bytes, rounded up
  CHECK_EQ(l.gate_offset % 64, 0u);
  CHECK_EQ(l.down_offset % 64, 0u);
}

TEST_CASE("VQ3R code index is tile-blocked") {
  // Row 65 of a 128x16 matrix (G = 2): tile 1, vector 1, stage 2.
  CHECK_EQ(vq3r_code_index(65, 1, 2, 16), size_t((1 * 2 + 1) * 192 + 2 * 64 + 1));
  CHECK_EQ(vq3r_code_bytes(128, 16), size_t(2 * 2 * 192));
}

TEST_CASE("record header round trip and damage detection") {
  RecordLayout l = record_layout(TensorFormat::F32, 16, 8);
  std::vector<uint8_t> rec(l.stride, 0);
  for (size_t i = kRecordHeaderBytes; i < kRecordHeaderBytes + l.payload_bytes; ++i) rec[i] = uint8_t(i * 7);
  RecordHeader h = make_record_header(l, 3, 5, rec.data() + kRecordHeaderBytes);
  std::memcpy(rec.data(), &h, sizeof h);
  CHECK(check_record(rec.data(), l, 3, 5, true).empty());
  CHECK_NE(check_record(rec.data(), l, 3, 6, true).find("expert 6"), std::string::npos);
  rec[100] ^= 1;
  std::string why = check_record(rec.data(), l, 3, 5, true);
  CHECK_NE(why.find("checksum"), std::string::npos);
  CHECK_NE(why.find("layer 3 expert 5"), std::string::npos);
  CHECK(check_record(rec.data(), l, 3, 5, false).empty());
}

TEST_CASE("trunk tensor sizes") {
  TensorBytes q8 = trunk_tensor_bytes(TensorFormat::Q8G, 3, 64, 32);
  CHECK_EQ(q8.scales_offset, 192u);
  CHECK_EQ(q8.total, 192u + 3 * 2 * 2);
  TensorBytes q4 = trunk_tensor_bytes(TensorFormat::Q4G, 3, 64, 32);
  CHECK_EQ(q4.scales_offset, 128u);
  CHECK_EQ(q4.total, 128u + 12);
  CHECK_EQ(trunk_tensor_bytes(TensorFormat::F32, 3, 5, 0).total, 60u);
  CHECK_EQ(trunk_tensor_bytes(TensorFormat::BF16, 3, 5, 0).total, 30u);
  CHECK_EQ(trunk_tensor_bytes(TensorFormat::F16, 3, 5, 0).scales_offset, 0u);
  // One row's values (the embedding row read): q4g packs two per byte.
  CHECK_EQ(trunk_value_bytes(TensorFormat::Q4G, 64), 32u);
  CHECK_EQ(trunk_value_bytes(TensorFormat::Q4G, 3), 2u);
  CHECK_EQ(trunk_value_bytes(TensorFormat::Q8G, 64), 64u);
  CHECK_THROWS_AS(trunk_value_bytes(TensorFormat::VQ3R, 8), Error);
  CHECK_THROWS_AS(trunk_tensor_bytes(TensorFormat::VQ3R, 8, 8, 0), Error);
}
