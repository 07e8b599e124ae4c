// A peer's Cap'n Proto message from fuzz bytes: the flat-array framing (segment table, then the
// segments) a two-party connection carries, copied into word-aligned memory and read with
// bounded options. Malformed framing or pointers throw kj::Exception, which the RPC system
// turns into an error for the peer: a clean refusal, like waste::Error.
#pragma once
#include <capnp/serialize.h>
#include <kj/array.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

namespace waste::fuzz {

// Far below the servers' own limits (iod's default 64 MiB, compute's 80 MiB): a message of a few
// KB can still point at the same bytes many times, and each exec must stay fast. The depth is
// Cap'n Proto's default.
inline capnp::ReaderOptions fuzz_reader_options() {
  capnp::ReaderOptions o;
  o.traversalLimitInWords = 1u << 20;
  o.nestingLimit = 64;
  return o;
}

class FuzzMessage {
 public:
  // The bytes past the last whole word are dropped (a framed message is whole words).
  FuzzMessage(const uint8_t* data, size_t size) : words_(kj::heapArray<capnp::word>(size / sizeof(capnp::word))) {
    if (words_.size() > 0) std::memcpy(words_.begin(), data, words_.size() * sizeof(capnp::word));
    reader_ = std::make_unique<capnp::FlatArrayMessageReader>(words_.asPtr(), fuzz_reader_options());
  }
  template <typename T>
  typename T::Reader root() {
    return reader_->getRoot<T>();
  }

 private:
  kj::Array<capnp::word> words_;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
};

}  // namespace waste::fuzz
