// Attributes as data: RK_FIELDS(a, b, c) inside a struct lists its members once, and
// visit_fields(v) then calls v("a", a), v("b", b), ... (const and non-const). The op attributes
// use it, so a graph node's attributes are printed, written to JSON, read back and changed
// (training) without a second list kept in sync by hand. A member left out of the list is lost on
// a round trip, so every member is listed. Not here: the JSON itself (ops/op_list.cpp).
#pragma once
#include <concepts>

#define RK_PARENS_ ()
#define RK_EXPAND_(...) RK_EXPAND3_(RK_EXPAND3_(RK_EXPAND3_(RK_EXPAND3_(__VA_ARGS__))))
#define RK_EXPAND3_(...) RK_EXPAND2_(RK_EXPAND2_(RK_EXPAND2_(RK_EXPAND2_(__VA_ARGS__))))
#define RK_EXPAND2_(...) RK_EXPAND1_(RK_EXPAND1_(RK_EXPAND1_(RK_EXPAND1_(__VA_ARGS__))))
#define RK_EXPAND1_(...) __VA_ARGS__
#define RK_FOR_EACH_(m, ...) __VA_OPT__(RK_EXPAND_(RK_FOR_EACH_HELPER_(m, __VA_ARGS__)))
#define RK_FOR_EACH_HELPER_(m, a1, ...) m(a1) __VA_OPT__(RK_FOR_EACH_AGAIN_ RK_PARENS_(m, __VA_ARGS__))
#define RK_FOR_EACH_AGAIN_() RK_FOR_EACH_HELPER_
#define RK_VISIT_FIELD_(f) v(#f, f);
#define RK_FIELDS(...)                                                   \
  template <class V>                                                     \
  void visit_fields(V&& v) {                                             \
    RK_FOR_EACH_(RK_VISIT_FIELD_, __VA_ARGS__)                           \
  }                                                                      \
  template <class V>                                                     \
  void visit_fields(V&& v) const {                                       \
    RK_FOR_EACH_(RK_VISIT_FIELD_, __VA_ARGS__)                           \
  }

namespace reckon {

template <class A>
concept Reflected = requires(A& a, const A& c) {
  a.visit_fields([](const char*, auto&) {});
  c.visit_fields([](const char*, const auto&) {});
};

}  // namespace reckon
