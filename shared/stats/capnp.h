// Statistics structs (stat.h) to a Cap'n Proto struct and back, each statistic by its field
// name (the dynamic API: the list names the field, the schema gives its type). A listed
// statistic whose field the struct lacks throws; tests/unit/stats checks every list against
// its schemas both ways.
#pragma once
#include <capnp/dynamic.h>

#include <string>
#include <type_traits>

#include "shared/stats/stat.h"

namespace waste::stats {

template <class S, class Builder>
void to_capnp(const S& s, Builder b) {
  capnp::DynamicStruct::Builder d = capnp::toDynamic(b);
  each(s, [&](const Stat& st, const auto& v) {
    d.set(kj::StringPtr(std::string(st.field).c_str()), capnp::DynamicValue::Reader(v));
  });
}

template <class S, class Reader>
void from_capnp(Reader r, S& s) {
  capnp::DynamicStruct::Reader d = capnp::toDynamic(r);
  each(s, [&](const Stat& st, auto& v) {
    v = d.get(kj::StringPtr(std::string(st.field).c_str())).template as<std::remove_reference_t<decltype(v)>>();
  });
}

template <class S, class Reader>
S from_capnp(Reader r) {
  S s;
  from_capnp(r, s);
  return s;
}

}  // namespace waste::stats
