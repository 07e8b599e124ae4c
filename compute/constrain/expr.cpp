#include "compute/constrain/expr.h"

#include <algorithm>

namespace waste::constrain {

namespace {

ExprPtr make(Expr e) { return std::make_shared<const Expr>(std::move(e)); }

}  // namespace

ExprPtr e_empty() {
  static const ExprPtr e = make(Expr{});
  return e;
}

ExprPtr e_nothing() {
  static const ExprPtr e = [] {
    Expr x;
    x.kind = Expr::Kind::Nothing;
    return make(std::move(x));
  }();
  return e;
}

ExprPtr e_bytes(std::vector<ByteRange> ranges) {
  if (ranges.empty()) return e_nothing();
  Expr x;
  x.kind = Expr::Kind::Bytes;
  x.ranges = std::move(ranges);
  return make(std::move(x));
}

ExprPtr e_byte(uint8_t b) { return e_bytes({{b, b}}); }
ExprPtr e_range(uint8_t lo, uint8_t hi) { return e_bytes({{lo, hi}}); }

ExprPtr e_literal(std::string_view bytes) {
  std::vector<ExprPtr> items;
  for (char c : bytes) items.push_back(e_byte(uint8_t(c)));
  return e_seq(std::move(items));
}

ExprPtr e_seq(std::vector<ExprPtr> items) {
  // Flatten, drop empties, and collapse to Nothing: keeps the automata small and lets an
  // unsatisfiable part make its whole sequence unsatisfiable at once.
  std::vector<ExprPtr> flat;
  for (ExprPtr& e : items) {
    if (e->kind == Expr::Kind::Nothing) return e_nothing();
    if (e->kind == Expr::Kind::Empty) continue;
    if (e->kind == Expr::Kind::Seq) flat.insert(flat.end(), e->items.begin(), e->items.end());
    else flat.push_back(std::move(e));
  }
  if (flat.empty()) return e_empty();
  if (flat.size() == 1) return flat[0];
  Expr x;
  x.kind = Expr::Kind::Seq;
  x.items = std::move(flat);
  return make(std::move(x));
}

ExprPtr e_alt(std::vector<ExprPtr> items) {
  std::vector<ExprPtr> keep;
  for (ExprPtr& e : items)
    if (e->kind != Expr::Kind::Nothing) keep.push_back(std::move(e));
  if (keep.empty()) return e_nothing();
  if (keep.size() == 1) return keep[0];
  Expr x;
  x.kind = Expr::Kind::Alt;
  x.items = std::move(keep);
  return make(std::move(x));
}

ExprPtr e_repeat(ExprPtr item, uint32_t min, uint32_t max) {
  if (max != kUnbounded && max < min) return e_nothing();
  if (max == 0) return e_empty();
  if (item->kind == Expr::Kind::Nothing) return min == 0 ? e_empty() : e_nothing();
  if (min == 1 && max == 1) return item;
  Expr x;
  x.kind = Expr::Kind::Repeat;
  x.items = {std::move(item)};
  x.min = min;
  x.max = max;
  return make(std::move(x));
}

ExprPtr e_opt(ExprPtr item) { return e_alt({e_empty(), std::move(item)}); }

ExprPtr e_call(uint32_t rule) {
  Expr x;
  x.kind = Expr::Kind::Call;
  x.rule = rule;
  return make(std::move(x));
}

ExprPtr e_object(std::vector<ObjectField> fields, ExprPtr ws) {
  for (const ObjectField& f : fields)
    if (f.required && f.value->kind == Expr::Kind::Nothing) return e_nothing();
  Expr x;
  x.kind = Expr::Kind::Object;
  for (ObjectField& f : fields)
    if (f.value->kind != Expr::Kind::Nothing) x.fields.push_back(std::move(f));  // an impossible optional one is never emitted
  x.ws = std::move(ws);
  return make(std::move(x));
}

uint64_t expr_size(const Expr& e) {
  auto cap = [](uint64_t v) { return std::min<uint64_t>(v, 1ull << 40); };
  switch (e.kind) {
    case Expr::Kind::Empty:
    case Expr::Kind::Nothing: return 1;
    case Expr::Kind::Bytes:
    case Expr::Kind::Call: return 2;
    case Expr::Kind::Seq:
    case Expr::Kind::Alt: {
      uint64_t n = 2;
      for (const ExprPtr& i : e.items) n = cap(n + expr_size(*i));
      return n;
    }
    case Expr::Kind::Repeat: {
      const uint64_t copies = e.max == kUnbounded ? uint64_t(e.min) + 1 : e.max;
      return cap(2 + copies * expr_size(*e.items[0]));
    }
    case Expr::Kind::Object: {
      const uint64_t ws = expr_size(*e.ws);
      uint64_t n = 4 + 2 * ws;
      for (const ObjectField& f : e.fields) n = cap(n + f.key.size() + 3 * ws + 4 + expr_size(*f.value));
      return n;
    }
  }
  return 1;
}

}  // namespace waste::constrain
